// The IQ1 / IQ2 / IQ3 sub-block decoders of the SIMD kernels (avx2/iq.cc,
// avx512/iq.cc): sub-block ib of a block into quant_iq.h's integer form, 32
// int8 values v and the two odd scales, by gathering grid points and applying
// sign bits with AVX2. Everything is in an anonymous namespace so each kernel
// file gets its own copy under its own target flags (as x86.h).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/iq_grids.h"
#include "quant/quant_iq.h"

namespace kvshare::detail {
namespace {

// +1 / -1 bytes from 32 sign bits (bit k: element k is negative).
inline __m256i SignsFromBits(std::uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel), _mm256_set1_epi8(1));
}
// The four 7-bit sign indices of a u32 (bits 7l) as 32 sign bits.
inline std::uint32_t Iq2SignBits(std::uint32_t aux) {
  return Iq2Signs(aux) | static_cast<std::uint32_t>(Iq2Signs(aux >> 7)) << 8 |
         static_cast<std::uint32_t>(Iq2Signs(aux >> 14)) << 16 | static_cast<std::uint32_t>(Iq2Signs(aux >> 21)) << 24;
}
inline __m256i Points64(std::uint64_t p0, std::uint64_t p1, std::uint64_t p2, std::uint64_t p3) {
  return _mm256_set_epi64x(static_cast<long long>(p3), static_cast<long long>(p2), static_cast<long long>(p1),
                           static_cast<long long>(p0));
}
// Eight 4-element IQ3 points.
template <typename Index>
inline __m256i Points32(const std::uint32_t* grid, const Index& idx) {
  return _mm256_setr_epi32(static_cast<int>(grid[idx(0)]), static_cast<int>(grid[idx(1)]),
                           static_cast<int>(grid[idx(2)]), static_cast<int>(grid[idx(3)]),
                           static_cast<int>(grid[idx(4)]), static_cast<int>(grid[idx(5)]),
                           static_cast<int>(grid[idx(6)]), static_cast<int>(grid[idx(7)]));
}
// IQ1 values 8g + delta_sign from int8 grid points g and per-8 deltas (+-1 bytes).
inline __m256i Iq1Values(__m256i g, __m256i delta) {
  const __m256i g2 = _mm256_add_epi8(g, g), g4 = _mm256_add_epi8(g2, g2);
  return _mm256_add_epi8(_mm256_add_epi8(g4, g4), delta);
}
inline std::uint32_t Load4(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// One decoded sub-block: the values and the int16 scales (ls0 in the low
// 128-bit lane, ls1 in the high one).
struct Sub {
  __m256i v, ls;
};
inline __m256i Scales(int ls0, int ls1) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(ls1)), _mm_set1_epi16(static_cast<short>(ls0)));
}

