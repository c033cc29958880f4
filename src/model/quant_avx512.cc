// AVX-512 VNNI integer dot kernels (_mm512_dpbusd_epi32: u8 x s8 -> int32),
// compiled with -mavx512{f,bw,vl,vnni}; entered only when the CPU reports
// those features (quant_matmul.cc). 32-element block types take two blocks per
// 512-bit step; K-quants take 64 elements per step. Each kernel takes R
// activation rows at once (weights unpacked once); each row's arithmetic is
// exactly that of R = 1.
#include <immintrin.h>

#include "model/quant_kernels.h"
#include "model/quant_x86.h"

namespace kvshare::detail {
namespace {

inline __m512i Join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
inline __m512 Scales2(float a, float b) { return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b)); }
inline __m512i Dpbusd(__m512i u, __m512i s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }
inline __m256i Dpbusd256(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline float HSum512(__m512 v) { return _mm512_reduce_add_ps(v); }

// Signed x signed: |w| times x with the sign of w moved onto x.
template <int R>
void DotQ8_0R(const BlockQ8_0* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i q = Join(Load32(w[b].qs), Load32(w[b + 1].qs));
    const __mmask64 neg = _mm512_movepi8_mask(q);
    const __m512i aq = _mm512_abs_epi8(q);
    const float dw0 = H2F(w[b].d), dw1 = H2F(w[b + 1].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8* a = x + r * xs + b;
      const __m512i xv = Join(Load32(a[0].qs), Load32(a[1].qs));
      const __m512i p = Dpbusd(aq, _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), Scales2(dw0 * a[0].d, dw1 * a[1].d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float s = HSum512(acc[r]);
    if (b < nb) {
      const ActQ8& a = x[r * xs + b];
      const __m256i q = Load32(w[b].qs);
      const __m256i p = Dpbusd256(_mm256_sign_epi8(q, q), _mm256_sign_epi8(Load32(a.qs), q));
      s += HSum(_mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(H2F(w[b].d) * a.d)));
    }
    out[r] = s;
  }
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: unsigned codes q (UnsignedCodes<Block>):
// dot = dw dx sum(q*x) - Offset (the code bias or the block minimum).
template <int R, typename Block>
void DotQ32UnsignedR(const Block* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  using Codes = UnsignedCodes<Block>;
  __m512 acc[R];
  float corr[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), corr[r] = 0.0f;
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i q = Join(Codes::Get(w[b]), Codes::Get(w[b + 1]));
    const float dw0 = H2F(w[b].d), dw1 = H2F(w[b + 1].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8* a = x + r * xs + b;
      const float d0 = dw0 * a[0].d, d1 = dw1 * a[1].d;
      const __m512i p = Dpbusd(q, Join(Load32(a[0].qs), Load32(a[1].qs)));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), Scales2(d0, d1), acc[r]);
      corr[r] += Codes::Offset(w[b], a[0], d0) + Codes::Offset(w[b + 1], a[1], d1);
    }
  }
  for (int r = 0; r < R; ++r) {
    float s = HSum512(acc[r]);
    if (b < nb) {
      const ActQ8& a = x[r * xs + b];
      const float d = H2F(w[b].d) * a.d;
      const __m256i p = Dpbusd256(Codes::Get(w[b]), Load32(a.qs));
      s += HSum(_mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d)));
      corr[r] += Codes::Offset(w[b], a, d);
    }
    out[r] = s - corr[r];
  }
}

// Q4_K / Q5_K: codes (KCodes<Block>) times 6-bit sub-block scales, minus the
// min term dmin dx sum_j m_j (sum of activation sub-block j).
template <int R, typename Block>
void DotQKMinR(const Block* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  __m512 acc[R];
  float mins[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), mins[r] = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) Q4KScaleMin(j, w[b].scales, &sc[j], &mn[j]);
    __m256i lo[4], hi[4];
    KCodes<Block>::Get(w[b], lo, hi);
    __m512i codes[4], s[4];
    for (int c = 0; c < 4; ++c) {
      codes[c] = Join(lo[c], hi[c]);
      s[c] = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(sc[2 * c]), _mm512_set1_epi32(sc[2 * c + 1]));
    }
    const float dw = H2F(w[b].d), dmin = H2F(w[b].dmin);
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a = x[r * xs + b];
      const int summ = Q4KMinSum(mn, a);
      __m512i sumi = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(Dpbusd(codes[c], _mm512_loadu_si512(a.qs + 64 * c)), s[c]));
      }
      const float dx = a.d;
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(dw * dx), acc[r]);
      mins[r] += dmin * dx * static_cast<float>(summ);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum512(acc[r]) - mins[r];
}

template <int R>
void DotQ6_KR(const BlockQ6_K* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  __m512 acc[R];
  float corr[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), corr[r] = 0.0f;
  const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
  // int32 lane l of a 64-element step belongs to 16-element group l / 4.
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* sc = w[b].scales;
    __m512i q01[2], q23[2], s01[2], s23[2];
    for (int n = 0; n < 2; ++n) {
      const __m512i ql = _mm512_loadu_si512(w[b].ql + 64 * n);  // [ql0 | ql1]
      const __m256i qh = Load32(w[b].qh + 32 * n);
      const __m512i qh2 = Join(qh, _mm256_srli_epi16(qh, 2));    // [qh | qh >> 2]
      q01[n] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh2, m3), 4));
      q23[n] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh2, m30));
      s01[n] = _mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(_mm_cvtepi8_epi32(_mm_loadu_si32(sc + 8 * n))));
      s23[n] = _mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(_mm_cvtepi8_epi32(_mm_loadu_si32(sc + 8 * n + 4))));
    }
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a8 = x[r * xs + b];
      const int off = Q6KScaleSum(sc, a8);
      __m512i sumi = _mm512_setzero_si512();
      for (int n = 0; n < 2; ++n) {
        const std::int8_t* a = a8.qs + 128 * n;
        sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(Dpbusd(q01[n], _mm512_loadu_si512(a)), s01[n]));
        sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(Dpbusd(q23[n], _mm512_loadu_si512(a + 64)), s23[n]));
      }
      const float d = dw * a8.d;
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(d), acc[r]);
      corr[r] += d * static_cast<float>(32 * off);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum512(acc[r]) - corr[r];
}

}  // namespace

const QuantKernels kAvx512VnniKernels = {.q8_0 = KVSHARE_ROWS_KERNEL(DotQ8_0R, BlockQ8_0, ActQ8),
                                         .q4_0 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ4_0, ActQ8),
                                         .q4_1 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ4_1, ActQ8),
                                         .q5_0 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ5_0, ActQ8),
                                         .q5_1 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ5_1, ActQ8),
                                         .q4_k = KVSHARE_ROWS_KERNEL(DotQKMinR, BlockQ4_K, ActQ8K),
                                         .q5_k = KVSHARE_ROWS_KERNEL(DotQKMinR, BlockQ5_K, ActQ8K),
                                         .q6_k = KVSHARE_ROWS_KERNEL(DotQ6_KR, BlockQ6_K, ActQ8K)};

}  // namespace kvshare::detail
