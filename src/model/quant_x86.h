// x86 helpers shared by the per-ISA kernel files. Everything is in an
// anonymous namespace so each file gets its own copy compiled with its own
// target flags (no ODR mixing of AVX2 and AVX-512 code).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "model/quant.h"

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

// Byte i = 0x10 if bit i of the 32-bit mask is set, else 0.
inline __m256i BitsToBytes(std::uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// Unsigned codes of a Q4_0 / Q5_0 block as 32 bytes (low nibbles first) and
// their offset: value = d * (code - kOffset).
template <typename Block>
struct UnsignedCodes;

template <>
struct UnsignedCodes<BlockQ4_0> {
  static constexpr int kOffset = 8;
  static __m256i Get(const BlockQ4_0& b) { return Nibbles(b.qs); }
};

// Q5_0: nibbles plus qh bit i as 0x10.
template <>
struct UnsignedCodes<BlockQ5_0> {
  static constexpr int kOffset = 16;
  static __m256i Get(const BlockQ5_0& b) {
    std::uint32_t h;
    std::memcpy(&h, b.qh, 4);
    return _mm256_or_si256(Nibbles(b.qs), BitsToBytes(h));
  }
};

// sum_j mn[j] * (sum of activation sub-block j of 32): the Q4_K min term of
// one super-block, from the activation's 16-element bsums.
inline int Q4KMinSum(const std::uint8_t* mn, const ActQ8K& a) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += mn[j] * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
  return s;
}

// sum_g sc[g] * bsums[g]: the Q6_K offset term (codes stored + 32) of one
// super-block.
inline int Q6KScaleSum(const std::int8_t* sc, const ActQ8K& a) {
  int s = 0;
  for (int g = 0; g < 16; ++g) s += sc[g] * a.bsums[g];
  return s;
}

}  // namespace
}  // namespace kvshare::detail
