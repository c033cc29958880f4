// The code decode of the kernels over packed Q8_0 / Q4_0 / Q5_0 / IQ4_NL /
// IQ4_XS / MXFP4 weights (layout: packed.h), shared by avx512/packed_q32.cc
// and amx/packed_q32.cc so both read the codes and scales one way. Compiled
// with the AVX-512 files' flags (the AMX files have them too); in an
// anonymous namespace as x86.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "quant/kernels/packed.h"
#include "quant/quant.h"

namespace kvshare::detail {
namespace {

// The codes' bias: vpdpbusd takes unsigned codes, so the signed types are
// biased by 128 (the grid types' codes are their grid values + 128:
// kIq4Values in [-127, 113], kMxfp4Values in [-12, 12]).
template <GgmlType kType>
constexpr int Bias() {
  return kPackedSigned<kType> ? 128 : kPackedCodeOffset<kType>;
}

// The 16 rows' scales of block b: the fp16 d plane, or the fp32 dsub.
template <GgmlType kType>
inline __m512 BlockScales(const void* scales, std::int64_t b) {
  if constexpr (kPackedFloatScales<kType>) return _mm512_load_ps(static_cast<const float*>(scales) + b * kPackRows);
  return _mm512_cvtph_ps(
      _mm256_load_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(scales) + b * kPackRows)));
}

// The 8 unsigned code vectors of one block of a group.
template <GgmlType kType>
inline void LoadCodes(const std::uint8_t* codes, const std::uint64_t* high, __m512i c[8]) {
  if constexpr (kType == GgmlType::kQ8_0) {
    for (int k = 0; k < 8; ++k) c[k] = _mm512_load_si512(codes + 64 * k);
  } else {
    const __m512i low4 = _mm512_set1_epi8(0xF);
    for (int k = 0; k < 4; ++k) {
      const __m512i v = _mm512_load_si512(codes + 64 * k);
      c[k] = _mm512_and_si512(v, low4);
      c[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
    if constexpr (kType == GgmlType::kQ5_0) {
      const __m512i fifth = _mm512_set1_epi8(0x10);
      for (int k = 0; k < 8; ++k) c[k] = _mm512_mask_add_epi8(c[k], _cvtu64_mask64(high[k]), c[k], fifth);
    }
    if constexpr (kPackedGrid<kType>) {
      const __m512i grid = _mm512_xor_si512(
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(PackedGridValues<kType>()))),
          _mm512_set1_epi8(static_cast<char>(0x80)));
      for (int k = 0; k < 8; ++k) c[k] = _mm512_shuffle_epi8(grid, c[k]);
    }
  }
}

}  // namespace
}  // namespace kvshare::detail
