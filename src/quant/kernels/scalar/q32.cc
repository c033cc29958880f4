// The scalar twin of the 32-element block kernels (Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1; kernels/dispatch.h): portable C++, one dot product at a time, the
// reference the SIMD kernels of avx2/q32.cc and avx512/q32.cc are tested
// against.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/float_convert.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/rows.h"

namespace kvshare::detail {
namespace {

float DotQ8_0(const BlockQ8_0* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int s = 0;
    for (int j = 0; j < 32; ++j) s += w[b].qs[j] * x[b].qs[j];
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(s);
  }
  return acc;
}

float DotQ4_0(const BlockQ4_0* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      s += ((w[b].qs[j] & 0xF) - 8) * x[b].qs[j];
      s += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
    }
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(s);
  }
  return acc;
}

// Q4_1 / Q5_1: sum (d q_j + m) dx x_j = d dx sum(q_j x_j) + m dx sum(x_j).
float DotQ4_1(const BlockQ4_1* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += (w[b].qs[j] & 0xF) * x[b].qs[j] + (w[b].qs[j] >> 4) * x[b].qs[j + 16];
    const float dx = x[b].d;
    acc += F16ToF32(w[b].d) * dx * static_cast<float>(s) + F16ToF32(w[b].m) * dx * static_cast<float>(x[b].sum);
  }
  return acc;
}

float DotQ5_1(const BlockQ5_1* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint32_t h;
    std::memcpy(&h, w[b].qh, 4);
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = static_cast<int>((w[b].qs[j] & 0xF) | (((h >> j) & 1u) << 4));
      const int q1 = static_cast<int>((w[b].qs[j] >> 4) | (((h >> (j + 16)) & 1u) << 4));
      s += q0 * x[b].qs[j] + q1 * x[b].qs[j + 16];
    }
    const float dx = x[b].d;
    acc += F16ToF32(w[b].d) * dx * static_cast<float>(s) + F16ToF32(w[b].m) * dx * static_cast<float>(x[b].sum);
  }
  return acc;
}

float DotQ5_0(const BlockQ5_0* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint32_t h;
    std::memcpy(&h, w[b].qh, 4);
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = static_cast<int>((w[b].qs[j] & 0xF) | (((h >> j) & 1u) << 4)) - 16;
      const int q1 = static_cast<int>((w[b].qs[j] >> 4) | (((h >> (j + 16)) & 1u) << 4)) - 16;
      s += q0 * x[b].qs[j] + q1 * x[b].qs[j + 16];
    }
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(s);
  }
  return acc;
}

}  // namespace

KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ8_0Rows, BlockQ8_0, ActQ8, DotQ8_0)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ4_0Rows, BlockQ4_0, ActQ8, DotQ4_0)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ4_1Rows, BlockQ4_1, ActQ8, DotQ4_1)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ5_0Rows, BlockQ5_0, ActQ8, DotQ5_0)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ5_1Rows, BlockQ5_1, ActQ8, DotQ5_1)

}  // namespace kvshare::detail