Sub Decode(const BlockIQ2_XXS& b, int ib) {
  std::uint32_t aux[2];
  std::memcpy(aux, b.qs + 4 * ib, 8);
  const __m256i g = Points64(kIq2xxsGrid[aux[0] & 0xFF], kIq2xxsGrid[(aux[0] >> 8) & 0xFF],
                             kIq2xxsGrid[(aux[0] >> 16) & 0xFF], kIq2xxsGrid[aux[0] >> 24]);
  const int ls = 2 * static_cast<int>(aux[1] >> 28) + 1;
  return {_mm256_sign_epi8(g, SignsFromBits(Iq2SignBits(aux[1]))), Scales(ls, ls)};
}
Sub Decode(const BlockIQ2_XS& b, int ib) {
  const std::uint16_t* q = b.qs + 4 * ib;
  const __m256i g =
      Points64(kIq2xsGrid[q[0] & 511], kIq2xsGrid[q[1] & 511], kIq2xsGrid[q[2] & 511], kIq2xsGrid[q[3] & 511]);
  const std::uint32_t bits = Iq2Signs(q[0] >> 9) | static_cast<std::uint32_t>(Iq2Signs(q[1] >> 9)) << 8 |
                             static_cast<std::uint32_t>(Iq2Signs(q[2] >> 9)) << 16 |
                             static_cast<std::uint32_t>(Iq2Signs(q[3] >> 9)) << 24;
  return {_mm256_sign_epi8(g, SignsFromBits(bits)), Scales(2 * (b.scales[ib] & 0xF) + 1, 2 * (b.scales[ib] >> 4) + 1)};
}
Sub Decode(const BlockIQ2_S& b, int ib) {
  const std::uint8_t* q = b.qs + 4 * ib;
  const unsigned h = b.qh[ib];
  const __m256i g = Points64(kIq2sGrid[q[0] | ((h << 8) & 0x300)], kIq2sGrid[q[1] | ((h << 6) & 0x300)],
                             kIq2sGrid[q[2] | ((h << 4) & 0x300)], kIq2sGrid[q[3] | ((h << 2) & 0x300)]);
  return {_mm256_sign_epi8(g, SignsFromBits(Load4(b.qs + 32 + 4 * ib))),
          Scales(2 * (b.scales[ib] & 0xF) + 1, 2 * (b.scales[ib] >> 4) + 1)};
}
Sub Decode(const BlockIQ3_XXS& b, int ib) {
  const std::uint8_t* q = b.qs + 8 * ib;
  const __m256i g = Points32(kIq3xxsGrid, [q](int l) { return q[l]; });
  const std::uint32_t aux = Load4(b.qs + 64 + 4 * ib);
  const int ls = 2 * static_cast<int>(aux >> 28) + 1;
  return {_mm256_sign_epi8(g, SignsFromBits(Iq2SignBits(aux))), Scales(ls, ls)};
}
Sub Decode(const BlockIQ3_S& b, int ib) {
  const std::uint8_t* q = b.qs + 8 * ib;
  const unsigned h = b.qh[ib];
  const __m256i g = Points32(kIq3sGrid, [q, h](int l) { return q[l] | (((h >> l) & 1u) << 8); });
  const int ls = 1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF);
  return {_mm256_sign_epi8(g, SignsFromBits(Load4(b.signs + 4 * ib))), Scales(ls, ls)};
}
Sub Decode(const BlockIQ1_S& b, int ib) {
  const std::uint8_t* q = b.qs + 4 * ib;
  const unsigned h = b.qh[ib];
  const __m256i g = Points64(kIq1sGrid[q[0] | ((h << 8) & 0x700)], kIq1sGrid[q[1] | ((h << 5) & 0x700)],
                             kIq1sGrid[q[2] | ((h << 2) & 0x700)], kIq1sGrid[q[3] | ((h >> 1) & 0x700)]);
  const int ls = 2 * static_cast<int>((h >> 12) & 7) + 1;
  return {Iq1Values(g, _mm256_set1_epi8((h & 0x8000) ? -1 : 1)), Scales(ls, ls)};
}
Sub Decode(const BlockIQ1_M& b, int ib) {
  const std::uint8_t* q = b.qs + 4 * ib;
  const unsigned h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
  const __m256i g = Points64(kIq1sGrid[q[0] | ((h0 << 8) & 0x700)], kIq1sGrid[q[1] | ((h0 << 4) & 0x700)],
                             kIq1sGrid[q[2] | ((h1 << 8) & 0x700)], kIq1sGrid[q[3] | ((h1 << 4) & 0x700)]);
  // Bit 3 of each nibble: the delta sign of its 8 elements.
  const auto delta = [](unsigned nib_bit) { return nib_bit ? -1LL : 0x0101010101010101LL; };
  const __m256i d = _mm256_set_epi64x(delta(h1 & 0x80), delta(h1 & 0x08), delta(h0 & 0x80), delta(h0 & 0x08));
  return {Iq1Values(g, d), Scales(2 * IQ1MScale(b, 2 * ib) + 1, 2 * IQ1MScale(b, 2 * ib + 1) + 1)};
}

}  // namespace
}  // namespace kvshare::detail
