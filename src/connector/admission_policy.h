// AdmissionPolicy: which computed chunks are worth storing. Internal to connector/.
//
// Every request's prompt chunk keys are counted once, at its first lookup, in a FrequencySketch.
// A chunk is admitted when the sketch has seen it at least `threshold()` times:
// - store_threshold, while the workload reuses prefixes: with the default 1 every chunk a
//   prompt computes is stored, so a conversation's first round is there when its second comes;
// - at least 2, once none of the last `window` requests began with a prefix an earlier request
//   had looked up (a workload without reuse): a chunk is then stored only when a second request
//   asks for it, so stores nobody will load stop taking copy bandwidth and CPU from the engine.
//   The first request that reuses a prefix turns store_threshold back on.
// The policy starts by admitting (the first `window` requests decide), and window 0 turns the
// adaptation off (store_threshold alone decides).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "frequency_sketch.h"
#include "kvtier/core/chunk_key.h"

namespace kvtier {

class AdmissionPolicy {
 public:
  AdmissionPolicy(uint32_t store_threshold, uint32_t window);

  // A request's first lookup: the keys of its prompt's full chunks, per KV-cache group.
  void observe(std::span<const std::span<const ChunkKey>> prompt_keys);
  bool admits(const ChunkKey& key) const {
    const uint32_t t = threshold();
    return t <= 1 || sketch_.estimate(key) >= t;
  }
  // The lookups a chunk needs now.
  uint32_t threshold() const;
  bool reuse_seen() const;  // false once `window` requests in a row reused nothing
  void clear();             // reset_cache(): forget counts and reuse

 private:
  uint32_t store_threshold_;
  uint32_t window_;
  FrequencySketch sketch_;
  std::vector<bool> recent_;  // ring of the last `window` requests: did it reuse a prefix
  size_t next_ = 0;           // ring position
  size_t observed_ = 0;       // requests observed, saturating at window
  size_t reusing_ = 0;        // true entries in recent_
};

}  // namespace kvtier
