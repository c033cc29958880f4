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

// sum of x[i]^2 for i < n in double (RmsNorm's mean square): eight partial
// sums over the residues mod 8 of the full groups of eight, added in a fixed
// tree, then the remaining elements in order; the same value on every SIMD
// target (each square of a float is exact in double). Within a few ulp of the
// sequential double sum.
double SumOfSquares(const float* x, std::int64_t n);

}  // namespace kvshare::detail
