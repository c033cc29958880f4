// GeluTanhMul and Softcap (activations.h): Highway with run-time dispatch; the
// tail that does not fill a vector runs the same code on one-lane vectors.
#include "model/activations.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/activations.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE void GeluTanhMulVec(D d, const float* g, const float* u, float* out) {
  const auto x = hn::LoadU(d, g);
  const auto c = hn::Set(d, 0.7978845608028654f);  // sqrt(2/pi)
  const auto inner = hn::Mul(c, hn::MulAdd(hn::Mul(hn::Set(d, 0.044715f), hn::Mul(x, x)), x, x));
  const auto gelu = hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.0f), hn::Tanh(d, inner)));
  hn::StoreU(hn::Mul(gelu, hn::LoadU(d, u)), d, out);
}

void GeluTanhMulImpl(const float* g, const float* u, float* out, std::int64_t n) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) GeluTanhMulVec(d, g + i, u + i, out + i);
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) GeluTanhMulVec(d1, g + i, u + i, out + i);
}

template <class D>
HWY_INLINE void SoftcapVec(D d, float* x, float cap, float inv_cap) {
  const auto v = hn::LoadU(d, x);
  hn::StoreU(hn::Mul(hn::Set(d, cap), hn::Tanh(d, hn::Mul(v, hn::Set(d, inv_cap)))), d, x);
}

void SoftcapImpl(float* x, std::int64_t n, float cap) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const float inv_cap = 1.0f / cap;
  std::int64_t i = 0;
  for (; i + N <= n; i += N) SoftcapVec(d, x + i, cap, inv_cap);
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) SoftcapVec(d1, x + i, cap, inv_cap);
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvshare::detail {
HWY_EXPORT(GeluTanhMulImpl);
HWY_EXPORT(SoftcapImpl);

void GeluTanhMul(const float* g, const float* u, float* out, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluTanhMulImpl)(g, u, out, n);
}

void Softcap(float* x, std::int64_t n, float cap) { HWY_DYNAMIC_DISPATCH(SoftcapImpl)(x, n, cap); }
}  // namespace kvshare::detail
#endif  // HWY_ONCE
