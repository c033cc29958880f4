// Per-ISA dot-product kernels behind one table (internal to src/model).
// Each returns the dot product of one weight row (nb blocks) with one
// quantized activation row.
#pragma once

#include <cstdint>

#include "model/quant.h"

namespace kvshare::detail {

struct QuantKernels {
  float (*q8_0)(const BlockQ8_0* w, const ActQ8* x, std::int64_t nb);
  float (*q4_0)(const BlockQ4_0* w, const ActQ8* x, std::int64_t nb);
  float (*q5_0)(const BlockQ5_0* w, const ActQ8* x, std::int64_t nb);
  float (*q4_k)(const BlockQ4_K* w, const ActQ8K* x, std::int64_t nb);
  float (*q6_k)(const BlockQ6_K* w, const ActQ8K* x, std::int64_t nb);
};

extern const QuantKernels kScalarKernels;
#if defined(__x86_64__) || defined(_M_X64)
#define KVSHARE_HAVE_X86_KERNELS 1
extern const QuantKernels kAvx2Kernels;
extern const QuantKernels kAvx512VnniKernels;
#endif

// Float-weight dot products (Highway, dynamically dispatched).
float DotF32(const float* w, const float* x, std::int64_t n);
float DotF16(const std::uint16_t* w, const float* x, std::int64_t n);
float DotBF16(const std::uint16_t* w, const float* x, std::int64_t n);

}  // namespace kvshare::detail
