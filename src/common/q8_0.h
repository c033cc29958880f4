// q8_0 rows (tensor.h; llama.cpp's GGML_TYPE_Q8_0 block layout): the plain
// quantizer used for every K/V row written to a q8_0 cache, and its plain
// dequantizer (the twin of the SIMD kernels' in-register dequantization).
//
// Block of 32 values x: d = max|x| / 127 rounded to fp16 (d16), codes
// q = round(x / d16) (half away from zero, clamped to [-127, 127]), stored as
// {fp16 bits of d16, int8 q[32]}; decoded x' = d16 * q. Unlike ggml's
// quantize_row_q8_0_ref (which divides by the unrounded d), the codes are taken
// against the stored d16, so the error is at most half a step of the scale that
// is actually stored. Error per element, for finite inputs:
//   |x - x'| <= (1 + 2^-10) * max|x| / 254 + 2^-17
// (2^-10: fp16 rounding of d, 2^-11, plus the fp32 rounding of the division;
// 2^-17 covers fp16-subnormal scales, max|x| < 127 * 2^-14, where d16 has an
// absolute error of up to 2^-25 and codes may clamp at 127). For normal fp16
// scales (max|x| >= 127 * 2^-14) quantization is idempotent: quantizing a
// dequantized block gives back the same bytes (its max is then 127 * d16
// exactly, so d16 and every code come back unchanged).
// Scales beyond fp16's range (max|x| > 127 * 65504, about 8.3e6) saturate at
// 65504.
#pragma once

#include <math.h>
#include <string.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/float_convert.h"
#include "kvshare/common/tensor.h"

namespace kvshare::detail {

// Bound on |x - x'| for one element of a block whose max |x| is amax.
inline double Q8_0ErrorBound(double amax) { return (1.0 + 0x1p-10) * amax / 254.0 + 0x1p-17; }

// Quantizes one block of 32 floats into its 34 bytes at out (also a CUDA
// device function: the GPU's cache writes use this same definition).
KVSHARE_HOST_DEVICE inline void QuantizeBlockQ8_0(const float* x, unsigned char* out) {
  float amax = 0.0f;
  for (int i = 0; i < kQ8_0BlockSize; ++i) {
    const float a = fabsf(x[i]);
    amax = amax < a ? a : amax;
  }
  std::uint16_t bits = F32ToF16(amax / 127.0f);
  bits = bits < 0x7BFF ? bits : std::uint16_t{0x7BFF};  // fp16 max finite 65504 (saturate, never inf)
  const float d = F16ToF32(bits);
  memcpy(out, &bits, 2);
  auto* q = reinterpret_cast<std::int8_t*>(out + 2);
  for (int i = 0; i < kQ8_0BlockSize; ++i) {
    float r = d > 0.0f ? roundf(x[i] / d) : 0.0f;
    r = r < -127.0f ? -127.0f : (127.0f < r ? 127.0f : r);
    q[i] = static_cast<std::int8_t>(r);
  }
}

// Quantizes n floats (n a multiple of 32) into n / 32 blocks at dst.
inline void QuantizeRowQ8_0(const float* x, std::int64_t n, void* dst) {
  auto* out = static_cast<unsigned char*>(dst);
  for (std::int64_t b = 0; b < n / kQ8_0BlockSize; ++b, x += kQ8_0BlockSize, out += kQ8_0BlockBytes) {
    QuantizeBlockQ8_0(x, out);
  }
}

// Dequantizes n / 32 blocks at src into n floats.
inline void DequantizeRowQ8_0(const void* src, std::int64_t n, float* y) {
  const auto* in = static_cast<const unsigned char*>(src);
  for (std::int64_t b = 0; b < n / kQ8_0BlockSize; ++b, in += kQ8_0BlockBytes, y += kQ8_0BlockSize) {
    std::uint16_t bits;
    std::memcpy(&bits, in, 2);
    const float d = F16ToF32(bits);
    const auto* q = reinterpret_cast<const std::int8_t*>(in + 2);
    for (int i = 0; i < kQ8_0BlockSize; ++i) y[i] = d * static_cast<float>(q[i]);
  }
}

}  // namespace kvshare::detail
