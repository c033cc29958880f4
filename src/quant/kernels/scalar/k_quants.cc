// The scalar twin of the K-quant kernels (Q2_K .. Q6_K; kernels/dispatch.h):
// portable C++, one dot product at a time, the reference the SIMD kernels of
// avx2/k_quants.cc and avx512/k_quants.cc are tested against.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/float_convert.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/rows.h"

namespace kvshare::detail {
namespace {

float DotQ4_K(const BlockQ4_K* w, const ActQ8K* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int sumi = 0, summ = 0;
    const std::uint8_t* q = w[b].qs;
    const std::int8_t* a = x[b].qs;
    for (int c = 0; c < 4; ++c, q += 32, a += 64) {
      std::uint8_t sc0, m0, sc1, m1;
      Q4KScaleMin(2 * c, w[b].scales, &sc0, &m0);
      Q4KScaleMin(2 * c + 1, w[b].scales, &sc1, &m1);
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += (q[l] & 0xF) * a[l];
        s1 += (q[l] >> 4) * a[l + 32];
      }
      sumi += sc0 * s0 + sc1 * s1;
      summ += m0 * (x[b].bsums[4 * c] + x[b].bsums[4 * c + 1]) + m1 * (x[b].bsums[4 * c + 2] + x[b].bsums[4 * c + 3]);
    }
    const float dx = x[b].d;
    acc += F16ToF32(w[b].d) * dx * static_cast<float>(sumi) - F16ToF32(w[b].dmin) * dx * static_cast<float>(summ);
  }
  return acc;
}

float DotQ5_K(const BlockQ5_K* w, const ActQ8K* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int sumi = 0, summ = 0;
    const std::uint8_t* q = w[b].qs;
    const std::uint8_t* qh = w[b].qh;
    const std::int8_t* a = x[b].qs;
    for (int c = 0; c < 4; ++c, q += 32, a += 64) {
      std::uint8_t sc0, m0, sc1, m1;
      Q4KScaleMin(2 * c, w[b].scales, &sc0, &m0);
      Q4KScaleMin(2 * c + 1, w[b].scales, &sc1, &m1);
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += ((q[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) * a[l];
        s1 += ((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) * a[l + 32];
      }
      sumi += sc0 * s0 + sc1 * s1;
      summ += m0 * (x[b].bsums[4 * c] + x[b].bsums[4 * c + 1]) + m1 * (x[b].bsums[4 * c + 2] + x[b].bsums[4 * c + 3]);
    }
    const float dx = x[b].d;
    acc += F16ToF32(w[b].d) * dx * static_cast<float>(sumi) - F16ToF32(w[b].dmin) * dx * static_cast<float>(summ);
  }
  return acc;
}

float DotQ6_K(const BlockQ6_K* w, const ActQ8K* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int sumi = 0;
    const std::int8_t* a = x[b].qs;
    for (int n = 0; n < 2; ++n, a += 128) {
      int g[8] = {};
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        g[is] += (Q6KCode(w[b], n, 0, l) - 32) * a[l];
        g[is + 2] += (Q6KCode(w[b], n, 1, l) - 32) * a[l + 32];
        g[is + 4] += (Q6KCode(w[b], n, 2, l) - 32) * a[l + 64];
        g[is + 6] += (Q6KCode(w[b], n, 3, l) - 32) * a[l + 96];
      }
      for (int k = 0; k < 8; ++k) sumi += w[b].scales[8 * n + k] * g[k];
    }
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(sumi);
  }
  return acc;
}

// Q2_K / Q3_K: 16-element group g = 8n + 2j + l / 16 holds elements
// 128n + 32j + l of 2-bit codes (bits 2j of qs[32n + l]).
template <typename Code>
void SumQ2Groups(const std::uint8_t* qs, const std::int8_t* a, const Code& code, int g_sum[16]) {
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, j = (e / 32) % 4, l = e % 32;
    g_sum[e / 16] += code(n, j, l, (qs[32 * n + l] >> (2 * j)) & 3) * a[e];
  }
}

float DotQ2_K(const BlockQ2_K* w, const ActQ8K* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int g[16] = {};
    SumQ2Groups(
        w[b].qs, x[b].qs, [](int, int, int, int q) { return q; }, g);
    int sumi = 0, summ = 0;
    for (int k = 0; k < 16; ++k) {
      sumi += (w[b].scales[k] & 0xF) * g[k];
      summ += (w[b].scales[k] >> 4) * x[b].bsums[k];
    }
    const float dx = x[b].d;
    acc += F16ToF32(w[b].d) * dx * static_cast<float>(sumi) - F16ToF32(w[b].dmin) * dx * static_cast<float>(summ);
  }
  return acc;
}

float DotQ3_K(const BlockQ3_K* w, const ActQ8K* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int g[16] = {};
    const std::uint8_t* hm = w[b].hmask;
    SumQ2Groups(
        w[b].qs, x[b].qs, [hm](int n, int j, int l, int q) { return q - (((hm[l] >> (4 * n + j)) & 1) != 0 ? 0 : 4); },
        g);
    int sumi = 0;
    for (int k = 0; k < 16; ++k) sumi += (Q3KScale(k, w[b].scales) - 32) * g[k];
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(sumi);
  }
  return acc;
}

}  // namespace

KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ2_KRows, BlockQ2_K, ActQ8K, DotQ2_K)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ3_KRows, BlockQ3_K, ActQ8K, DotQ3_K)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ4_KRows, BlockQ4_K, ActQ8K, DotQ4_K)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ5_KRows, BlockQ5_K, ActQ8K, DotQ5_K)
KVSHARE_DEFINE_SCALAR_ROWS(ScalarQ6_KRows, BlockQ6_K, ActQ8K, DotQ6_K)

}  // namespace kvshare::detail
