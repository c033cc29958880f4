// Activation quantization (quant.h: QuantizeRowQ8, QuantizeRowQ8K) with
// Highway and run-time dispatch, bitwise the same as the scalar references
// QuantizeRowQ8Reference / QuantizeRowQ8KReference (quant.cc): the amax is a
// max (exact in any order; NaN ignored by the same compare-and-select), the
// scale and its inverse are computed once in scalar code, each element gets
// the same multiply, add and subtract of 1.5 * 2^23 (this file is compiled
// without floating-point contraction, -std=c++20) and the same clamps, and
// the block sums are exact integers.
#include <cstdint>

#include "quant/quant.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/quantize_act.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One block of n floats (n a multiple of 16, the largest lane count here) to
// int8 as QuantizeBlock in quant.cc; returns d.
template <int n>
float QuantizeBlockSimd(const float* HWY_RESTRICT x, std::int8_t* HWY_RESTRICT q) {
  const hn::ScalableTag<float> d;
  const int N = static_cast<int>(hn::Lanes(d));
  auto amax = hn::Zero(d);
  for (int j = 0; j < n; j += N) {
    const auto a = hn::Abs(hn::LoadU(d, x + j));
    amax = hn::IfThenElse(hn::Gt(a, amax), a, amax);  // NaN never wins, as the reference's a > amax
  }
  const float m = hn::GetLane(hn::MaxOfLanes(d, amax));  // lanes hold no NaN
  const float scale = m / 127.0f;
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  const auto vinv = hn::Set(d, inv), round = hn::Set(d, 12582912.0f);
  const auto hi = hn::Set(d, 127.0f), lo = hn::Set(d, -127.0f);
  const hn::Rebind<std::int32_t, decltype(d)> di;
  const hn::Rebind<std::int8_t, decltype(d)> d8;
  for (int j = 0; j < n; j += N) {
    const auto v = hn::Sub(hn::Add(hn::Mul(hn::LoadU(d, x + j), vinv), round), round);
    const auto c = hn::IfThenElse(hn::Lt(v, hi), v, hi);  // NaN -> 127, as the reference
    const auto e = hn::IfThenElse(hn::Gt(c, lo), c, lo);
    hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, e)), d8, q + j);
  }
  return scale;
}

void QuantizeRowQ8Impl(const float* HWY_RESTRICT x, ActQ8* HWY_RESTRICT y, std::int64_t n) {
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    y[b].d = QuantizeBlockSimd<32>(x, y[b].qs);
    std::int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += y[b].qs[j];  // exact; the compiler vectorizes it
    y[b].sum = s;
  }
}

void QuantizeRowQ8KImpl(const float* HWY_RESTRICT x, ActQ8K* HWY_RESTRICT y, std::int64_t n) {
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256) {
    y[b].d = QuantizeBlockSimd<256>(x, y[b].qs);
    for (int g = 0; g < 16; ++g) {
      std::int32_t s = 0;
      for (int j = 0; j < 16; ++j) s += y[b].qs[16 * g + j];
      y[b].bsums[g] = static_cast<std::int16_t>(s);
    }
  }
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvshare {
namespace detail {
HWY_EXPORT(QuantizeRowQ8Impl);
HWY_EXPORT(QuantizeRowQ8KImpl);
}  // namespace detail

void QuantizeRowQ8(const float* x, ActQ8* y, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(detail::QuantizeRowQ8Impl)(x, y, n);
}
void QuantizeRowQ8K(const float* x, ActQ8K* y, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(detail::QuantizeRowQ8KImpl)(x, y, n);
}
}  // namespace kvshare
#endif  // HWY_ONCE
