// Causal attention of one query head over keys/values gathered from the paged cache.
//
// The result for a query depends only on the query and on the K/V of the positions it attends
// to, computed in a fixed order (scores: sum over head_dim ascending; softmax sum and the
// weighted V sum: positions ascending from the window start) — never on which other queries
// share the call or where the gathered range begins. That is what makes chunked prefill and
// prefill after a cache load bit-identical to one long prefill.
#pragma once

#include <cstdint>
#include <vector>

#include "paged_kv.h"

namespace kvtier::model_internal {

// K and V of one (layer, KV head) for positions [first, first + count): K transposed
// ([head_dim][count]) so that scores vectorize over positions, V as [count][head_dim].
class HeadKv {
 public:
  void gather(const PagedKv& cache, uint32_t layer, uint32_t kv_head, uint32_t head_dim,
              uint32_t first, uint32_t end);

  uint32_t first() const { return first_; }
  uint32_t count() const { return count_; }
  const float* k_row(uint32_t d) const { return k_t_.data() + size_t{d} * count_; }
  const float* v_at(uint32_t position) const {
    return v_.data() + size_t{position - first_} * head_dim_;
  }
  uint32_t head_dim() const { return head_dim_; }

 private:
  uint32_t first_ = 0;
  uint32_t count_ = 0;
  uint32_t head_dim_ = 0;
  std::vector<float> k_t_;
  std::vector<float> v_;
};

// out[head_dim] = softmax(q . K) V over positions [lo, position], lo = 0 for window 0, else
// max(0, position + 1 - window). `q` is already scaled by 1/sqrt(head_dim). `kv` must hold
// [lo, position]; `scores` is scratch.
void attend(const float* q, uint32_t position, uint32_t window, const HeadKv& kv,
            std::vector<float>& scores, float* out);

// The first position a query at `position` attends to.
inline uint32_t window_start(uint32_t position, uint32_t window) {
  return window == 0 || position + 1 < window ? 0 : position + 1 - window;
}

}  // namespace kvtier::model_internal
