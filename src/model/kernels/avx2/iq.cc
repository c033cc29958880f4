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
#include "model/kernels/iq_decode.h"
#include "model/kernels/rows.h"
#include "model/kernels/x86.h"

namespace kvshare::detail {
namespace {

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
