// FrequencySketch: how often each chunk key was seen recently, in fixed memory (a count-min
// sketch with TinyLFU's aging). Internal to connector/.
//
// Contract:
// - estimate(k) is never below the number of add(k) since the last halving, and only above it
//   when other keys collide with k in every row (rare while the sketch is far from full).
// - Every `halve_every` adds, every counter is halved: counts decay, so the sketch describes
//   the recent past and a key seen once long ago reads 0 again. That also keeps the rows sparse,
//   so the estimate of a key never seen stays 0 with high probability.
// - Counters saturate at 255.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtier/core/chunk_key.h"

namespace kvtier {

class FrequencySketch {
 public:
  // `width_log2`: each of the 4 rows has 2^width_log2 one-byte counters.
  explicit FrequencySketch(unsigned width_log2 = 18);

  void add(const ChunkKey& key);
  uint32_t estimate(const ChunkKey& key) const;
  void clear();
  uint64_t halvings() const { return halvings_; }

 private:
  static constexpr size_t kRows = 4;
  std::array<size_t, kRows> slots(const ChunkKey& key) const;

  size_t mask_;
  size_t halve_every_;  // a quarter of a row: rows stay sparse between halvings
  size_t adds_ = 0;
  uint64_t halvings_ = 0;
  std::vector<uint8_t> counters_;  // kRows rows, one after the other
};

}  // namespace kvtier
