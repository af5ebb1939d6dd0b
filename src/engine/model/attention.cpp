#include "attention.h"

#include <stdexcept>

#include "model_math.h"

namespace kvtier::model_internal {

void HeadKv::gather(const PagedKv& cache, uint32_t layer, uint32_t kv_head, uint32_t head_dim,
                    uint32_t first, uint32_t end) {
  first_ = first;
  count_ = end - first;
  head_dim_ = head_dim;
  k_t_.resize(size_t{count_} * head_dim);
  v_.resize(size_t{count_} * head_dim);
  for (uint32_t t = 0; t < count_; ++t) {
    const float* k = cache.head(layer, 0, first + t, kv_head);
    const float* v = cache.head(layer, 1, first + t, kv_head);
    for (uint32_t d = 0; d < head_dim; ++d) {
      k_t_[size_t{d} * count_ + t] = k[d];
      v_[size_t{t} * head_dim + d] = v[d];
    }
  }
}

void attend(const float* q, uint32_t position, uint32_t window, const HeadKv& kv,
            std::vector<float>& scores, float* out) {
  const uint32_t lo = window_start(position, window);
  if (lo < kv.first() || position >= kv.first() + kv.count()) {
    throw std::logic_error("attend: gathered K/V do not cover the query's window");
  }
  const uint32_t n = position + 1 - lo;
  const uint32_t offset = lo - kv.first();
  scores.assign(n, 0.0f);
  float* s = scores.data();
  for (uint32_t d = 0; d < kv.head_dim(); ++d) {
    const float qd = q[d];
    const float* k = kv.k_row(d) + offset;
    for (uint32_t t = 0; t < n; ++t) s[t] += qd * k[t];
  }
  float max = s[0];
  for (uint32_t t = 1; t < n; ++t) max = s[t] > max ? s[t] : max;
  for (uint32_t t = 0; t < n; ++t) s[t] = exp_nonpositive(s[t] - max);
  float sum = 0.0f;
  for (uint32_t t = 0; t < n; ++t) sum += s[t];
  const uint32_t dim = kv.head_dim();
  for (uint32_t d = 0; d < dim; ++d) out[d] = 0.0f;
  for (uint32_t t = 0; t < n; ++t) {
    const float w = s[t];
    const float* v = kv.v_at(lo + t);
    for (uint32_t d = 0; d < dim; ++d) out[d] += w * v[d];
  }
  const float inv = 1.0f / sum;
  for (uint32_t d = 0; d < dim; ++d) out[d] *= inv;
}

}  // namespace kvtier::model_internal
