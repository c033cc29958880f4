// Per-ISA dot-product kernels behind one table (internal to src/model).
// Each computes y[j * y_stride + r] = dot(weight row r, activation row j) for
// the weight rows r < nrows (row r at w + r * nb: nb blocks each, rows packed)
// and the activation rows j < acts (1 <= acts <= kMaxActRows; row j at
// x + j * x_stride, in blocks). The SIMD kernels unpack each weight block once
// for all activation rows; a row's result is the same, bit for bit, whether it
// is computed alone or in a group, and whatever nrows is.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "model/quant.h"
#include "model/quant_iq.h"

namespace kvshare::detail {

inline constexpr int kMaxActRows = 64;
// The most activation rows the generic kernels (KVSHARE_ROWS_KERNEL) hold in
// registers at once; more rows are taken in several passes over the weights.
inline constexpr int kRegisterActRows = 4;

template <typename Block, typename Act>
using DotRowsFn = void (*)(const Block* w, std::int64_t nrows, const Act* x, std::int64_t x_stride, std::int64_t nb,
                           int acts, float* y, std::int64_t y_stride);

struct PackedWeights;

// Weight rows [r0, r1) (multiples of kPackRows) of packed weights (Act: ActQ8
// for Q8_0 / Q4_0 / Q5_0 / IQ4_NL / IQ4_XS, ActQ8K for Q4_K / Q6_K) against activation rows
// j < acts (row j at x + j * x_stride); y points at row r0's output for
// activation row 0 (y[j * y_stride + r - r0]).
template <typename Act>
using PackedRowsFn = void (*)(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const Act* x,
                              std::int64_t x_stride, int acts, float* y, std::int64_t y_stride);

struct QuantKernels {
  DotRowsFn<BlockQ8_0, ActQ8> q8_0;
  DotRowsFn<BlockQ4_0, ActQ8> q4_0;
  DotRowsFn<BlockQ4_1, ActQ8> q4_1;
  DotRowsFn<BlockQ5_0, ActQ8> q5_0;
  DotRowsFn<BlockQ5_1, ActQ8> q5_1;
  DotRowsFn<BlockQ4_K, ActQ8K> q4_k;
  DotRowsFn<BlockQ5_K, ActQ8K> q5_k;
  DotRowsFn<BlockQ6_K, ActQ8K> q6_k;
  // Kernels over packed weights (quant_packed.h); null: this level reads none.
  PackedRowsFn<ActQ8> packed = nullptr;
  PackedRowsFn<ActQ8K> packed_k = nullptr;
  // The low-bit and ternary types and MXFP4 (the AVX-512 level runs the AVX2
  // kernels: quant_avx2_lowbit.cc).
  DotRowsFn<BlockQ2_K, ActQ8K> q2_k = nullptr;
  DotRowsFn<BlockQ3_K, ActQ8K> q3_k = nullptr;
  DotRowsFn<BlockIQ4_NL, ActQ8> iq4_nl = nullptr;
  DotRowsFn<BlockIQ4_XS, ActQ8> iq4_xs = nullptr;  // activation row j: 8 nb blocks
  DotRowsFn<BlockTQ1_0, ActQ8K> tq1_0 = nullptr;
  DotRowsFn<BlockTQ2_0, ActQ8K> tq2_0 = nullptr;
  DotRowsFn<BlockMXFP4, ActQ8> mxfp4 = nullptr;
  DotRowsFn<BlockNVFP4, ActQ8> nvfp4 = nullptr;  // activation row j: 2 nb blocks
  DotRowsFn<BlockQ1_0, ActQ8> q1_0 = nullptr;    // activation row j: 4 nb blocks
  DotRowsFn<BlockQ2_0, ActQ8> q2_0 = nullptr;    // activation row j: 2 nb blocks
  // The IQ1 / IQ2 / IQ3 grid types (scalar: quant_iq.cc; AVX2, run by the
  // AVX-512 level too: quant_avx2_iq.cc).
  DotRowsFn<BlockIQ2_XXS, ActQ8K> iq2_xxs = nullptr;
  DotRowsFn<BlockIQ2_XS, ActQ8K> iq2_xs = nullptr;
  DotRowsFn<BlockIQ2_S, ActQ8K> iq2_s = nullptr;
  DotRowsFn<BlockIQ3_XXS, ActQ8K> iq3_xxs = nullptr;
  DotRowsFn<BlockIQ3_S, ActQ8K> iq3_s = nullptr;
  DotRowsFn<BlockIQ1_S, ActQ8K> iq1_s = nullptr;
  DotRowsFn<BlockIQ1_M, ActQ8K> iq1_m = nullptr;
};

// The IQ grid types' row kernels, instantiated for each IQ block type.
template <typename Block>
void ScalarIqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys);
template <typename Block>
void Avx2IqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                float* y, std::int64_t ys);

