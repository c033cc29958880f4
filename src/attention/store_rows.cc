#include "attention/store_rows.h"

#include <cstring>

#include "common/float_convert.h"
#include "common/q8_0.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/store_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whole vectors through DemoteTo (round to nearest even, as F32ToF16); a
// vector holding a NaN, and the tail, element by element (F32ToF16's NaN
// encoding is its own).
// Only x86 targets with F16C (AVX2 and up) convert in hardware; elsewhere
// (and where Highway would emulate the conversion) the scalar loop.
void StoreF16RowImpl(std::uint16_t* HWY_RESTRICT out, const float* HWY_RESTRICT x, std::int64_t n) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    if (!hn::AllFalse(d, hn::IsNaN(v))) {
      for (std::int64_t j = i; j < i + N; ++j) out[j] = F32ToF16(x[j]);
      continue;
    }
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(out + i));
  }
  for (; i < n; ++i) out[i] = F32ToF16(x[i]);
#else
  for (std::int64_t i = 0; i < n; ++i) out[i] = F32ToF16(x[i]);
#endif
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvshare::detail {
HWY_EXPORT(StoreF16RowImpl);

void StoreRowFromFloat(void* data, DType dtype, std::int64_t base, const float* x, std::int64_t n) {
  switch (dtype) {
    case DType::kFloat32: std::memcpy(static_cast<float*>(data) + base, x, static_cast<std::size_t>(n) * 4); return;
    case DType::kFloat16: HWY_DYNAMIC_DISPATCH(StoreF16RowImpl)(static_cast<std::uint16_t*>(data) + base, x, n); return;
    case DType::kQ8_0: QuantizeRowQ8_0(x, n, static_cast<char*>(data) + DTypeBytes(dtype, base)); return;
    default:
      for (std::int64_t i = 0; i < n; ++i) StoreFromFloat(data, dtype, base + i, x[i]);
      return;
  }
}
}  // namespace kvshare::detail
#endif  // HWY_ONCE
