// The fused Transformer kernels of kernels.h: GELU, softmax and layer
// normalisation and their gradients, each one pass over its data instead of
// the 10-30 elementwise, broadcast and reduce ops of the composite.
#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif

#include <algorithm>
#include <cmath>

#include "Eigen/Core"
#include "causeway/backend/cpu/kernels.h"

namespace causeway::backend::cpu::kernels {
namespace {

using ConstRow = Eigen::Map<const Eigen::ArrayXf>;
using Row = Eigen::Map<Eigen::ArrayXf>;

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;
// Elementwise kernels work in chunks that stay in L1 and on the stack.
constexpr int64_t kChunk = 1024;

}  // namespace

void Gelu(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    ConstRow a(x + i, m);
    Row y(out + i, m);
    y = 0.5f * a * (1.0f + (kGeluK * (a + kGeluC * a.cube())).tanh());
  }
}

void GeluGrad(const float* x, const float* g, float* out, int64_t n) {
  alignas(64) float t_buf[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    ConstRow a(x + i, m);
    Row t(t_buf, m);
    t = (kGeluK * (a + kGeluC * a.cube())).tanh();
    Row(out + i, m) = ConstRow(g + i, m) *
                      (0.5f * (1.0f + t) +
                       0.5f * a * (1.0f - t.square()) * kGeluK * (1.0f + 3.0f * kGeluC * a.square()));
  }
}

void Softmax(const float* x, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    ConstRow a(x + r * cols, cols);
    Row y(out + r * cols, cols);
    y = (a - a.maxCoeff()).exp();
    y *= 1.0f / y.sum();
  }
}

void SoftmaxGrad(const float* y, const float* g, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    ConstRow yr(y + r * cols, cols);
    ConstRow gr(g + r * cols, cols);
    const float s = (gr * yr).sum();
    Row(out + r * cols, cols) = yr * (gr - s);
  }
}

void Normalize(const float* x, float epsilon, float* out, int64_t rows, int64_t cols) {
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    ConstRow a(x + r * cols, cols);
    Row y(out + r * cols, cols);
    y = a - a.sum() * inv_n;
    const float var = y.square().sum() * inv_n;
    y *= 1.0f / std::sqrt(var + epsilon);
  }
}

void NormalizeGrad(const float* x, float epsilon, const float* g, float* out, int64_t rows,
                   int64_t cols) {
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    ConstRow a(x + r * cols, cols);
    ConstRow gr(g + r * cols, cols);
    Row dx(out + r * cols, cols);
    // dx holds x_hat first: dx = (g - mean(g) - x_hat mean(g x_hat)) / sigma.
    dx = a - a.sum() * inv_n;
    const float inv_sigma = 1.0f / std::sqrt(dx.square().sum() * inv_n + epsilon);
    dx *= inv_sigma;
    const float mean_g = gr.sum() * inv_n;
    const float mean_gx = (gr * dx).sum() * inv_n;
    dx = inv_sigma * (gr - mean_g - dx * mean_gx);
  }
}

}  // namespace causeway::backend::cpu::kernels
