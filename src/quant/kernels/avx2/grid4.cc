// AVX2 kernels for the types whose 4-bit codes index a 16-value grid:
// IQ4_NL, IQ4_XS, MXFP4 and NVFP4 (kernels/dispatch.h; compiled with -mavx2
// -mfma -mf16c, entered only after the run-time CPU check, quant_matmul.cc).
// The grid lookup is one pshufb per code vector. The AVX-512 level runs them
// too (packed IQ4_NL / IQ4_XS take packed_q32.cc's kernels). Each takes R
// activation rows at once (NVFP4 up to 8, the others 4): a weight block is
// unpacked once and dotted with every row; each row's arithmetic is exactly
// that of R = 1.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/kernels/dispatch.h"
#include "quant/kernels/rows.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

// Grid values of 16 nibble bytes (low nibbles first) as 32 int8, kept as
// |value| and its sign for maddubs (|value| <= 127, so pairs stay in int16).
struct IQ4Values {
  __m256i abs, sign;
  IQ4Values(const std::uint8_t* qs, __m256i table) {
    sign = _mm256_shuffle_epi8(table, Nibbles(qs));
    abs = _mm256_sign_epi8(sign, sign);
  }
  __m256i Pairs(const std::int8_t* a) const { return _mm256_maddubs_epi16(abs, _mm256_sign_epi8(Load32(a), sign)); }
};

inline __m256i GridTable(const std::int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}
inline __m256i IQ4Table() { return GridTable(kIq4Values); }

inline int HSumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// The 32-element types with a 16-value grid: IQ4_NL (fp16 d) and MXFP4 (E8M0 e).
template <typename Block>
struct Grid4;
template <>
struct Grid4<BlockIQ4_NL> {
  static const std::int8_t* Values() { return kIq4Values; }
  static float Scale(const BlockIQ4_NL& b) { return H2F(b.d); }
};
template <>
struct Grid4<BlockMXFP4> {
  static const std::int8_t* Values() { return kMxfp4Values; }
  static float Scale(const BlockMXFP4& b) { return Mxfp4Scale(b.e); }
};

// IQ4_NL / MXFP4: the packed kernels' arithmetic (y = fma(float(p_b), dw_b *
// dx_b, y) over the blocks in order, p_b exact), so an IQ4_NL matrix gives
// bitwise the same outputs packed (avx2/packed_q32.cc,
// avx512/packed_q32.cc) or not.
template <int R, typename Block>
void DotGrid4R(const Block* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m256i table = GridTable(Grid4<Block>::Values()), ones = _mm256_set1_epi16(1);
  float acc[R];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const IQ4Values v(w[b].qs, table);
    const float dw = Grid4<Block>::Scale(w[b]);
    for (int r = 0; r < R; ++r) {
      const ActQ8& a = x[r * xs + b];
      const int p = HSumI32(_mm256_madd_epi16(v.Pairs(a.qs), ones));
      acc[r] = std::fma(static_cast<float>(p), dw * a.d, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

// IQ4_XS against per-32 activations (x[8b + ib]: sub-block ib of block b):
// per sub-block y = fma(float(p), (d (ls - 32)) dx, y) in order, the packed
// kernels' arithmetic, so packed and unpacked outputs are bitwise equal.
template <int R>
void DotIQ4_XSR(const BlockIQ4_XS* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m256i table = IQ4Table(), ones = _mm256_set1_epi16(1);
  float acc[R];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const float d = H2F(w[b].d);
    for (int ib = 0; ib < 8; ++ib) {
      const IQ4Values v(w[b].qs + 16 * ib, table);
      const float dsub = d * static_cast<float>(IQ4XSScale(ib, w[b]) - 32);  // = IQ4XSSubScale
      for (int r = 0; r < R; ++r) {
        const ActQ8& a = x[r * xs + 8 * b + ib];
        const int p = HSumI32(_mm256_madd_epi16(v.Pairs(a.qs), ones));
        acc[r] = std::fma(static_cast<float>(p), dsub * a.d, acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

template <int R>
void DotIQ4_NLR(const BlockIQ4_NL* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  DotGrid4R<R>(w, x, xs, nb, out);
}
template <int R>
void DotMXFP4R(const BlockMXFP4* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  DotGrid4R<R>(w, x, xs, nb, out);
}

// NVFP4 against per-32 activations: the 16 code bytes of sub-blocks 2h and
// 2h + 1 become their 32 values in element order (low nibbles of 8 bytes,
// then their high nibbles, per sub-block), one sub-block per 128-bit lane,
// and each lane's int32 sums are scaled by its sub-block's d * dx in a float
// vector (one horizontal sum per row at the end).
template <int R>
void DotNVFP4R(const BlockNVFP4* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m256i table = GridTable(kMxfp4Values), ones = _mm256_set1_epi16(1);
  const __m128i m4 = _mm_set1_epi8(0xF);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    for (int h = 0; h < 2; ++h) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs + 16 * h));
      const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
      const __m256i codes = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
      const __m256i v = _mm256_shuffle_epi8(table, codes), abs = _mm256_sign_epi8(v, v);
      const __m256 d =
          _mm256_set_m128(_mm_set1_ps(Ue4m3Scale(w[b].d[2 * h + 1])), _mm_set1_ps(Ue4m3Scale(w[b].d[2 * h])));
      for (int r = 0; r < R; ++r) {
        const ActQ8& a = x[r * xs + 2 * b + h];
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(abs, _mm256_sign_epi8(Load32(a.qs), v)), ones);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(d, _mm256_set1_ps(a.d)), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

}  // namespace

KVSHARE_DEFINE_ROWS(Avx2IQ4_NLRows, BlockIQ4_NL, ActQ8, DotIQ4_NLR)
KVSHARE_DEFINE_ROWS(Avx2IQ4_XSRows, BlockIQ4_XS, ActQ8, DotIQ4_XSR)
KVSHARE_DEFINE_ROWS(Avx2MXFP4Rows, BlockMXFP4, ActQ8, DotMXFP4R)
KVSHARE_DEFINE_ROWS_N(Avx2NVFP4Rows, BlockNVFP4, ActQ8, DotNVFP4R, 8)

}  // namespace kvshare::detail
