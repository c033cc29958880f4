// SiluRows and GluRows (conformer_rows.h): whole vectors, then the tail one
// lane at a time through the same vector arithmetic.
#include "audio/conformer_rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "audio/conformer_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// a / (1 + exp(-b)).
template <class D>
HWY_INLINE hn::Vec<D> Gate(D d, hn::Vec<D> a, hn::Vec<D> b) {
  return hn::Div(a, hn::Add(hn::Set(d, 1.0f), hn::Exp(d, hn::Neg(b))));
}

template <class D>
HWY_INLINE std::int64_t GateSpan(D d, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, std::int64_t i0,
                                 std::int64_t n, float* HWY_RESTRICT y) {
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = i0;
  for (; i + N <= n; i += N) hn::StoreU(Gate(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
  return i;
}

void SiluRowsImpl(float* HWY_RESTRICT x, std::int64_t n) {
  const std::int64_t i = GateSpan(hn::ScalableTag<float>(), x, x, 0, n, x);
  GateSpan(hn::CappedTag<float, 1>(), x, x, i, n, x);
}

void GluRowsImpl(const float* HWY_RESTRICT g, std::int64_t rows, std::int64_t d, float* HWY_RESTRICT out) {
  for (std::int64_t t = 0; t < rows; ++t) {
    const float* row = g + t * 2 * d;
    const std::int64_t i = GateSpan(hn::ScalableTag<float>(), row, row + d, 0, d, out + t * d);
    GateSpan(hn::CappedTag<float, 1>(), row, row + d, i, d, out + t * d);
  }
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvshare::detail {
HWY_EXPORT(SiluRowsImpl);
HWY_EXPORT(GluRowsImpl);

void SiluRows(float* x, std::int64_t n) { HWY_DYNAMIC_DISPATCH(SiluRowsImpl)(x, n); }

void GluRows(const float* g, std::int64_t rows, std::int64_t d, float* out) {
  HWY_DYNAMIC_DISPATCH(GluRowsImpl)(g, rows, d, out);
}

}  // namespace kvshare::detail
#endif  // HWY_ONCE
