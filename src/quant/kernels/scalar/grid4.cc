// The scalar twin of the 16-value grid kernels (IQ4_NL, IQ4_XS, MXFP4,
// NVFP4; kernels/dispatch.h): portable C++, one dot product at a time, the
// reference the kernels of avx2/grid4.cc are tested against.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/float_convert.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/rows.h"

namespace kvshare::detail {
namespace {

int SumIQ4(const std::uint8_t* qs, const std::int8_t* a) {
  int s = 0;
  for (int j = 0; j < 16; ++j) s += kIq4Values[qs[j] & 0xF] * a[j] + kIq4Values[qs[j] >> 4] * a[j + 16];
  return s;
}

float DotIQ4_NL(const BlockIQ4_NL* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(SumIQ4(w[b].qs, x[b].qs));
  return acc;
}

// IQ4_XS against per-32 activations: x[8b + ib] is sub-block ib of block b.
float DotIQ4_XS(const BlockIQ4_XS* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    for (int ib = 0; ib < 8; ++ib) {
      const ActQ8& a = x[8 * b + ib];
      acc += IQ4XSSubScale(ib, w[b]) * a.d * static_cast<float>(SumIQ4(w[b].qs + 16 * ib, a.qs));
    }
  }
  return acc;
}

float DotMXFP4(const BlockMXFP4* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int s = 0;
    for (int j = 0; j < 16; ++j)
      s += kMxfp4Values[w[b].qs[j] & 0xF] * x[b].qs[j] + kMxfp4Values[w[b].qs[j] >> 4] * x[b].qs[j + 16];
    acc += Mxfp4Scale(w[b].e) * x[b].d * static_cast<float>(s);
  }
  return acc;
}

// NVFP4 against per-32 activations (x[2b + h]: sub-blocks 2h, 2h + 1):
// y += sum * d * dx per 16 elements in order (the AVX2 kernel sums in 8
// float lanes: equal within fp32 rounding).
float DotNVFP4(const BlockNVFP4* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    for (int s = 0; s < 4; ++s) {
      const ActQ8& a = x[2 * b + s / 2];
      const std::int8_t* as = a.qs + 16 * (s % 2);
      int p = 0;
      for (int j = 0; j < 8; ++j) {
        p += kMxfp4Values[w[b].qs[8 * s + j] & 0xF] * as[j] + kMxfp4Values[w[b].qs[8 * s + j] >> 4] * as[j + 8];
      }
      acc = std::fma(static_cast<float>(p), Ue4m3Scale(w[b].d[s]) * a.d, acc);
    }
  }
  return acc;
}

}  // namespace

KVSHARE_DEFINE_SCALAR_ROWS(ScalarIQ4_NLRows, BlockIQ4_NL, ActQ8, DotIQ4_NL)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarIQ4_XSRows, BlockIQ4_XS, ActQ8, DotIQ4_XS)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarMXFP4Rows, BlockMXFP4, ActQ8, DotMXFP4)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarNVFP4Rows, BlockNVFP4, ActQ8, DotNVFP4)

}  // namespace kvshare::detail
