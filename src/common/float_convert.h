// Scalar float16 / bfloat16 <-> float32 conversions (IEEE 754 binary16;
// bfloat16 = the upper 16 bits of binary32, round-to-nearest-even on narrowing).
// The conversions and LoadAsFloat are also device functions in CUDA sources
// (src/cuda/), so both backends share one definition of every rounding.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.h"
#include "kvshare/common/error.h"
#include "kvshare/common/tensor.h"

namespace kvshare::detail {

KVSHARE_HOST_DEVICE inline float F16ToF32(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<std::uint32_t>(127 - 15 - e) << 23 | (mant & 0x3FFu) << 13;
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | mant << 13;
  } else {
    bits = sign | (exp + 112u) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

KVSHARE_HOST_DEVICE inline std::uint16_t F32ToF16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                                    // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t e = abs >> 23;
    const std::uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14..24
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}

KVSHARE_HOST_DEVICE inline float BF16ToF32(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

KVSHARE_HOST_DEVICE inline std::uint16_t F32ToBF16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const std::uint32_t lsb = (x >> 16) & 1u;
  x += 0x7FFFu + lsb;
  return static_cast<std::uint16_t>(x >> 16);
}

// Element i of a q8_0 array (tensor.h: 34-byte blocks {fp16 d, int8 q[32]}):
// d * q[i mod 32] of block i / 32.
KVSHARE_HOST_DEVICE inline float LoadQ8_0AsFloat(const void* data, std::int64_t i) {
  const auto* blk = static_cast<const unsigned char*>(data) + (i / kQ8_0BlockSize) * kQ8_0BlockBytes;
  std::uint16_t d;
  std::memcpy(&d, blk, 2);
  return F16ToF32(d) * static_cast<float>(reinterpret_cast<const std::int8_t*>(blk + 2)[i % kQ8_0BlockSize]);
}

// Loads element i of a float32 / float16 / bfloat16 / q8_0 array as float.
KVSHARE_HOST_DEVICE inline float LoadAsFloat(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kFloat16: return F16ToF32(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kBFloat16: return BF16ToF32(static_cast<const std::uint16_t*>(data)[i]);
    case DType::kQ8_0: return LoadQ8_0AsFloat(data, i);
    default: return static_cast<const float*>(data)[i];
  }
}

// Stores v as element i of a float32 / float16 / bfloat16 array (any other
// dtype is taken as float32; the caller has checked it).
KVSHARE_HOST_DEVICE inline void StoreFloatElement(void* data, DType dtype, std::int64_t i, float v) {
  switch (dtype) {
    case DType::kFloat16: static_cast<std::uint16_t*>(data)[i] = F32ToF16(v); break;
    case DType::kBFloat16: static_cast<std::uint16_t*>(data)[i] = F32ToBF16(v); break;
    default: static_cast<float*>(data)[i] = v; break;
  }
}

// Stores v as element i of a float32 / float16 / bfloat16 array. (q8_0 has no
// element stores: whole rows are quantized with QuantizeRowQ8_0, common/q8_0.h.)
inline void StoreFromFloat(void* data, DType dtype, std::int64_t i, float v) {
  if (dtype == DType::kQ8_0) {
    throw Error("StoreFromFloat: q8_0 has no element stores; quantize whole rows (QuantizeRowQ8_0)");
  }
  StoreFloatElement(data, dtype, i, v);
}

}  // namespace kvshare::detail
