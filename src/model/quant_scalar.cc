// Scalar (portable) integer dot kernels: the plain twin of the SIMD files.
#include <cstring>

#include "common/float_convert.h"
#include "model/quant_kernels.h"

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
    const std::uint8_t* ql = w[b].ql;
    const std::uint8_t* qh = w[b].qh;
    const std::int8_t* a = x[b].qs;
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32, a += 128) {
      int g[8] = {};
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = static_cast<int>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        g[is] += q1 * a[l];
        g[is + 2] += q2 * a[l + 32];
        g[is + 4] += q3 * a[l + 64];
        g[is + 6] += q4 * a[l + 96];
      }
      for (int k = 0; k < 8; ++k) sumi += w[b].scales[8 * n + k] * g[k];
    }
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(sumi);
  }
  return acc;
}

// One dot product at a time: the scalar twin has nothing to share between rows.
template <typename Block, typename Act, float (*Dot)(const Block*, const Act*, std::int64_t)>
void Rows(const Block* w, std::int64_t nrows, const Act* x, std::int64_t xs, std::int64_t nb, int acts, float* y,
          std::int64_t ys) {
  for (std::int64_t r = 0; r < nrows; ++r) {
    for (int j = 0; j < acts; ++j) y[j * ys + r] = Dot(w + r * nb, x + j * xs, nb);
  }
}

}  // namespace

const QuantKernels kScalarKernels = {.q8_0 = Rows<BlockQ8_0, ActQ8, DotQ8_0>,
                                     .q4_0 = Rows<BlockQ4_0, ActQ8, DotQ4_0>,
                                     .q4_1 = Rows<BlockQ4_1, ActQ8, DotQ4_1>,
                                     .q5_0 = Rows<BlockQ5_0, ActQ8, DotQ5_0>,
                                     .q5_1 = Rows<BlockQ5_1, ActQ8, DotQ5_1>,
                                     .q4_k = Rows<BlockQ4_K, ActQ8K, DotQ4_K>,
                                     .q5_k = Rows<BlockQ5_K, ActQ8K, DotQ5_K>,
                                     .q6_k = Rows<BlockQ6_K, ActQ8K, DotQ6_K>};

}  // namespace kvshare::detail
