// The scalar twin of the IQ1 / IQ2 / IQ3 grid kernels (kernels/dispatch.h):
// portable C++ over quant_iq.h's integer form, the reference the kernels of
// avx2/iq.cc are tested against (bitwise: both end each block in this fma).
#include <cmath>
#include <cstdint>

#include "quant/kernels/dispatch.h"
#include "quant/quant_iq.h"

namespace kvshare::detail {
namespace {

// The scalar twin: per block, sum_ib sum_h ls_h (v . a)_h in int32, then
// acc = fma(sum, factor * dx, acc): the SIMD kernels' arithmetic exactly.
template <typename Block>
float DotIq(const Block* w, const ActQ8K* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int s = 0;
    for (int ib = 0; ib < 8; ++ib) {
      IqSub sub;
      IqDecode(w[b], ib, &sub);
      for (int h = 0; h < 2; ++h) {
        int p = 0;
        for (int k = 0; k < 16; ++k) p += sub.v[16 * h + k] * x[b].qs[32 * ib + 16 * h + k];
        s += sub.ls[h] * p;
      }
    }
    acc = std::fma(static_cast<float>(s), IqFactor(w[b]) * x[b].d, acc);
  }
  return acc;
}

}  // namespace

template <typename Block>
void ScalarIqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  for (std::int64_t r = 0; r < nrows; ++r) {
    for (int j = 0; j < acts; ++j) y[j * ys + r] = DotIq(w + r * nb, x + j * xs, nb);
  }
}
#define KVSHARE_IQ_INSTANTIATE(Block)                                                                           \
  template void ScalarIqRows<Block>(const Block*, std::int64_t, const ActQ8K*, std::int64_t, std::int64_t, int, \
                                    float*, std::int64_t);
KVSHARE_FOR_EACH_IQ_BLOCK(KVSHARE_IQ_INSTANTIATE)
#undef KVSHARE_IQ_INSTANTIATE

}  // namespace kvshare::detail
