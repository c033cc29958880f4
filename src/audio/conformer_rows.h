// The conformer's elementwise gates (conformer.cc), SIMD with run-time
// dispatch (Highway): exp is Highway's polynomial (a few ulp), so each value
// is within a few float ulp of the exactly rounded one, the same whatever n
// or the value's index. Internal to src/audio.
#pragma once

#include <cstdint>

namespace kvshare::detail {

// x[i] = x[i] / (1 + exp(-x[i])) (SiLU) for i < n, in place.
void SiluRows(float* x, std::int64_t n);

// The GLU of rows of 2d values: out[t, i] = g[t, i] / (1 + exp(-g[t, d + i]))
// for t < rows, i < d; out [rows, d] must not alias g.
void GluRows(const float* g, std::int64_t rows, std::int64_t d, float* out);

}  // namespace kvshare::detail
