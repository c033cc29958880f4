// Per-ISA dot-product kernels behind one table (internal to src/model).
// Each computes out[r] = dot(weight row w (nb blocks), activation row r) for
// r < rows (1 <= rows <= kMaxActRows), activation row r at x + r * x_stride
// (in blocks). The SIMD kernels unpack each weight block once for all rows;
// a row's result is the same, bit for bit, whether it is computed alone or
// in a group.
#pragma once

#include <cstdint>

#include "model/quant.h"

namespace kvshare::detail {

inline constexpr int kMaxActRows = 4;

template <typename Block, typename Act>
using DotRowsFn = void (*)(const Block* w, const Act* x, std::int64_t x_stride, std::int64_t nb, int rows,
                           float* out);

struct QuantKernels {
  DotRowsFn<BlockQ8_0, ActQ8> q8_0;
  DotRowsFn<BlockQ4_0, ActQ8> q4_0;
  DotRowsFn<BlockQ4_1, ActQ8> q4_1;
  DotRowsFn<BlockQ5_0, ActQ8> q5_0;
  DotRowsFn<BlockQ5_1, ActQ8> q5_1;
  DotRowsFn<BlockQ4_K, ActQ8K> q4_k;
  DotRowsFn<BlockQ5_K, ActQ8K> q5_k;
  DotRowsFn<BlockQ6_K, ActQ8K> q6_k;
};

// A DotRowsFn from a kernel template F<R>(w, x, x_stride, nb, out) over R
// activation rows, instantiated for R = 1 .. kMaxActRows.
#define KVSHARE_ROWS_KERNEL(F, Block, Act)                                                            \
  +[](const Block* w, const Act* x, std::int64_t xs, std::int64_t nb, int rows, float* out) {       \
    switch (rows) {                                                                                  \
      case 1: F<1>(w, x, xs, nb, out); break;                                                        \
      case 2: F<2>(w, x, xs, nb, out); break;                                                        \
      case 3: F<3>(w, x, xs, nb, out); break;                                                        \
      default: F<4>(w, x, xs, nb, out); break;                                                       \
    }                                                                                                \
  }

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
