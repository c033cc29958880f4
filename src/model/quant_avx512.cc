// AVX-512 VNNI integer dot kernels (_mm512_dpbusd_epi32: u8 x s8 -> int32),
// compiled with -mavx512{f,bw,vl,vnni}; entered only when the CPU reports
// those features (quant_matmul.cc). 32-element block types take two blocks per
// 512-bit step; K-quants take 64 elements per step.
#include <immintrin.h>

#include <cstring>

#include "model/quant_kernels.h"
#include "model/quant_x86.h"

namespace kvshare::detail {
namespace {

inline __m512i Join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
inline __m512 Scales2(float a, float b) { return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b)); }
inline __m512i Dpbusd(__m512i u, __m512i s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }
inline __m256i Dpbusd256(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
// Signed x signed: |w| times x with the sign of w moved onto x.
inline __m512i DotS8S8_512(__m512i w, __m512i x) {
  const __mmask64 neg = _mm512_movepi8_mask(w);
  return Dpbusd(_mm512_abs_epi8(w), _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x));
}
inline __m256i DotS8S8_256(__m256i w, __m256i x) {
  return Dpbusd256(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
inline float HSum512(__m512 v) { return _mm512_reduce_add_ps(v); }

float DotQ8_0(const BlockQ8_0* w, const ActQ8* x, std::int64_t nb) {
  __m512 acc = _mm512_setzero_ps();
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i p = DotS8S8_512(Join(Load32(w[b].qs), Load32(w[b + 1].qs)), Join(Load32(x[b].qs), Load32(x[b + 1].qs)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), Scales2(H2F(w[b].d) * x[b].d, H2F(w[b + 1].d) * x[b + 1].d), acc);
  }
  float s = HSum512(acc);
  if (b < nb) {
    const __m256i p = DotS8S8_256(Load32(w[b].qs), Load32(x[b].qs));
    s += HSum(_mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(H2F(w[b].d) * x[b].d)));
  }
  return s;
}

// Shared body for Q4_0 / Q5_0: unsigned codes q(block) with offset `bias`.
template <typename Block, typename Codes>
float DotQ32Unsigned(const Block* w, const ActQ8* x, std::int64_t nb, int bias, Codes codes) {
  __m512 acc = _mm512_setzero_ps();
  float corr = 0.0f;
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const float d0 = H2F(w[b].d) * x[b].d, d1 = H2F(w[b + 1].d) * x[b + 1].d;
    const __m512i p = Dpbusd(Join(codes(w[b]), codes(w[b + 1])), Join(Load32(x[b].qs), Load32(x[b + 1].qs)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), Scales2(d0, d1), acc);
    corr += d0 * static_cast<float>(bias * x[b].sum) + d1 * static_cast<float>(bias * x[b + 1].sum);
  }
  float s = HSum512(acc);
  if (b < nb) {
    const float d = H2F(w[b].d) * x[b].d;
    const __m256i p = Dpbusd256(codes(w[b]), Load32(x[b].qs));
    s += HSum(_mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d)));
    corr += d * static_cast<float>(bias * x[b].sum);
  }
  return s - corr;
}

float DotQ4_0(const BlockQ4_0* w, const ActQ8* x, std::int64_t nb) {
  return DotQ32Unsigned(w, x, nb, 8, [](const BlockQ4_0& bl) { return Nibbles(bl.qs); });
}

float DotQ5_0(const BlockQ5_0* w, const ActQ8* x, std::int64_t nb) {
  return DotQ32Unsigned(w, x, nb, 16, [](const BlockQ5_0& bl) {
    std::uint32_t h;
    std::memcpy(&h, bl.qh, 4);
    return _mm256_or_si256(Nibbles(bl.qs), BitsToBytes(h));
  });
}

float DotQ4_K(const BlockQ4_K* w, const ActQ8K* x, std::int64_t nb) {
  __m512 acc = _mm512_setzero_ps();
  float mins = 0.0f;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) Q4KScaleMin(j, w[b].scales, &sc[j], &mn[j]);
    int summ = 0;
    for (int j = 0; j < 8; ++j) summ += mn[j] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    __m512i sumi = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = Load32(w[b].qs + 32 * c);
      const __m512i codes = Join(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
      const __m512i p = Dpbusd(codes, _mm512_loadu_si512(x[b].qs + 64 * c));
      const __m512i s = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(sc[2 * c]), _mm512_set1_epi32(sc[2 * c + 1]));
      sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, s));
    }
    const float dx = x[b].d;
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(H2F(w[b].d) * dx), acc);
    mins += H2F(w[b].dmin) * dx * static_cast<float>(summ);
  }
  return HSum512(acc) - mins;
}

float DotQ6_K(const BlockQ6_K* w, const ActQ8K* x, std::int64_t nb) {
  __m512 acc = _mm512_setzero_ps();
  float corr = 0.0f;
  const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
  // int32 lane l of a 64-element step belongs to 16-element group l / 4.
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* sc = w[b].scales;
    int off = 0;
    for (int g = 0; g < 16; ++g) off += sc[g] * x[b].bsums[g];
    __m512i sumi = _mm512_setzero_si512();
    for (int n = 0; n < 2; ++n) {
      const __m512i ql = _mm512_loadu_si512(w[b].ql + 64 * n);  // [ql0 | ql1]
      const __m256i qh = Load32(w[b].qh + 32 * n);
      const __m512i qh2 = Join(qh, _mm256_srli_epi16(qh, 2));    // [qh | qh >> 2]
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh2, m3), 4));
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh2, m30));
      const std::int8_t* a = x[b].qs + 128 * n;
      const __m512i s01 = _mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(_mm_cvtepi8_epi32(_mm_loadu_si32(sc + 8 * n))));
      const __m512i s23 = _mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(_mm_cvtepi8_epi32(_mm_loadu_si32(sc + 8 * n + 4))));
      sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(Dpbusd(q01, _mm512_loadu_si512(a)), s01));
      sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(Dpbusd(q23, _mm512_loadu_si512(a + 64)), s23));
    }
    const float d = H2F(w[b].d) * x[b].d;
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(d), acc);
    corr += d * static_cast<float>(32 * off);
  }
  return HSum512(acc) - corr;
}

}  // namespace

const QuantKernels kAvx512VnniKernels = {DotQ8_0, DotQ4_0, DotQ5_0, DotQ4_K, DotQ6_K};

}  // namespace kvshare::detail
