#include "model_math.h"

#include <cmath>

namespace kvtier::model_internal {

void matmul(const float* x, size_t rows, size_t in, size_t x_stride, const float* w,
            size_t w_stride, size_t col, size_t cols, float* y, size_t y_stride) {
  for (size_t t = 0; t < rows; ++t) {
    const float* xt = x + t * x_stride;
    float* yt = y + t * y_stride;
    for (size_t j = 0; j < cols; ++j) yt[j] = 0.0f;
    for (size_t i = 0; i < in; ++i) {
      const float xi = xt[i];
      const float* wi = w + i * w_stride + col;
      for (size_t j = 0; j < cols; ++j) yt[j] += xi * wi[j];
    }
  }
}

void rms_norm(const float* x, size_t rows, size_t dim, const float* gain, float* y) {
  for (size_t t = 0; t < rows; ++t) {
    const float* xt = x + t * dim;
    float sum_sq = 0.0f;
    for (size_t i = 0; i < dim; ++i) sum_sq += xt[i] * xt[i];
    const float scale = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + 1e-5f);
    for (size_t i = 0; i < dim; ++i) y[t * dim + i] = xt[i] * scale * gain[i];
  }
}

void apply_rope(float* v, size_t heads, size_t head_dim, const float* cos, const float* sin) {
  const size_t half = head_dim / 2;
  for (size_t h = 0; h < heads; ++h) {
    float* a = v + h * head_dim;
    float* b = a + half;
    for (size_t i = 0; i < half; ++i) {
      const float x0 = a[i];
      const float x1 = b[i];
      a[i] = x0 * cos[i] - x1 * sin[i];
      b[i] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

}  // namespace kvtier::model_internal
