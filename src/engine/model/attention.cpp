#include "attention.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "model_math.h"

namespace kvtier::model_internal {

void HeadKv::gather(const PagedKv& cache, uint32_t layer, uint32_t kv_head, uint32_t head_dim,
                    uint32_t first, uint32_t end) {
  first_ = first;
  count_ = end - first;
  head_dim_ = head_dim;
  const uint32_t tiles = (count_ + kLanes - 1) / kLanes;
  k_tiles_.assign(size_t{tiles} * head_dim * kLanes, 0.0f);
  v_.resize(size_t{count_} * head_dim);
  for (uint32_t t = 0; t < count_; ++t) {
    const float* k = cache.head(layer, 0, first + t, kv_head);
    const float* v = cache.head(layer, 1, first + t, kv_head);
    float* tile = k_tiles_.data() + size_t{t / kLanes} * head_dim * kLanes + t % kLanes;
    for (uint32_t d = 0; d < head_dim; ++d) tile[size_t{d} * kLanes] = k[d];
    std::copy(v, v + head_dim, v_.data() + size_t{t} * head_dim);
  }
}

namespace {

// Four floats, element-wise operations only (GCC vector extension; SSE width, so it stays in
// registers): explicit SIMD whose results are exactly those of the scalar loops it replaces.
// kLanes = 8 positions are two of them.
using F4 = float __attribute__((vector_size(4 * sizeof(float))));
static_assert(kLanes == 8);

inline F4 load(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, F4 v) {
  std::memcpy(p, &v, sizeof v);
}

using I4 = int32_t __attribute__((vector_size(4 * sizeof(int32_t))));

// exp_nonpositive (model_math.h) on four values: the same operations, element-wise, so each
// result has the same bits as the scalar function's.
inline F4 exp_nonpositive4(F4 x) {
  const F4 floor_value = {kExpFloor, kExpFloor, kExpFloor, kExpFloor};
  x = x < floor_value ? floor_value : x;
  const F4 t = x * kLog2E;
  const I4 k = __builtin_convertvector(t, I4);
  const F4 f = t - __builtin_convertvector(k, F4);
  F4 p = {kExp2Taylor[0], kExp2Taylor[0], kExp2Taylor[0], kExp2Taylor[0]};
  for (int i = 1; i < 8; ++i) p = p * f + kExp2Taylor[i];
  return p * reinterpret_cast<F4>((k + 127) << 23);
}

// s[t] = e^(s[t] - max(s)) for t < n (the max is exact in any order).
void softmax_numerators(float* s, uint32_t n) {
  F4 max4 = {s[0], s[0], s[0], s[0]};
  uint32_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const F4 v = load(s + t);
    max4 = v > max4 ? v : max4;
  }
  float max = s[0];
  for (uint32_t j = 0; j < 4; ++j) max = max4[j] > max ? max4[j] : max;
  for (; t < n; ++t) max = s[t] > max ? s[t] : max;
  t = 0;
  for (; t + 4 <= n; t += 4) store(s + t, exp_nonpositive4(load(s + t) - max));
  for (; t < n; ++t) s[t] = exp_nonpositive(s[t] - max);
}

// scores[i] = q . k(first + tile_begin * kLanes + i) for whole tiles [tile_begin, tile_end).
// Two tiles per pass for instruction-level parallelism; each score's order is unchanged.
void tile_scores(const float* q, const HeadKv& kv, uint32_t tile_begin, uint32_t tile_end,
                 float* scores) {
  const uint32_t dim = kv.head_dim();
  uint32_t tile = tile_begin;
  for (; tile + 2 <= tile_end; tile += 2) {
    const float* k0 = kv.k_tile(tile);
    const float* k1 = kv.k_tile(tile + 1);
    F4 a = {}, b = {}, c = {}, d4 = {};
    for (uint32_t d = 0; d < dim; ++d) {
      a += q[d] * load(k0 + d * kLanes);
      b += q[d] * load(k0 + d * kLanes + 4);
      c += q[d] * load(k1 + d * kLanes);
      d4 += q[d] * load(k1 + d * kLanes + 4);
    }
    float* out = scores + (tile - tile_begin) * kLanes;
    store(out, a);
    store(out + 4, b);
    store(out + 8, c);
    store(out + 12, d4);
  }
  for (; tile < tile_end; ++tile) {
    const float* k = kv.k_tile(tile);
    F4 a = {}, b = {};
    for (uint32_t d = 0; d < dim; ++d) {
      a += q[d] * load(k + d * kLanes);
      b += q[d] * load(k + d * kLanes + 4);
    }
    store(scores + (tile - tile_begin) * kLanes, a);
    store(scores + (tile - tile_begin) * kLanes + 4, b);
  }
}

// Sum of w[0, n) in the lane order documented in attention.h.
float lane_sum(const float* w, uint32_t n) {
  F4 lo = {}, hi = {};
  uint32_t t = 0;
  for (; t + kLanes <= n; t += kLanes) {
    lo += load(w + t);
    hi += load(w + t + 4);
  }
  float lanes[kLanes];
  store(lanes, lo);
  store(lanes + 4, hi);
  for (uint32_t j = 0; t + j < n; ++j) lanes[j] += w[t + j];
  float sum = 0.0f;
  for (uint32_t j = 0; j < kLanes; ++j) sum += lanes[j];
  return sum;
}

// out[d] = sum_{t ascending} w[t] * v(lo + t)[d]. Columns go 16, then 4, then 1 at a time
// (more independent chains per pass); each column's order is unchanged.
void weighted_values(const float* w, uint32_t n, const HeadKv& kv, uint32_t lo, float* out) {
  const uint32_t dim = kv.head_dim();
  const float* v0 = kv.v_at(lo);
  uint32_t d0 = 0;
  for (; d0 + 16 <= dim; d0 += 16) {
    F4 a = {}, b = {}, c = {}, d4 = {};
    const float* v = v0 + d0;
    for (uint32_t t = 0; t < n; ++t, v += dim) {
      a += w[t] * load(v);
      b += w[t] * load(v + 4);
      c += w[t] * load(v + 8);
      d4 += w[t] * load(v + 12);
    }
    store(out + d0, a);
    store(out + d0 + 4, b);
    store(out + d0 + 8, c);
    store(out + d0 + 12, d4);
  }
  for (; d0 + 4 <= dim; d0 += 4) {
    F4 a = {};
    const float* v = v0 + d0;
    for (uint32_t t = 0; t < n; ++t, v += dim) a += w[t] * load(v);
    store(out + d0, a);
  }
  for (; d0 < dim; ++d0) {
    float a = 0.0f;
    const float* v = v0 + d0;
    for (uint32_t t = 0; t < n; ++t, v += dim) a += w[t] * *v;
    out[d0] = a;
  }
}

}  // namespace

void attend(const float* q, uint32_t position, uint32_t window, const HeadKv& kv,
            std::vector<float>& scores, float* out) {
  const uint32_t lo = window_start(position, window);
  if (lo < kv.first() || position >= kv.first() + kv.count()) {
    throw std::logic_error("attend: gathered K/V do not cover the query's window");
  }
  const uint32_t n = position + 1 - lo;
  // Whole tiles covering [lo, position]; scores of positions outside it are computed and
  // ignored (each score is independent of its neighbours).
  const uint32_t tile_begin = (lo - kv.first()) / kLanes;
  const uint32_t tile_end = (position - kv.first()) / kLanes + 1;
  scores.resize(size_t{tile_end - tile_begin} * kLanes);
  tile_scores(q, kv, tile_begin, tile_end, scores.data());
  float* s = scores.data() + (lo - kv.first()) % kLanes;

  softmax_numerators(s, n);
  const float inv = 1.0f / lane_sum(s, n);
  weighted_values(s, n, kv, lo, out);
  for (uint32_t d = 0; d < kv.head_dim(); ++d) out[d] *= inv;
}

}  // namespace kvtier::model_internal
