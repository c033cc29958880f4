// The scalar twin of the ternary, binary and 2-bit kernels (TQ1_0, TQ2_0,
// Q1_0, Q2_0; kernels/dispatch.h): portable C++, one dot product at a time,
// the reference the kernels of avx2/lowbit.cc are tested against.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/float_convert.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/rows.h"

namespace kvshare::detail {
namespace {

// TQ2_0 / TQ1_0: sum (trit - 1) x over the super-block.
template <typename TritAt>
float DotTernary(float d, const ActQ8K& x, const TritAt& trit) {
  int s = 0;
  for (int e = 0; e < 256; ++e) s += (trit(e) - 1) * x.qs[e];
  return d * x.d * static_cast<float>(s);
}

float DotTQ2_0(const BlockTQ2_0* w, const ActQ8K* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* qs = w[b].qs;
    acc += DotTernary(F16ToF32(w[b].d), x[b],
                      [qs](int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3; });
  }
  return acc;
}

float DotTQ1_0(const BlockTQ1_0* w, const ActQ8K* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockTQ1_0& blk = w[b];
    acc += DotTernary(F16ToF32(blk.d), x[b], [&blk](int e) { return Tq1Trit(blk, e); });
  }
  return acc;
}

// Q1_0 (x[4b + k]) and Q2_0 (x[2b + h]) against per-32 activations: y +=
// sum * d * dx per 32 elements in order (the AVX2 kernels sum in 8 float
// lanes: equal within fp32 rounding).
float DotQ1_0(const BlockQ1_0* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const float d = F16ToF32(w[b].d);
    for (int k = 0; k < 4; ++k) {
      const ActQ8& a = x[4 * b + k];
      int p = 0;
      for (int j = 0; j < 32; ++j) p += (w[b].qs[4 * k + j / 8] >> (j % 8)) & 1 ? a.qs[j] : -a.qs[j];
      acc = std::fma(static_cast<float>(p), d * a.d, acc);
    }
  }
  return acc;
}

float DotQ2_0(const BlockQ2_0* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const float d = F16ToF32(w[b].d);
    for (int h = 0; h < 2; ++h) {
      const ActQ8& a = x[2 * b + h];
      int p = 0;
      for (int j = 0; j < 32; ++j) p += ((w[b].qs[8 * h + j / 4] >> (2 * (j % 4))) & 3) * a.qs[j];
      acc = std::fma(static_cast<float>(p - a.sum), d * a.d, acc);
    }
  }
  return acc;
}

}  // namespace

KVSHARE_DEFINE_SCALAR_ROWS(ScalarTQ1_0Rows, BlockTQ1_0, ActQ8K, DotTQ1_0)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarTQ2_0Rows, BlockTQ2_0, ActQ8K, DotTQ2_0)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ1_0Rows, BlockQ1_0, ActQ8, DotQ1_0)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ2_0Rows, BlockQ2_0, ActQ8, DotQ2_0)

}  // namespace kvshare::detail
