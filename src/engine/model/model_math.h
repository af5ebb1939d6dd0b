// Numeric kernels of the tiny model. Determinism rule for every kernel here: each output value
// is produced by the same sequence of float32 operations whatever the batch size, the chunk
// boundaries or the tensor-parallel rank — loops are vectorized over independent outputs only,
// and every sum runs in a fixed index order. The library is built with -ffp-contract=off so
// the compiler never fuses a multiply and an add in one code path and not in another.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace kvtier::model_internal {

// y[t][j] = sum_{i ascending} x[t][i] * W[i][col + j] for t < rows, j < cols.
// x rows are `in` long with stride x_stride; W rows have stride w_stride; y rows y_stride.
void matmul(const float* x, size_t rows, size_t in, size_t x_stride, const float* w,
            size_t w_stride, size_t col, size_t cols, float* y, size_t y_stride);

// y[t] = x[t] * gain / sqrt(mean(x[t]^2) + eps), for `rows` rows of `dim` floats.
void rms_norm(const float* x, size_t rows, size_t dim, const float* gain, float* y);

// Rotates `heads` heads of `head_dim` floats (halves paired NeoX-style) by the angles whose
// cos/sin (head_dim / 2 each) are given.
void apply_rope(float* v, size_t heads, size_t head_dim, const float* cos, const float* sin);

// e^x for x <= 0 from float operations only, so that it vectorizes and is the same in every
// code path (attention.cpp has a four-wide twin built from the same constants and steps):
//   x = max(x, kExpFloor); t = x * log2(e); k = trunc(t); f = t - k in (-1, 0];
//   e^x = 2^f * 2^k, 2^f by Horner over kExp2Taylor (degree 7, highest first). Rel. error ~1e-6.
inline constexpr float kExpFloor = -87.0f;
inline constexpr float kLog2E = 1.44269504088896341f;
inline constexpr float kExp2Taylor[8] = {
    1.52527338e-5f, 1.54035304e-4f, 1.33335581e-3f, 9.61812911e-3f,
    5.55041087e-2f, 2.40226507e-1f, 6.93147181e-1f, 1.0f};

inline float exp_nonpositive(float x) {
  x = x < kExpFloor ? kExpFloor : x;
  const float t = x * kLog2E;
  const int32_t k = static_cast<int32_t>(t);  // toward zero: t <= k <= 0
  const float f = t - static_cast<float>(k);
  float p = kExp2Taylor[0];
  for (int i = 1; i < 8; ++i) p = p * f + kExp2Taylor[i];
  return p * std::bit_cast<float>((k + 127) << 23);
}

}  // namespace kvtier::model_internal
