// Float-weight dot products (F32 / F16 / BF16 weights x F32 activations),
// Highway with run-time dispatch over the compiled targets.
#include <cstdint>

#include "common/float_convert.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/kernels/float.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads N floats from w (float / float16 / bfloat16 storage).
template <class DF, typename T>
HWY_INLINE hn::Vec<DF> LoadW(DF df, const T* HWY_RESTRICT w) {
  if constexpr (sizeof(T) == 4) {
    return hn::LoadU(df, w);
  } else {
    const hn::Rebind<T, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, w));
  }
}

template <typename T, typename Scalar>
HWY_INLINE float DotT(const T* HWY_RESTRICT w, const float* HWY_RESTRICT x, std::int64_t n, Scalar to_float) {
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  std::int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    acc0 = hn::MulAdd(LoadW(df, w + i), hn::LoadU(df, x + i), acc0);
    acc1 = hn::MulAdd(LoadW(df, w + i + N), hn::LoadU(df, x + i + N), acc1);
  }
  for (; i + N <= n; i += N) acc0 = hn::MulAdd(LoadW(df, w + i), hn::LoadU(df, x + i), acc0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
  for (; i < n; ++i) s += to_float(i) * x[i];
  return s;
}

float DotF32Impl(const float* w, const float* x, std::int64_t n) {
  return DotT(w, x, n, [w](std::int64_t i) { return w[i]; });
}
float DotF16Impl(const std::uint16_t* w, const float* x, std::int64_t n) {
  return DotT(reinterpret_cast<const hwy::float16_t*>(w), x, n, [w](std::int64_t i) { return F16ToF32(w[i]); });
}
float DotBF16Impl(const std::uint16_t* w, const float* x, std::int64_t n) {
  return DotT(reinterpret_cast<const hwy::bfloat16_t*>(w), x, n, [w](std::int64_t i) { return BF16ToF32(w[i]); });
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "quant/kernels/dispatch.h"

namespace kvshare::detail {
HWY_EXPORT(DotF32Impl);
HWY_EXPORT(DotF16Impl);
HWY_EXPORT(DotBF16Impl);

float DotF32(const float* w, const float* x, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(DotF32Impl)(w, x, n); }
float DotF16(const std::uint16_t* w, const float* x, std::int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotF16Impl)(w, x, n);
}
float DotBF16(const std::uint16_t* w, const float* x, std::int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotBF16Impl)(w, x, n);
}
}  // namespace kvshare::detail
#endif  // HWY_ONCE
