// AVX2 dot kernels for the IQ1 / IQ2 / IQ3 grid types (compiled with -mavx2
// -mfma -mf16c; entered only after the run-time CPU check, quant_matmul.cc;
// the AVX-512 level runs them too). Each sub-block of 32 is decoded once into
// the integer form of model/quant_iq.h (32 int8 values v, two odd scales) by
// gathering grid points and applying sign bits, then dotted with up to 8
// activation rows: sum ls_h (v . a)_h in int32 per block, and
// y = fma(sum, factor * dx, y) per block, the scalar twin's arithmetic, so
// the results are bitwise those of scalar/iq.cc.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "model/kernels/dispatch.h"
#include "model/kernels/rows.h"
#include "model/kernels/x86.h"

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
  return _mm256_setr_epi32(static_cast<int>(grid[idx(0)]), static_cast<int>(grid[idx(1)]), static_cast<int>(grid[idx(2)]),
                           static_cast<int>(grid[idx(3)]), static_cast<int>(grid[idx(4)]), static_cast<int>(grid[idx(5)]),
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
  const __m256i g = Points64(kIq2xsGrid[q[0] & 511], kIq2xsGrid[q[1] & 511], kIq2xsGrid[q[2] & 511], kIq2xsGrid[q[3] & 511]);
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

// Up to 8 activation rows against one weight row.
template <int R, typename Block>
void DotIqR(const Block* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  float acc[R];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    __m256i sumi[R];
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const Sub s = Decode(w[b], ib);
      const __m256i abs = _mm256_sign_epi8(s.v, s.v);
      for (int r = 0; r < R; ++r) {
        const __m256i a = _mm256_sign_epi8(Load32(x[r * xs + b].qs + 32 * ib), s.v);
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(abs, a), s.ls));
      }
    }
    const float f = IqFactor(w[b]);
    for (int r = 0; r < R; ++r) {
      __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sumi[r]), _mm256_extracti128_si256(sumi[r], 1));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
      acc[r] = std::fma(static_cast<float>(_mm_cvtsi128_si32(t)), f * x[r * xs + b].d, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

template <typename Block>
struct IqKernel {
  template <int R>
  static void Dot(const Block* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
    DotIqR<R, Block>(w, x, xs, nb, out);
  }
};

}  // namespace

template <typename Block>
void Avx2IqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL_N(IqKernel<Block>::template Dot, Block, ActQ8K, 8);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}
#define KVSHARE_IQ_INSTANTIATE(Block)                                                                            \
  template void Avx2IqRows<Block>(const Block*, std::int64_t, const ActQ8K*, std::int64_t, std::int64_t, int,   \
                                  float*, std::int64_t);
KVSHARE_FOR_EACH_IQ_BLOCK(KVSHARE_IQ_INSTANTIATE)
#undef KVSHARE_IQ_INSTANTIATE

}  // namespace kvshare::detail