// Calls f(std::integral_constant<int, R>{}, j0) for the passes j0 = 0,
// kPass, 2 kPass, ... over acts activation rows, R = min(kPass, acts - j0)
// (a compile-time row count for the packed kernels' register tiles).
template <int kPass, class F>
void ForEachPass(int acts, const F& f) {
  for (int j0 = 0; j0 < acts; j0 += kPass) {
    const int n = acts - j0 < kPass ? acts - j0 : kPass;
    [&]<int... I>(std::integer_sequence<int, I...>) {
      ((n == I + 1 ? (f(std::integral_constant<int, I + 1>{}, j0), 0) : 0), ...);
    }(std::make_integer_sequence<int, kPass>{});
  }
}

// The weight-row loop around a one-row kernel Dot(w, x, x_stride, nb, out[R])
// over R activation rows.
template <int R, typename Block, typename Act, void (*Dot)(const Block*, const Act*, std::int64_t, std::int64_t, float*)>
void ForWeightRows(const Block* w, std::int64_t nrows, const Act* x, std::int64_t xs, std::int64_t nb, float* y,
                   std::int64_t ys) {
  float out[R];
  for (std::int64_t r = 0; r < nrows; ++r) {
    Dot(w + r * nb, x, xs, nb, out);
    for (int j = 0; j < R; ++j) y[j * ys + r] = out[j];
  }
}

// A DotRowsFn from a one-row kernel template F<R>(w, x, x_stride, nb, out)
// over R activation rows: the activation rows go in chunks of at most N (the
// most the kernel keeps in registers, <= 8), each chunk against all weight
// rows; F is instantiated for R = 1 .. N only (the cases above N never run).
#define KVSHARE_ROWS_KERNEL_N(F, Block, Act, N)                                                                    \
  +[](const Block* w, std::int64_t nrows, const Act* x, std::int64_t xs, std::int64_t nb, int acts, float* y,      \
      std::int64_t ys) {                                                                                           \
    constexpr int kN = N;                                                                                          \
    static_assert(kN >= 4 && kN <= 8);                                                                             \
    for (int j0 = 0; j0 < acts; j0 += kN) {                                                                        \
      const Act* xj = x + j0 * xs;                                                                                 \
      float* yj = y + j0 * ys;                                                                                     \
      switch (acts - j0 < kN ? acts - j0 : kN) {                                                                   \
        case 1: ForWeightRows<1, Block, Act, F<1>>(w, nrows, xj, xs, nb, yj, ys); break;                           \
        case 2: ForWeightRows<2, Block, Act, F<2>>(w, nrows, xj, xs, nb, yj, ys); break;                           \
        case 3: ForWeightRows<3, Block, Act, F<3>>(w, nrows, xj, xs, nb, yj, ys); break;                           \
        case 4: ForWeightRows<4, Block, Act, F<4>>(w, nrows, xj, xs, nb, yj, ys); break;                           \
        case 5: ForWeightRows<(kN < 5 ? kN : 5), Block, Act, F<(kN < 5 ? kN : 5)>>(w, nrows, xj, xs, nb, yj, ys); break; \
        case 6: ForWeightRows<(kN < 6 ? kN : 6), Block, Act, F<(kN < 6 ? kN : 6)>>(w, nrows, xj, xs, nb, yj, ys); break; \
        case 7: ForWeightRows<(kN < 7 ? kN : 7), Block, Act, F<(kN < 7 ? kN : 7)>>(w, nrows, xj, xs, nb, yj, ys); break; \
        default: ForWeightRows<kN, Block, Act, F<kN>>(w, nrows, xj, xs, nb, yj, ys); break;                        \
      }                                                                                                           \
    }                                                                                                             \
  }
