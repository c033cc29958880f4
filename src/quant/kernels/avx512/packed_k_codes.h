// The code decode of the kernels over packed Q4_K / Q6_K / Q3_K / Q2_K
// weights (layout: packed.h), shared by avx512/packed_k.cc and
// amx/packed_k.cc so both read the codes, scales and mins one way. Compiled
// with the AVX-512 files' flags (the AMX files have them too); in an
// anonymous namespace as x86.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "quant/kernels/packed.h"
#include "quant/quant.h"

namespace kvshare::detail {
namespace {

// The planes of one block (super-block) of one group of 16 rows.
struct BlockPlanes {
  const std::uint8_t* codes;
  const std::uint8_t* high;
  const std::uint8_t* subs;
  const std::uint8_t* mins;
  const std::uint16_t* d;
  const std::uint16_t* dmin;
};

inline BlockPlanes PlanesAt(const PackedWeights& w, std::int64_t g, std::int64_t b) {
  const auto gb = static_cast<std::size_t>(g * w.nb + b);
  const auto at = [gb](const std::uint8_t* p, std::size_t bytes) { return p != nullptr ? p + gb * bytes : nullptr; };
  return {at(w.codes, w.bytes.codes), at(w.high, w.bytes.high), at(w.subs, w.bytes.subs),
          at(w.mins, w.bytes.mins),   w.d + gb * kPackRows,     w.dmin != nullptr ? w.dmin + gb * kPackRows : nullptr};
}

// Q4_K code vector k (k < 8) of sub-block sb: the low or high nibbles of
// codes vector 8 (sb / 2) + k.
inline __m512i Q4Codes(const std::uint8_t* codes, int sb, int k) {
  const __m512i v = _mm512_load_si512(codes + 64 * (8 * (sb / 2) + k));
  return _mm512_and_si512(sb % 2 == 0 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(0xF));
}

// Q6_K code vector of group k (k < 64): the low nibble from codes vector k %
// 32 (shifted down for k >= 32), bits 4-5 from high vector k % 16 (its bits
// 2 (k / 16) .. +1), selected by byte masks.
template <int kQuarter>
inline __m512i Q6Codes(const std::uint8_t* codes, const std::uint8_t* high, int k) {
  const __m512i nib = _mm512_load_si512(codes + 64 * (k % 32));
  const __m512i hv = _mm512_load_si512(high + 64 * (k % 16));
  const __m512i lo = k < 32 ? nib : _mm512_srli_epi16(nib, 4);
  __m512i hi;
  if constexpr (kQuarter == 0) {
    hi = _mm512_slli_epi16(hv, 4);
  } else if constexpr (kQuarter == 1) {
    hi = _mm512_slli_epi16(hv, 2);
  } else if constexpr (kQuarter == 2) {
    hi = hv;
  } else {
    hi = _mm512_srli_epi16(hv, 2);
  }
  // (lo & 0x0F) | (hi & 0x30): bitwise select with 0x0F, then clear bits 6-7.
  return _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0F), lo, hi, 0xCA), _mm512_set1_epi8(0x3F));
}

// Q2_K / Q3_K low code bits of group k (k < 64, in quarter kQuarter = k /
// 16): bits 2 kQuarter .. +1 of codes vector k % 16, at bits 0-1. The
// 16-bit shift by at most 6 brings no bit of the other byte below bit 2.
template <int kQuarter>
inline __m512i Q2Bits(const std::uint8_t* codes, int k) {
  const __m512i v = _mm512_load_si512(codes + 64 * (k % 16));
  return kQuarter == 0 ? v : _mm512_srli_epi16(v, 2 * kQuarter);
}

// Q3_K code (0..7: the low bits plus 4 times the high bit) of group k: the
// high bit is bit k / 8 of high vector k % 8, moved to bit 2.
template <int kQuarter>
inline __m512i Q3Codes(const std::uint8_t* codes, const std::uint8_t* high, int k) {
  const __m512i hv = _mm512_load_si512(high + 64 * (k % 8));
  const int hb = k / 8;  // 2 kQuarter or 2 kQuarter + 1
  const __m512i hi = hb >= 2 ? _mm512_srli_epi16(hv, hb - 2) : _mm512_slli_epi16(hv, 2 - hb);
  // (lo & 0x03) | (hi & 0x04): bitwise select with 0x03, then clear bits 3-7.
  return _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_set1_epi8(0x03), Q2Bits<kQuarter>(codes, k), hi, 0xCA),
                          _mm512_set1_epi8(0x07));
}

// The types whose super-block is 16 groups of 16 elements with one integer
// scale each: Q6_K, Q3_K, Q2_K. kBias: the codes' offset (value = code -
// kBias), taken off as kBias * bsum_g.
template <GgmlType T>
struct GroupType;
// The 16 rows' int8 scales of one group, widened to int32 lanes.
struct SignedScales {
  static __m512i Scales(const std::uint8_t* s) {
    return _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(s)));
  }
};
template <>
struct GroupType<GgmlType::kQ6_K> : SignedScales {
  static constexpr int kBias = 32;
  template <int kQuarter>
  static __m512i Codes(const BlockPlanes& pl, int k) {
    return Q6Codes<kQuarter>(pl.codes, pl.high, k);
  }
};
template <>
struct GroupType<GgmlType::kQ3_K> : SignedScales {
  static constexpr int kBias = 4;
  template <int kQuarter>
  static __m512i Codes(const BlockPlanes& pl, int k) {
    return Q3Codes<kQuarter>(pl.codes, pl.high, k);
  }
};
template <>
struct GroupType<GgmlType::kQ2_K> {
  static constexpr int kBias = 0;
  template <int kQuarter>
  static __m512i Codes(const BlockPlanes& pl, int k) {
    return _mm512_and_si512(Q2Bits<kQuarter>(pl.codes, k), _mm512_set1_epi8(0x03));
  }
  static __m512i Scales(const std::uint8_t* s) {  // the low nibble of scale | min << 4
    return _mm512_and_si512(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(s))),
                            _mm512_set1_epi32(0xF));
  }
};

// Q2_K's mins of groups 2q and 2q + 1 (q < 8) as int16 pairs, row t in
// int32 lane t: the high nibbles of subs rows 2q and 2q + 1, interleaved.
inline __m512i Q2MinPairs(const std::uint8_t* subs, int q) {
  const __m128i a = _mm_load_si128(reinterpret_cast<const __m128i*>(subs + 32 * q));
  const __m128i b = _mm_load_si128(reinterpret_cast<const __m128i*>(subs + 32 * q + 16));
  const __m256i ab = _mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b));
  return _mm512_srli_epi16(_mm512_cvtepu8_epi16(ab), 4);
}

}  // namespace
}  // namespace kvshare::detail
