// Float-weight dot products (F32 / F16 / BF16 weights x F32 activations),
// Highway with run-time dispatch over the compiled targets.
#include <cstdint>

#include "common/float_convert.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/kernels/float.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads N floats from w (float / float16 / bfloat16 storage).
template <class DF, typename T>
HWY_INLINE hn::Vec<DF> LoadW(DF df, const T* HWY_RESTRICT w) {
  if constexpr (sizeof(T) == 4) {
    return hn::LoadU(df, w);
  } else {
    const hn::Rebind<T, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, w));
  }
}

// Outputs y[j * ys + c] = dot(weight row c, activation row j) for R
// activation rows and C weight rows at once, each with DotT's arithmetic:
// two accumulators over alternating N-lane chunks, one more chunk into the
// first, their sum reduced, then the scalar tail. So an output is the same, bit
// for bit, whatever tile computes it (R, C = 1: DotT). The tile shares each
// weight chunk (converted once) among R activation rows and each activation
// chunk among C weight rows: a prefill's matrix product runs on the FMA units
// instead of on the loads (kernels/dispatch.h: RowsKernel).
template <int R, int C, typename T, typename Scalar>
HWY_INLINE void DotTile(const T* HWY_RESTRICT w, std::int64_t ws, const float* HWY_RESTRICT x, std::int64_t xs,
                        std::int64_t n, float* HWY_RESTRICT y, std::int64_t ys, Scalar to_float) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  V acc0[R][C], acc1[R][C];
  HWY_UNROLL(4)
  for (int j = 0; j < R; ++j) {
    HWY_UNROLL(4)
    for (int c = 0; c < C; ++c) acc0[j][c] = acc1[j][c] = hn::Zero(df);
  }
  std::int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    V wv[C];
    HWY_UNROLL(4)
    for (int c = 0; c < C; ++c) wv[c] = LoadW(df, w + c * ws + i);
    HWY_UNROLL(4)
    for (int j = 0; j < R; ++j) {
      const V xv = hn::LoadU(df, x + j * xs + i);
      HWY_UNROLL(4)
      for (int c = 0; c < C; ++c) acc0[j][c] = hn::MulAdd(wv[c], xv, acc0[j][c]);
    }
    HWY_UNROLL(4)
    for (int c = 0; c < C; ++c) wv[c] = LoadW(df, w + c * ws + i + N);
    HWY_UNROLL(4)
    for (int j = 0; j < R; ++j) {
      const V xv = hn::LoadU(df, x + j * xs + i + N);
      HWY_UNROLL(4)
      for (int c = 0; c < C; ++c) acc1[j][c] = hn::MulAdd(wv[c], xv, acc1[j][c]);
    }
  }
  for (; i + N <= n; i += N) {
    HWY_UNROLL(4)
    for (int j = 0; j < R; ++j) {
      HWY_UNROLL(4)
      for (int c = 0; c < C; ++c)
        acc0[j][c] = hn::MulAdd(LoadW(df, w + c * ws + i), hn::LoadU(df, x + j * xs + i), acc0[j][c]);
    }
  }
  for (int j = 0; j < R; ++j) {
    for (int c = 0; c < C; ++c) {
      const T* wc = w + c * ws;
      const float* xj = x + j * xs;
      float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0[j][c], acc1[j][c])));
      for (std::int64_t k = i; k < n; ++k) s += to_float(wc, k) * xj[k];
      y[j * ys + c] = s;
    }
  }
}

template <typename T, typename Scalar>
HWY_INLINE float DotT(const T* HWY_RESTRICT w, const float* HWY_RESTRICT x, std::int64_t n, Scalar to_float) {
  float y = 0.0f;
  DotTile<1, 1>(w, n, x, n, n, &y, 1, to_float);
  return y;
}

// Tiles of kTileActs activation rows x kTileRows weight rows: 2 R C
// accumulators plus C weight and one activation vector must fit the register
// file (32 vectors with AVX-512, 16 below).
#if HWY_TARGET <= HWY_AVX3
constexpr int kTileActs = 4, kTileRows = 3;
#else
constexpr int kTileActs = 2, kTileRows = 2;
#endif