#define KVSHARE_ROWS_KERNEL(F, Block, Act) KVSHARE_ROWS_KERNEL_N(F, Block, Act, kRegisterActRows)

extern const QuantKernels kScalarKernels;
#if defined(__x86_64__) || defined(_M_X64)
#define KVSHARE_HAVE_X86_KERNELS 1
extern const QuantKernels kAvx2Kernels;
extern const QuantKernels kAvx512VnniKernels;
// The AVX2 Q4_0 / Q5_0 kernels (quant_avx2_q32.cc) and the AVX-512 Q8_0 /
// Q4_0 / Q5_0 kernels (quant_avx512_q32.cc).
void Avx2Q4_0Rows(const BlockQ4_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys);
void Avx2Q5_0Rows(const BlockQ5_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys);
void Avx512Q8_0Rows(const BlockQ8_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys);
void Avx512Q4_0Rows(const BlockQ4_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys);
void Avx512Q5_0Rows(const BlockQ5_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys);
// The AVX2 kernels over packed Q8_0 / Q4_0 / Q5_0 and Q4_K / Q6_K
// (quant_avx2_packed.cc, quant_avx2_packed_k.cc) and the AVX-512 kernels over
// packed weights (quant_avx512_packed.cc, quant_avx512_packed_k.cc).
void Avx2PackedRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8* x, std::int64_t xs, int acts,
                    float* y, std::int64_t ys);
void Avx2PackedKRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8K* x, std::int64_t xs,
                     int acts, float* y, std::int64_t ys);
void Avx512PackedRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8* x, std::int64_t xs,
                      int acts, float* y, std::int64_t ys);
void Avx512PackedKRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8K* x, std::int64_t xs,
                       int acts, float* y, std::int64_t ys);
// The AVX2 Q2_K / Q3_K / IQ4_NL / IQ4_XS / TQ1_0 / TQ2_0 / MXFP4 kernels
// (quant_avx2_lowbit.cc), used by the AVX-512 level too.
void Avx2Q2_KRows(const BlockQ2_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys);
void Avx2Q3_KRows(const BlockQ3_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys);
void Avx2IQ4_NLRows(const BlockIQ4_NL* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb,
                    int acts, float* y, std::int64_t ys);
void Avx2IQ4_XSRows(const BlockIQ4_XS* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb,
                    int acts, float* y, std::int64_t ys);
void Avx2TQ1_0Rows(const BlockTQ1_0* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                   float* y, std::int64_t ys);
void Avx2TQ2_0Rows(const BlockTQ2_0* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                   float* y, std::int64_t ys);
void Avx2NVFP4Rows(const BlockNVFP4* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                   float* y, std::int64_t ys);
void Avx2Q1_0Rows(const BlockQ1_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys);
void Avx2Q2_0Rows(const BlockQ2_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys);
void Avx2MXFP4Rows(const BlockMXFP4* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                   float* y, std::int64_t ys);
// The AVX-512 Q4_K / Q5_K / Q6_K kernels (quant_avx512_k.cc).
void Avx512Q4_KRows(const BlockQ4_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys);
void Avx512Q5_KRows(const BlockQ5_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys);
void Avx512Q6_KRows(const BlockQ6_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys);
#endif

// Float-weight dot products (Highway, dynamically dispatched).
float DotF32(const float* w, const float* x, std::int64_t n);
float DotF16(const std::uint16_t* w, const float* x, std::int64_t n);
float DotBF16(const std::uint16_t* w, const float* x, std::int64_t n);

}  // namespace kvshare::detail
