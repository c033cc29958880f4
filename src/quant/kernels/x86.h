// x86 helpers shared by the per-ISA kernel files. Everything is in an
// anonymous namespace so each file gets its own copy compiled with its own
// target flags (no ODR mixing of AVX2 and AVX-512 code).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/quant.h"

namespace kvshare::detail {
namespace {

inline float H2F(std::uint16_t h) { return _cvtsh_ss(h); }

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum of u8 x s8 products over 32 bytes, as 8 int32 lanes (u8 <= 63 or <= 128 with |s8| <= 127).
inline __m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// Same for two signed operands (x in [-127, 127]).
inline __m256i DotS8S8(__m256i a, __m256i x) { return DotU8S8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(x, a)); }

// 16 bytes of nibbles -> 32 bytes: low nibbles first, then high nibbles.
inline __m256i Nibbles(const std::uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

inline __m256i Load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The 4 bytes at p in every 32-bit lane: an activation row's 4-byte group
// against a packed code vector (the packed kernels, one weight row per lane).
inline __m256i Broadcast4Ymm(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

#if defined(__AVX512F__)  // the AVX-512 kernel files
inline __m512i Join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

inline __m512i Broadcast4Zmm(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
#endif

// Byte i = 0x10 if bit i of the 32-bit mask is set, else 0.
inline __m256i BitsToBytes(std::uint32_t bits) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)  // avx512/: the bits are a byte mask
  return _mm256_maskz_mov_epi8(static_cast<__mmask32>(bits), _mm256_set1_epi8(0x10));
#else
  const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
#endif
}

// 16 nibble bytes plus the 32 fifth bits of a little-endian u32 (as 0x10).
inline __m256i FiveBitCodes(const std::uint8_t* qh, const std::uint8_t* qs) {
  std::uint32_t h;
  std::memcpy(&h, qh, 4);
  return _mm256_or_si256(Nibbles(qs), BitsToBytes(h));
}

// Unsigned codes of a 32-element block (Q4_0 / Q4_1 / Q5_0 / Q5_1) as 32
// bytes, low nibbles first, and its offset: with dw = the block's d and
// dx = a.d, dot(block, a) = dw * dx * sum_j code_j * a.qs[j] - Offset(block, a, dw * dx).
//   _0 types: value = d * (code - bias), Offset = d dx * bias * sum(a.qs);
//   _1 types: value = d * code + m,      Offset = -m * dx * sum(a.qs).
template <typename Block>
struct UnsignedCodes;

template <>
struct UnsignedCodes<BlockQ4_0> {
  static __m256i Get(const BlockQ4_0& b) { return Nibbles(b.qs); }
  static float Offset(const BlockQ4_0&, const ActQ8& a, float d) { return d * static_cast<float>(8 * a.sum); }
};

template <>
struct UnsignedCodes<BlockQ5_0> {
  static __m256i Get(const BlockQ5_0& b) { return FiveBitCodes(b.qh, b.qs); }
  static float Offset(const BlockQ5_0&, const ActQ8& a, float d) { return d * static_cast<float>(16 * a.sum); }
};

template <>
struct UnsignedCodes<BlockQ4_1> {
  static __m256i Get(const BlockQ4_1& b) { return Nibbles(b.qs); }
  static float Offset(const BlockQ4_1& b, const ActQ8& a, float) {
    return -(H2F(b.m) * a.d) * static_cast<float>(a.sum);
  }
};

template <>
struct UnsignedCodes<BlockQ5_1> {
  static __m256i Get(const BlockQ5_1& b) { return FiveBitCodes(b.qh, b.qs); }
  static float Offset(const BlockQ5_1& b, const ActQ8& a, float) {
    return -(H2F(b.m) * a.d) * static_cast<float>(a.sum);
  }
};

// Codes of a Q4_K / Q5_K super-block in 4 chunks of 64 elements: lo[c] holds
// elements 64c .. 64c+31 (sub-block 2c), hi[c] elements 64c+32 .. 64c+63
// (sub-block 2c+1), one code (0..15, resp. 0..31) per byte.
template <typename Block>
struct KCodes;

template <>
struct KCodes<BlockQ4_K> {
  static void Get(const BlockQ4_K& b, __m256i lo[4], __m256i hi[4]) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = Load32(b.qs + 32 * c);
      lo[c] = _mm256_and_si256(q, m4);
      hi[c] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
  }
};

// Bit j of qh[l] is the 5th bit of sub-block j's element l: chunk c takes
// bits 2c (lo) and 2c + 1 (hi). The 16-bit shifts (by at most 7) move bits
// of a high byte into the low byte only above its bit 0, the one bit read.
template <>
struct KCodes<BlockQ5_K> {
  static void Get(const BlockQ5_K& b, __m256i lo[4], __m256i hi[4]) {
    const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    __m256i h = Load32(b.qh);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = Load32(b.qs + 32 * c);
      lo[c] = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
      hi[c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 1), one), 4));
      h = _mm256_srli_epi16(h, 2);
    }
  }
};

// The 8 (scale, min) pairs of a Q4_K / Q5_K block (Q4KScaleMin for every j at
// once): bytes 0..7 = sc0..7, bytes 8..15 = m0..7. Reads 16 bytes at s, the 12
// scale bytes and the 4 block bytes after them.
inline __m128i Q4KScalesMins(const std::uint8_t* s) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  // Low bits: sc0..3 = s0..3 & 63, sc4..7 = s8..11 & 15, m0..3 = s4..7 & 63, m4..7 = s8..11 >> 4.
  const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i lo = _mm_or_si128(
      _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)),
      _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
  // Bits 4, 5 of sc4..7 and m4..7: the top two bits of s0..3 and s4..7.
  const __m128i b = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  return _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30)));
}

// pshufb control that turns Q4KScalesMins (in each 128-bit lane) into int16
// [m0, m0, m1, m1, ..., m3, m3 | m4, m4, ..., m7, m7]: madd_epi16 with an
// activation's 16 bsums then gives m_j * (sum of sub-block j), j = 0..7.
inline __m256i Q4KMinPairsControl() {
  return _mm256_setr_epi8(8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1,  //
                          12, -1, 12, -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15, -1);
}

inline __m256i LoadBsums(const ActQ8K& a) { return Load32(a.bsums); }

// The activation side of the packed kernels' Q4_K correction
// (avx512/packed_k.cc, avx2/packed_k.cc): pair q = (sum of
// sub-block 2q, of 2q + 1) as int16 halves of one int32 (|.| <= 32 * 128),
// for vpdpwssd / madd against the rows' (min 2q, min 2q + 1).
inline std::int32_t SubBlockSumPair(const ActQ8K& a, int q) {
  const auto lo = static_cast<std::uint16_t>(a.bsums[4 * q] + a.bsums[4 * q + 1]);
  const auto hi = static_cast<std::uint16_t>(a.bsums[4 * q + 2] + a.bsums[4 * q + 3]);
  return static_cast<std::int32_t>(lo | (static_cast<std::uint32_t>(hi) << 16));
}

}  // namespace
}  // namespace kvshare::detail