// kernels/dispatch.h's RowsKernel for float weights (nb = n elements a row).
template <typename T, typename Scalar>
HWY_INLINE void RowsT(const T* HWY_RESTRICT w, std::int64_t nrows, const float* HWY_RESTRICT x, std::int64_t xs,
                      std::int64_t n, int acts, float* HWY_RESTRICT y, std::int64_t ys, Scalar to_float) {
  std::int64_t r = 0;
  for (; r + kTileRows <= nrows; r += kTileRows) {
    int j = 0;
    for (; j + kTileActs <= acts; j += kTileActs)
      DotTile<kTileActs, kTileRows>(w + r * n, n, x + j * xs, xs, n, y + j * ys + r, ys, to_float);
    for (; j < acts; ++j) DotTile<1, kTileRows>(w + r * n, n, x + j * xs, xs, n, y + j * ys + r, ys, to_float);
  }
  for (; r < nrows; ++r) {
    for (int j = 0; j < acts; ++j) DotTile<1, 1>(w + r * n, n, x + j * xs, xs, n, y + j * ys + r, ys, to_float);
  }
}

const auto kF32At = [](const float* w, std::int64_t i) { return w[i]; };
const auto kF16At = [](const hwy::float16_t* w, std::int64_t i) {
  return F16ToF32(reinterpret_cast<const std::uint16_t*>(w)[i]);
};
const auto kBF16At = [](const hwy::bfloat16_t* w, std::int64_t i) {
  return BF16ToF32(reinterpret_cast<const std::uint16_t*>(w)[i]);
};

float DotF32Impl(const float* w, const float* x, std::int64_t n) { return DotT(w, x, n, kF32At); }
float DotF16Impl(const std::uint16_t* w, const float* x, std::int64_t n) {
  return DotT(reinterpret_cast<const hwy::float16_t*>(w), x, n, kF16At);
}
float DotBF16Impl(const std::uint16_t* w, const float* x, std::int64_t n) {
  return DotT(reinterpret_cast<const hwy::bfloat16_t*>(w), x, n, kBF16At);
}

void RowsF32Impl(const float* w, std::int64_t nrows, const float* x, std::int64_t xs, std::int64_t n, int acts,
                 float* y, std::int64_t ys) {
  RowsT(w, nrows, x, xs, n, acts, y, ys, kF32At);
}
void RowsF16Impl(const std::uint16_t* w, std::int64_t nrows, const float* x, std::int64_t xs, std::int64_t n, int acts,
                 float* y, std::int64_t ys) {
  RowsT(reinterpret_cast<const hwy::float16_t*>(w), nrows, x, xs, n, acts, y, ys, kF16At);
}
void RowsBF16Impl(const std::uint16_t* w, std::int64_t nrows, const float* x, std::int64_t xs, std::int64_t n, int acts,
                  float* y, std::int64_t ys) {
  RowsT(reinterpret_cast<const hwy::bfloat16_t*>(w), nrows, x, xs, n, acts, y, ys, kBF16At);
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "quant/kernels/dispatch.h"

namespace kvshare::detail {
HWY_EXPORT(DotF32Impl);
HWY_EXPORT(DotF16Impl);
HWY_EXPORT(DotBF16Impl);
HWY_EXPORT(RowsF32Impl);
HWY_EXPORT(RowsF16Impl);
HWY_EXPORT(RowsBF16Impl);

float DotF32(const float* w, const float* x, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(DotF32Impl)(w, x, n); }
float DotF16(const std::uint16_t* w, const float* x, std::int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotF16Impl)(w, x, n);
}
float DotBF16(const std::uint16_t* w, const float* x, std::int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotBF16Impl)(w, x, n);
}
void RowsF32(const float* w, std::int64_t nrows, const float* x, std::int64_t xs, std::int64_t n, int acts, float* y,
             std::int64_t ys) {
  HWY_DYNAMIC_DISPATCH(RowsF32Impl)(w, nrows, x, xs, n, acts, y, ys);
}
void RowsF16(const std::uint16_t* w, std::int64_t nrows, const float* x, std::int64_t xs, std::int64_t n, int acts,
             float* y, std::int64_t ys) {
  HWY_DYNAMIC_DISPATCH(RowsF16Impl)(w, nrows, x, xs, n, acts, y, ys);
}
void RowsBF16(const std::uint16_t* w, std::int64_t nrows, const float* x, std::int64_t xs, std::int64_t n, int acts,
              float* y, std::int64_t ys) {
  HWY_DYNAMIC_DISPATCH(RowsBF16Impl)(w, nrows, x, xs, n, acts, y, ys);
}
}  // namespace kvshare::detail
#endif  // HWY_ONCE
