// A row of fp32 values stored into a cache of f32 / f16 / bf16 elements: the
// same bits as StoreFromFloat element by element (common/float_convert.h:
// round to nearest even; NaN as its quiet encoding), with SIMD conversions.
#pragma once

#include <cstdint>

#include "kvshare/tensor.h"

namespace kvshare::detail {

// data[base + i] = x[i] for i < n; dtype f32, f16 or bf16 (not q8_0).
void StoreRowFromFloat(void* data, DType dtype, std::int64_t base, const float* x, std::int64_t n);

}  // namespace kvshare::detail
