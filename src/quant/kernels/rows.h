// Helpers for writing one level's row kernels (the functions
// kernels/dispatch.h names): the loops around a one-row kernel, the pass
// split for register tiles, and the scalar twin's rows loop. Plain C++, so
// every level's files can include it under their own target flags.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "quant/quant.h"

namespace kvshare::detail {

// The most activation rows the generic kernels (KVSHARE_ROWS_KERNEL) hold in
// registers at once; more rows are taken in several passes over the weights.
inline constexpr int kRegisterActRows = 4;

// Calls f(std::integral_constant<int, R>{}, j0) for the passes j0 = 0,
// kPass, 2 kPass, ... over acts activation rows, R = min(kPass, acts - j0)
// (a compile-time row count for the packed kernels' register tiles).
template <int kPass, class F>
void ForEachPass(int acts, const F& f) {
  for (int j0 = 0; j0 < acts; j0 += kPass) {
    const int n = acts - j0 < kPass ? acts - j0 : kPass;
    [&]<int... I>(std::integer_sequence<int, I...>) {
      ((n == I + 1 ? (f(std::integral_constant<int, I + 1>{}, j0), 0) : 0), ...);
    }
    (std::make_integer_sequence<int, kPass>{});
  }
}

// The weight-row loop around a one-row kernel Dot(w, x, x_stride, nb, out[R])
// over R activation rows.
template <int R, typename Block, typename Act,
          void (*Dot)(const Block*, const Act*, std::int64_t, std::int64_t, float*)>
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
#define KVSHARE_ROWS_KERNEL_N(F, Block, Act, N)                                                                   \
  +[](const Block* w, std::int64_t nrows, const Act* x, std::int64_t xs, std::int64_t nb, int acts, float* y,     \
      std::int64_t ys) {                                                                                          \
    constexpr int kN = N;                                                                                         \
    static_assert(kN >= 4 && kN <= 8);                                                                            \
    for (int j0 = 0; j0 < acts; j0 += kN) {                                                                       \
      const Act* xj = x + j0 * xs;                                                                                \
      float* yj = y + j0 * ys;                                                                                    \
      switch (acts - j0 < kN ? acts - j0 : kN) {                                                                  \
        case 1: ForWeightRows<1, Block, Act, F<1>>(w, nrows, xj, xs, nb, yj, ys); break;                          \
        case 2: ForWeightRows<2, Block, Act, F<2>>(w, nrows, xj, xs, nb, yj, ys); break;                          \
        case 3: ForWeightRows<3, Block, Act, F<3>>(w, nrows, xj, xs, nb, yj, ys); break;                          \
        case 4: ForWeightRows<4, Block, Act, F<4>>(w, nrows, xj, xs, nb, yj, ys); break;                          \
        case 5: ForWeightRows<(kN < 5 ? kN : 5), Block, Act, F<(kN < 5 ? kN : 5)>>(w, nrows, xj, xs, nb, yj, ys); \
            break;                                                                                                \
        case 6: ForWeightRows<(kN < 6 ? kN : 6), Block, Act, F<(kN < 6 ? kN : 6)>>(w, nrows, xj, xs, nb, yj, ys); \
            break;                                                                                                \
        case 7: ForWeightRows<(kN < 7 ? kN : 7), Block, Act, F<(kN < 7 ? kN : 7)>>(w, nrows, xj, xs, nb, yj, ys); \
            break;                                                                                                \
        default: ForWeightRows<kN, Block, Act, F<kN>>(w, nrows, xj, xs, nb, yj, ys); break;                       \
      }                                                                                                           \
    }                                                                                                             \
  }
#define KVSHARE_ROWS_KERNEL(F, Block, Act) KVSHARE_ROWS_KERNEL_N(F, Block, Act, kRegisterActRows)

// The scalar twin's rows loop around a one-row, one-activation-row dot
// product: it has nothing to share between rows, so one dot at a time.
template <typename Block, typename Act, float (*Dot)(const Block*, const Act*, std::int64_t)>
void ScalarRowsOf(const Block* w, std::int64_t nrows, const Act* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  for (std::int64_t r = 0; r < nrows; ++r) {
    for (int j = 0; j < acts; ++j) y[j * ys + r] = Dot(w + r * nb, x + j * xs, nb);
  }
}

}  // namespace kvshare::detail

// Define the row kernel `Name` that kernels/dispatch.h declares: from a
// one-row kernel template F<R> with at most N (default kRegisterActRows)
// activation rows in registers, or (SCALAR) from a scalar Dot.
#define KVSHARE_DEFINE_ROWS_N(Name, Block, Act, F, N)                                                               \
  void Name(const Block* w, std::int64_t nrows, const Act* x, std::int64_t xs, std::int64_t nb, int acts, float* y, \
            std::int64_t ys) {                                                                                      \
    const auto rows = KVSHARE_ROWS_KERNEL_N(F, Block, Act, N);                                                      \
    rows(w, nrows, x, xs, nb, acts, y, ys);                                                                         \
  }
#define KVSHARE_DEFINE_ROWS(Name, Block, Act, F) KVSHARE_DEFINE_ROWS_N(Name, Block, Act, F, kRegisterActRows)
#define KVSHARE_DEFINE_SCALAR_ROWS(Name, Block, Act, Dot)                                                           \
  void Name(const Block* w, std::int64_t nrows, const Act* x, std::int64_t xs, std::int64_t nb, int acts, float* y, \
            std::int64_t ys) {                                                                                      \
    ScalarRowsOf<Block, Act, Dot>(w, nrows, x, xs, nb, acts, y, ys);                                                \
  }
