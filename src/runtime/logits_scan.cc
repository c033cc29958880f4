#include "runtime/logits_scan.h"

#include <cmath>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/logits_scan.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Max and a NaN / +inf flag over whole vectors, the rest scalar; the first
// invalid index (rare: the error path) by a scalar rescan.
LogitsScan ScanLogitsImpl(const float* HWY_RESTRICT x, std::int64_t n) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const auto inf = hn::Set(d, kInf);
  auto mx = hn::Set(d, -kInf);
  auto bad = hn::FirstN(d, 0);  // all false
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    bad = hn::Or(bad, hn::Or(hn::IsNaN(v), hn::Eq(v, inf)));
    mx = hn::Max(mx, v);
  }
  float m = hn::GetLane(hn::MaxOfLanes(d, mx));
  bool any_bad = !hn::AllFalse(d, bad);
  for (; i < n; ++i) {
    any_bad |= std::isnan(x[i]) || x[i] == kInf;
    m = x[i] > m ? x[i] : m;
  }
  LogitsScan s{.max = m};
  if (any_bad) {
    for (std::int64_t j = 0; j < n; ++j) {
      if (std::isnan(x[j]) || x[j] == kInf) {
        s.invalid = j;
        break;
      }
    }
  }
  return s;
}

std::int64_t FindFirstEqualImpl(const float* HWY_RESTRICT x, std::int64_t n, float v) {
  const hn::ScalableTag<float> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto vv = hn::Set(d, v);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const intptr_t k = hn::FindFirstTrue(d, hn::Eq(hn::LoadU(d, x + i), vv));
    if (k >= 0) return i + k;
  }
  for (; i < n; ++i) {
    if (x[i] == v) return i;
  }
  return n;
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvshare::detail {
HWY_EXPORT(ScanLogitsImpl);
HWY_EXPORT(FindFirstEqualImpl);

LogitsScan ScanLogits(const float* x, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(ScanLogitsImpl)(x, n); }
std::int64_t FindFirstEqual(const float* x, std::int64_t n, float v) {
  return HWY_DYNAMIC_DISPATCH(FindFirstEqualImpl)(x, n, v);
}
}  // namespace kvshare::detail
#endif  // HWY_ONCE
