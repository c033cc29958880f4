// Row helpers of the bf16 products (cpu_attend_bf16.cc, and src/vision's
// bf16_matmul.h through vision/bf16_rows.h): float -> bf16 conversion and the
// exponentials of a softmax row, Highway with run-time dispatch. bf16 here is
// the upper 16 bits of an IEEE float, rounded to nearest even
// (common/float_convert.h: F32ToBF16, which the vector code matches bit for
// bit). Internal header.
#pragma once

#include <cstdint>

namespace kvshare::detail {

// y[i] = bf16(x[i]) for i < n.
void F32ToBf16Rows(const float* x, std::int64_t n, std::uint16_t* y);

// p[i] = bf16(exp(scale * (s[i] - max_i s))) for i < n (n >= 1); returns the
// sum of the rounded p[i] in float, summed in a fixed order (the same
// whatever the caller's thread count).
float ExpShiftedToBf16(const float* s, std::int64_t n, float scale, std::uint16_t* p);

}  // namespace kvshare::detail
