// AVX-512 VNNI integer dot kernels (_mm512_dpbusd_epi32: u8 x s8 -> int32),
// compiled with -mavx512{f,bw,vl,vnni}; entered only when the CPU reports
// those features (quant_matmul.cc): Q4_1 / Q5_1 here, two blocks per 512-bit
// step, R activation rows at once (weights unpacked once; each row's
// arithmetic exactly that of R = 1). Q8_0 / Q4_0 / Q5_0: quant_avx512_q32.cc;
// K-quants: quant_avx512_k.cc.
#include <immintrin.h>

#include "model/quant_kernels.h"
#include "model/quant_x86.h"

namespace kvshare::detail {
namespace {

inline __m512 Scales2(float a, float b) { return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b)); }
inline __m512i Dpbusd(__m512i u, __m512i s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }
inline __m256i Dpbusd256(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline float HSum512(__m512 v) { return _mm512_reduce_add_ps(v); }

// Q4_1 / Q5_1: unsigned codes q (UnsignedCodes<Block>):
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

}  // namespace

const QuantKernels kAvx512VnniKernels = {.q8_0 = Avx512Q8_0Rows,
                                         .q4_0 = Avx512Q4_0Rows,
                                         .q4_1 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ4_1, ActQ8),
                                         .q5_0 = Avx512Q5_0Rows,
                                         .q5_1 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ5_1, ActQ8),
                                         .q4_k = Avx512Q4_KRows,
                                         .q5_k = Avx512Q5_KRows,
                                         .q6_k = Avx512Q6_KRows,
                                         .packed = Avx512PackedRows,
                                         .packed_k = Avx512PackedKRows,
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
