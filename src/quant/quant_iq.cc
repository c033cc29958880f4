// Reference dequantization of the IQ1 / IQ2 / IQ3 types (their dot kernels:
// kernels/scalar/iq.cc, kernels/avx2/iq.cc).
#include "quant/quant_iq.h"

#include <cmath>
#include <type_traits>

namespace kvshare::detail {
namespace {

// The fp32 scale of a 16-element half with integer-form scale ls (odd), as
// gguf.quants.dequantize forms it: IQ2 d * (0.5 + s) * 0.25 and IQ3_XXS
// d * (0.5 + s) * 0.5 with s = (ls - 1) / 2; IQ3_S and IQ1 d * ls.
float HalfScale(float d, int ls, float scale) { return d * (0.5f + static_cast<float>((ls - 1) / 2)) * scale; }
float ElementScale(const BlockIQ2_XXS& b, int ls) { return HalfScale(F16ToF32(b.d), ls, 0.25f); }
float ElementScale(const BlockIQ2_XS& b, int ls) { return HalfScale(F16ToF32(b.d), ls, 0.25f); }
float ElementScale(const BlockIQ2_S& b, int ls) { return HalfScale(F16ToF32(b.d), ls, 0.25f); }
float ElementScale(const BlockIQ3_XXS& b, int ls) { return HalfScale(F16ToF32(b.d), ls, 0.5f); }
float ElementScale(const BlockIQ3_S& b, int ls) { return F16ToF32(b.d) * static_cast<float>(ls); }
float ElementScale(const BlockIQ1_S& b, int ls) { return F16ToF32(b.d) * static_cast<float>(ls); }
float ElementScale(const BlockIQ1_M& b, int ls) { return F16ToF32(IQ1MScaleBits(b)) * static_cast<float>(ls); }

// Element by element from the integer form (IqDecode), bitwise what
// gguf.quants.dequantize computes: db * g * sign equals db * (+-g) (the
// sign is exact), and IQ1's g + delta equals v / 8 = (8g +- 1) / 8 exactly.
template <typename Block>
void Dequant(const Block& b, float* y) {
  constexpr bool kIq1 = std::is_same_v<Block, BlockIQ1_S> || std::is_same_v<Block, BlockIQ1_M>;
  for (int ib = 0; ib < 8; ++ib) {
    IqSub sub;
    IqDecode(b, ib, &sub);
    for (int h = 0; h < 2; ++h) {
      const float db = ElementScale(b, sub.ls[h]);
      for (int k = 16 * h; k < 16 * h + 16; ++k) {
        const float v = static_cast<float>(sub.v[k]);
        y[32 * ib + k] = kIq1 ? db * (v * 0.125f) : db * v;
      }
    }
  }
}

}  // namespace

template <typename Block>
void DequantIq(const Block* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) Dequant(b[i], y + 256 * i);
}
#define KVSHARE_DEQUANT_IQ(Block) template void DequantIq<Block>(const Block*, float*, std::int64_t);
KVSHARE_FOR_EACH_IQ_BLOCK(KVSHARE_DEQUANT_IQ)
#undef KVSHARE_DEQUANT_IQ

}  // namespace kvshare::detail
