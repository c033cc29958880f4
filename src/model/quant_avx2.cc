// AVX2 + FMA integer dot kernels (compiled with -mavx2 -mfma -mf16c; entered
// only when the CPU reports those features, see quant_matmul.cc). Each kernel
// takes R activation rows at once: a weight block is unpacked once and dotted
// with every row; each row's arithmetic is exactly that of R = 1.
#include <immintrin.h>

#include "model/quant_kernels.h"
#include "model/quant_x86.h"

namespace kvshare::detail {
namespace {

template <int R>
void DotQ8_0R(const BlockQ8_0* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i q = Load32(w[b].qs);
    const __m256i aq = _mm256_sign_epi8(q, q);
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8& a = x[r * xs + b];
      const __m256i p = DotU8S8(aq, _mm256_sign_epi8(Load32(a.qs), q));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * a.d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

// Q4_1 / Q5_1: unsigned codes q (UnsignedCodes<Block>):
// dot = dw dx sum(q*x) - Offset (the code bias or the block minimum).
template <int R, typename Block>
void DotQ32UnsignedR(const Block* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  using Codes = UnsignedCodes<Block>;
  __m256 acc[R];
  float corr[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), corr[r] = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i q = Codes::Get(w[b]);
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8& a = x[r * xs + b];
      const float d = dw * a.d;
      const __m256i p = DotU8S8(q, Load32(a.qs));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc[r]);
      corr[r] += Codes::Offset(w[b], a, d);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]) - corr[r];
}

// Q4_0 / Q5_0: quant_avx2_q32.cc.

// Q4_K / Q5_K: codes (KCodes<Block>) times the 6-bit sub-block scales
// (maddubs, then madd_epi16 against the int16 scale), times dw dx; minus the
// min term dmin dx sum_j m_j (sum of activation sub-block j), from the bsums
// in one madd_epi16.
template <int R, typename Block>
void DotQKMinR(const Block* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m256i min_pairs = Q4KMinPairsControl();
  __m256 acc[R], accm[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), accm[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i sm = _mm256_broadcastsi128_si256(Q4KScalesMins(w[b].scales));
    __m256i lo[4], hi[4], sc[8];
    KCodes<Block>::Get(w[b], lo, hi);
    for (int j = 0; j < 8; ++j) sc[j] = _mm256_shuffle_epi8(sm, _mm256_set1_epi16(static_cast<short>(0xFF00 | j)));
    const __m256i mins = _mm256_shuffle_epi8(sm, min_pairs);
    std::uint32_t dd;  // d, dmin: the block's first 4 bytes
    std::memcpy(&dd, &w[b], 4);
    const __m128 dwm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd)));
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a = x[r * xs + b];
      __m256i sumi = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i plo = _mm256_maddubs_epi16(lo[c], Load32(a.qs + 64 * c));
        const __m256i phi = _mm256_maddubs_epi16(hi[c], Load32(a.qs + 64 * c + 32));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_madd_epi16(plo, sc[2 * c]), _mm256_madd_epi16(phi, sc[2 * c + 1])));
      }
      const __m256i summ = _mm256_madd_epi16(mins, LoadBsums(a));
      const __m128 d = _mm_mul_ps(dwm, _mm_set1_ps(a.d));  // dw dx, dmin dx
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_broadcastss_ps(d), acc[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_broadcastss_ps(_mm_movehdup_ps(d)), accm[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]) - HSum(accm[r]);
}

// Q6_K: codes stored + 32 (0..63) through maddubs and madd_epi16 against the
// sign-extended int16 group scales (one per 128-bit lane: 16 elements), then
// the offset 32 sum_g sc_g bsums_g subtracted in int32 (one madd_epi16).
template <int R>
void DotQ6_KR(const BlockQ6_K* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3), m30 = _mm256_set1_epi8(0x30);
  // pshufb controls: int16 scale 2k in the low 128-bit lane, 2k + 1 in the high one.
  __m256i sel[4];
  for (int k = 0; k < 4; ++k) {
    sel[k] = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(((4 * k + 3) << 8) | (4 * k + 2))),
                              _mm_set1_epi16(static_cast<short>(((4 * k + 1) << 8) | (4 * k))));
  }
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    __m256i q[2][4], s[2][4];
    for (int n = 0; n < 2; ++n) {
      const __m256i ql0 = Load32(w[b].ql + 64 * n);
      const __m256i ql1 = Load32(w[b].ql + 64 * n + 32);
      const __m256i qh = Load32(w[b].qh + 32 * n);
      q[n][0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
      q[n][1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
      q[n][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
      q[n][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
      // Scales 8n .. 8n + 7 in both lanes; q[n][k] covers groups 8n + 2k (low lane) and 8n + 2k + 1.
      const __m256i half = _mm256_permute4x64_epi64(sc16, n == 0 ? 0x44 : 0xEE);
      for (int k = 0; k < 4; ++k) s[n][k] = _mm256_shuffle_epi8(half, sel[k]);
    }
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a8 = x[r * xs + b];
      __m256i sumi = _mm256_slli_epi32(_mm256_madd_epi16(sc16, LoadBsums(a8)), 5);
      sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
      for (int n = 0; n < 2; ++n) {
        const std::int8_t* a = a8.qs + 128 * n;
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[n][0], Load32(a)), s[n][0]);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[n][1], Load32(a + 32)), s[n][1]);
        const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[n][2], Load32(a + 64)), s[n][2]);
        const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[n][3], Load32(a + 96)), s[n][3]);
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(dw * a8.d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

}  // namespace

const QuantKernels kAvx2Kernels = {.q8_0 = KVSHARE_ROWS_KERNEL(DotQ8_0R, BlockQ8_0, ActQ8),
                                   .q4_0 = Avx2Q4_0Rows,
                                   .q4_1 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ4_1, ActQ8),
                                   .q5_0 = Avx2Q5_0Rows,
                                   .q5_1 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ5_1, ActQ8),
                                   .q4_k = KVSHARE_ROWS_KERNEL(DotQKMinR, BlockQ4_K, ActQ8K),
                                   .q5_k = KVSHARE_ROWS_KERNEL(DotQKMinR, BlockQ5_K, ActQ8K),
                                   .q6_k = KVSHARE_ROWS_KERNEL(DotQ6_KR, BlockQ6_K, ActQ8K),
                                   .packed = Avx2PackedRows,
                                   .packed_k = Avx2PackedKRows,
                                   .q2_k = Avx2Q2_KRows,
                                   .q3_k = Avx2Q3_KRows,
                                   .iq4_nl = Avx2IQ4_NLRows,
                                   .iq4_xs = Avx2IQ4_XSRows,
                                   .tq1_0 = Avx2TQ1_0Rows,
                                   .tq2_0 = Avx2TQ2_0Rows,
                                   .mxfp4 = Avx2MXFP4Rows,
                                   .nvfp4 = Avx2NVFP4Rows,
                                   .q1_0 = Avx2Q1_0Rows,
                                   .q2_0 = Avx2Q2_0Rows,
                                   .iq2_xxs = Avx2IqRows<BlockIQ2_XXS>,
                                   .iq2_xs = Avx2IqRows<BlockIQ2_XS>,
                                   .iq2_s = Avx2IqRows<BlockIQ2_S>,
                                   .iq3_xxs = Avx2IqRows<BlockIQ3_XXS>,
                                   .iq3_s = Avx2IqRows<BlockIQ3_S>,
                                   .iq1_s = Avx2IqRows<BlockIQ1_S>,
                                   .iq1_m = Avx2IqRows<BlockIQ1_M>};

}  // namespace kvshare::detail
