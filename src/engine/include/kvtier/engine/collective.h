// Collective: the tensor-parallel reduction the tiny model's ranks use.
//
// Contract for every implementation:
// - all_reduce_sum is called by every rank of the group, in the same order, with spans of the
//   same length. It returns once every rank's span holds, element by element,
//       buffer_rank0 + buffer_rank1 + … + buffer_rank(N-1)
//   summed left to right in float32 (this order, always), so the result is deterministic and
//   the same on every rank.
// - It blocks until all ranks have arrived. A rank that never arrives blocks the others; an
//   implementation between processes must bound that with its own deadline / liveness check.
// - Spans of different lengths are a programming error (std::invalid_argument on every rank
//   that can see it).
//
// TinyModel uses it as an all-gather: each rank fills the elements it owns and leaves +0.0
// elsewhere, so the sum reproduces each owner's value exactly (tiny_model.h lists the calls).
#pragma once

#include <cstdint>
#include <span>

namespace kvtier {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual uint32_t rank() const = 0;
  virtual uint32_t world_size() const = 0;
  virtual void all_reduce_sum(std::span<float> data) = 0;
};

// world_size 1: all_reduce_sum leaves the data as it is.
class SingleRankCollective final : public Collective {
 public:
  uint32_t rank() const override { return 0; }
  uint32_t world_size() const override { return 1; }
  void all_reduce_sum(std::span<float>) override {}
};

}  // namespace kvtier
