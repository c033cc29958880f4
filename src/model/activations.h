// Elementwise activations of the model forward passes (SIMD, run-time
// dispatch). Internal to src/model.
#pragma once

#include <cstdint>

namespace kvshare::detail {

// out[i] = gelu_tanh(g[i]) * u[i] for i < n (the GeGLU product), where
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks &
// Gimpel 2016, the tanh approximation Gemma uses). tanh is Highway's
// polynomial (a few ulp); every element gets the same arithmetic whatever n
// or its index. out may alias g or u.
void GeluTanhMul(const float* g, const float* u, float* out, std::int64_t n);

// x[i] = cap * tanh(x[i] / cap) for i < n, in place (Gemma's final logit
// softcap; cap > 0). The division is a multiplication by 1/cap, tanh Highway's
// polynomial (a few ulp); every element gets the same arithmetic whatever n or
// its index.
void Softcap(float* x, std::int64_t n, float cap);

}  // namespace kvshare::detail
