// Test helper: the plain-loop operations of the model references
// (model_tiny_gemma.h ReferenceLogits, model_gemma4_precision_test.cc), in
// element type T: sums always in double, each result rounded to T once.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace kvshare::testing {

// y[t, r] = W[r, :] . x[t, :]; W row-major [n_out, n_in], x [n, n_in].
template <typename T>
std::vector<T> RefMatMul(const std::vector<float>& w, const std::vector<T>& x, int n_out, int n_in) {
  const std::size_t n = x.size() / static_cast<std::size_t>(n_in);
  std::vector<T> y(n * static_cast<std::size_t>(n_out));
  for (std::size_t t = 0; t < n; ++t) {
    for (int r = 0; r < n_out; ++r) {
      double acc = 0;
      for (int k = 0; k < n_in; ++k)
        acc += static_cast<double>(w[static_cast<std::size_t>(r) * n_in + k]) * x[t * n_in + k];
      y[t * n_out + r] = static_cast<T>(acc);
    }
  }
  return y;
}

// RMSNorm over rows of n: x * (1 / sqrt(mean(x^2) + eps)) * w; w == nullptr:
// no scale (Gemma 4's V norm).
template <typename T>
std::vector<T> RefRmsNorm(std::vector<T> x, int n, const float* w, double eps) {
  for (std::size_t r = 0; r < x.size() / n; ++r) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const T inv = static_cast<T>(1.0 / std::sqrt(ss / n + eps));
    for (int i = 0; i < n; ++i) x[r * n + i] *= inv * (w ? static_cast<T>(w[i]) : T(1));
  }
  return x;
}

}  // namespace kvshare::testing
