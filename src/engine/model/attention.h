// Causal attention of one query head over keys/values gathered from the paged cache.
//
// The result for a query depends only on the query and on the K/V of the positions it attends
// to, computed in a fixed order — never on which other queries share the call or where the
// gathered range begins. That is what makes chunked prefill and prefill after a cache load
// bit-identical to one long prefill. The fixed orders:
//   score(t)      = sum over d = 0 … head_dim-1 of q[d] * k_t[d]
//   softmax sum   = kLanes partial sums, lane j taking positions lo + j, lo + j + kLanes, …,
//                   then combined lane 0 + lane 1 + … (lo = the query's window start)
//   out[d]        = sum over t = lo … position of w_t * v_t[d], ascending, then * (1 / sum)
#pragma once

#include <cstdint>
#include <vector>

#include "paged_kv.h"

namespace kvtier::model_internal {

// Positions per K tile and lanes of the softmax sum: the width loops vectorize over.
inline constexpr uint32_t kLanes = 8;

// K and V of one (layer, KV head) for positions [first, first + count). K is stored in tiles
// of kLanes positions, [tile][head_dim][kLanes] (zero-padded), so scores vectorize over
// positions; V as [count][head_dim].
class HeadKv {
 public:
  void gather(const PagedKv& cache, uint32_t layer, uint32_t kv_head, uint32_t head_dim,
              uint32_t first, uint32_t end);

  uint32_t first() const { return first_; }
  uint32_t count() const { return count_; }
  uint32_t head_dim() const { return head_dim_; }
  // The K tile holding positions first + tile * kLanes + [0, kLanes).
  const float* k_tile(uint32_t tile) const {
    return k_tiles_.data() + size_t{tile} * head_dim_ * kLanes;
  }
  const float* v_at(uint32_t position) const {
    return v_.data() + size_t{position - first_} * head_dim_;
  }

 private:
  uint32_t first_ = 0;
  uint32_t count_ = 0;
  uint32_t head_dim_ = 0;
  std::vector<float> k_tiles_;
  std::vector<float> v_;
};

// out[head_dim] = softmax(q . K) V over positions [window_start(position, window), position].
// `q` is already scaled by 1/sqrt(head_dim). `kv` must hold that range; `scores` is scratch.
void attend(const float* q, uint32_t position, uint32_t window, const HeadKv& kv,
            std::vector<float>& scores, float* out);

// The first position a query at `position` attends to.
inline uint32_t window_start(uint32_t position, uint32_t window) {
  return window == 0 || position + 1 < window ? 0 : position + 1 - window;
}

}  // namespace kvtier::model_internal
