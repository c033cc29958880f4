// F32ToBf16Rows and ExpShiftedToBf16 (bf16_convert.h). The float -> bf16 rounding
// is done on the bits (add 0x7FFF plus the kept lsb, shift), as F32ToBF16
// does, so the vector code and the scalar tail agree; encoder activations are
// finite (a NaN would come out as some NaN or infinity, not a number).
#include "attention/bf16_convert.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/bf16_convert.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// v rounded to bf16 (its low 16 bits zero).
template <class DF>
HWY_INLINE hn::Vec<DF> RoundBf16(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  auto bits = hn::BitCast(du, v);
  bits = hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u))));
  return hn::BitCast(df, hn::And(bits, hn::Set(du, 0xFFFF0000u)));
}

// Stores the upper halves of r (a RoundBf16 result) at y.
template <class DF>
HWY_INLINE void StoreUpper(DF /*df*/, hn::Vec<DF> r, std::uint16_t* HWY_RESTRICT y) {
  // The shifted bits fit 16 bits, so the saturating int32 -> uint16 demotion keeps them.
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint16_t, DF> d16;
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, r)))), d16, y);
}

template <class DF>
HWY_INLINE void ToBf16Span(DF df, const float* HWY_RESTRICT x, std::int64_t i0, std::int64_t n,
                           std::uint16_t* HWY_RESTRICT y) {
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t i = i0; i + N <= n; i += N) StoreUpper(df, RoundBf16(df, hn::LoadU(df, x + i)), y + i);
}

void F32ToBf16RowsImpl(const float* HWY_RESTRICT x, std::int64_t n, std::uint16_t* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  ToBf16Span(df, x, 0, n, y);
  const hn::CappedTag<float, 1> d1;
  ToBf16Span(d1, x, n / N * N, n, y);
}

float ExpShiftedToBf16Impl(const float* HWY_RESTRICT s, std::int64_t n, float scale, std::uint16_t* HWY_RESTRICT p) {
  const hn::ScalableTag<float> df;
  const hn::CappedTag<float, 1> d1;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t nv = n / N * N;
  float mx = s[0];
  if (nv > 0) {
    auto m = hn::LoadU(df, s);
    for (std::int64_t i = N; i < nv; i += N) m = hn::Max(m, hn::LoadU(df, s + i));
    mx = hn::GetLane(hn::MaxOfLanes(df, m));
  }
  for (std::int64_t i = nv; i < n; ++i) mx = s[i] > mx ? s[i] : mx;
  // The rounded values are summed: the normalization divides what P V summed.
  auto sum = hn::Zero(df);
  const auto vs = hn::Set(df, scale), vm = hn::Set(df, mx);
  for (std::int64_t i = 0; i < nv; i += N) {
    const auto r = RoundBf16(df, hn::Exp(df, hn::Mul(vs, hn::Sub(hn::LoadU(df, s + i), vm))));
    StoreUpper(df, r, p + i);
    sum = hn::Add(sum, r);
  }
  float total = nv > 0 ? hn::GetLane(hn::SumOfLanes(df, sum)) : 0.0f;
  for (std::int64_t i = nv; i < n; ++i) {
    const auto r = RoundBf16(d1, hn::Exp(d1, hn::Set(d1, scale * (s[i] - mx))));
    StoreUpper(d1, r, p + i);
    total += hn::GetLane(r);
  }
  return total;
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvshare::detail {
HWY_EXPORT(F32ToBf16RowsImpl);
HWY_EXPORT(ExpShiftedToBf16Impl);

void F32ToBf16Rows(const float* x, std::int64_t n, std::uint16_t* y) {
  HWY_DYNAMIC_DISPATCH(F32ToBf16RowsImpl)(x, n, y);
}
float ExpShiftedToBf16(const float* s, std::int64_t n, float scale, std::uint16_t* p) {
  return HWY_DYNAMIC_DISPATCH(ExpShiftedToBf16Impl)(s, n, scale, p);
}
}  // namespace kvshare::detail
#endif  // HWY_ONCE
