#include "frequency_sketch.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace kvtier {

FrequencySketch::FrequencySketch(unsigned width_log2) {
  if (width_log2 < 4 || width_log2 > 28) {
    throw std::invalid_argument("FrequencySketch: width_log2 must be in [4, 28]");
  }
  const size_t width = size_t{1} << width_log2;
  mask_ = width - 1;
  halve_every_ = width / 4;
  counters_.assign(kRows * width, 0);
}

std::array<size_t, FrequencySketch::kRows> FrequencySketch::slots(const ChunkKey& key) const {
  // A chunk key is already a 128-bit hash: each row takes its own 32 bits of it.
  const size_t width = mask_ + 1;
  return {(key.lo & mask_), width + ((key.lo >> 32) & mask_), 2 * width + (key.hi & mask_),
          3 * width + ((key.hi >> 32) & mask_)};
}

void FrequencySketch::add(const ChunkKey& key) {
  for (size_t s : slots(key)) {
    if (counters_[s] < std::numeric_limits<uint8_t>::max()) ++counters_[s];
  }
  if (++adds_ >= halve_every_) {
    adds_ = 0;
    ++halvings_;
    for (uint8_t& c : counters_) c = static_cast<uint8_t>(c >> 1);
  }
}

uint32_t FrequencySketch::estimate(const ChunkKey& key) const {
  uint32_t least = std::numeric_limits<uint8_t>::max();
  for (size_t s : slots(key)) least = std::min<uint32_t>(least, counters_[s]);
  return least;
}

void FrequencySketch::clear() {
  std::ranges::fill(counters_, 0);
  adds_ = 0;
}

}  // namespace kvtier
