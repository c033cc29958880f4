// GeluTanhMul, Softcap and SumOfSquares (activations.h): Highway with run-time
// dispatch; the tail that does not fill a vector runs the same code on
// one-lane vectors.
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

// Eight double partial sums, partial j over the elements i = j (mod 8) of the
// full groups of 8 (each product of two floats is exact in double, so fused
// or not it is the same), reduced in a fixed tree, then the tail in order:
// the same value for every vector width (2, 4 or 8 doubles).
double SumOfSquaresImpl(const float* HWY_RESTRICT x, std::int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  constexpr std::int64_t kParts = 8;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(dd));
  double part[kParts] = {};
  std::int64_t i = 0;
  if (N <= kParts && kParts % N == 0) {
    hn::Vec<decltype(dd)> acc[kParts];
    for (std::int64_t k = 0; k < kParts / N; ++k) acc[k] = hn::Zero(dd);
    for (; i + kParts <= n; i += kParts) {
      for (std::int64_t k = 0; k < kParts / N; ++k) {
        const auto v = hn::PromoteTo(dd, hn::LoadU(df, x + i + k * N));
        acc[k] = hn::MulAdd(v, v, acc[k]);
      }
    }
    for (std::int64_t k = 0; k < kParts / N; ++k) hn::StoreU(acc[k], dd, part + k * N);
  }
  for (; i + kParts <= n; i += kParts) {  // vectors wider than 8 doubles: the same sums in scalar code
    for (std::int64_t j = 0; j < kParts; ++j) part[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  double s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvshare::detail {
HWY_EXPORT(GeluTanhMulImpl);
HWY_EXPORT(SoftcapImpl);
HWY_EXPORT(SumOfSquaresImpl);

void GeluTanhMul(const float* g, const float* u, float* out, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluTanhMulImpl)(g, u, out, n);
}

void Softcap(float* x, std::int64_t n, float cap) { HWY_DYNAMIC_DISPATCH(SoftcapImpl)(x, n, cap); }

double SumOfSquares(const float* x, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(SumOfSquaresImpl)(x, n); }
}  // namespace kvshare::detail
#endif  // HWY_ONCE
