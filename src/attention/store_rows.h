// A row of fp32 values stored into a cache or output of any storage dtype:
// f32 / f16 / bf16 with the same bits as StoreFromFloat element by element
// (common/float_convert.h: round to nearest even; NaN as its quiet encoding),
// with SIMD conversions; q8_0 quantized per 32-value block (QuantizeRowQ8_0).
#pragma once

#include <cstdint>

#include "kvshare/common/tensor.h"

namespace kvshare::detail {

// data[base + i] = x[i] for i < n (for q8_0, base and n multiples of 32).
void StoreRowFromFloat(void* data, DType dtype, std::int64_t base, const float* x, std::int64_t n);

}  // namespace kvshare::detail
