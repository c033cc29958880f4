// Scalar (portable) integer dot kernels: the plain twin of the SIMD files.
#include <cmath>
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
    SumQ2Groups(w[b].qs, x[b].qs, [](int, int, int, int q) { return q; }, g);
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
    SumQ2Groups(w[b].qs, x[b].qs, [hm](int n, int j, int l, int q) { return q - (((hm[l] >> (4 * n + j)) & 1) != 0 ? 0 : 4); }, g);
    int sumi = 0;
    for (int k = 0; k < 16; ++k) sumi += (Q3KScale(k, w[b].scales) - 32) * g[k];
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(sumi);
  }
  return acc;
}

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
    acc += DotTernary(F16ToF32(w[b].d), x[b], [qs](int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3; });
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

float DotMXFP4(const BlockMXFP4* w, const ActQ8* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += kMxfp4Values[w[b].qs[j] & 0xF] * x[b].qs[j] + kMxfp4Values[w[b].qs[j] >> 4] * x[b].qs[j + 16];
    acc += Mxfp4Scale(w[b].e) * x[b].d * static_cast<float>(s);
  }
  return acc;
}

// NVFP4 against per-32 activations (x[2b + h]: sub-blocks 2h, 2h + 1), Q1_0
// (x[4b + k]) and Q2_0 (x[2b + h]): y += sum * d * dx per 16 / 32 elements in
// order (the AVX2 kernels sum in 8 float lanes: equal within fp32 rounding).
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
                                     .q6_k = Rows<BlockQ6_K, ActQ8K, DotQ6_K>,
                                     .q2_k = Rows<BlockQ2_K, ActQ8K, DotQ2_K>,
                                     .q3_k = Rows<BlockQ3_K, ActQ8K, DotQ3_K>,
                                     .iq4_nl = Rows<BlockIQ4_NL, ActQ8, DotIQ4_NL>,
                                     .iq4_xs = Rows<BlockIQ4_XS, ActQ8, DotIQ4_XS>,
                                     .tq1_0 = Rows<BlockTQ1_0, ActQ8K, DotTQ1_0>,
                                     .tq2_0 = Rows<BlockTQ2_0, ActQ8K, DotTQ2_0>,
                                     .mxfp4 = Rows<BlockMXFP4, ActQ8, DotMXFP4>,
                                     .nvfp4 = Rows<BlockNVFP4, ActQ8, DotNVFP4>,
                                     .q1_0 = Rows<BlockQ1_0, ActQ8, DotQ1_0>,
                                     .q2_0 = Rows<BlockQ2_0, ActQ8, DotQ2_0>,
                                     .iq2_xxs = ScalarIqRows<BlockIQ2_XXS>,
                                     .iq2_xs = ScalarIqRows<BlockIQ2_XS>,
                                     .iq2_s = ScalarIqRows<BlockIQ2_S>,
                                     .iq3_xxs = ScalarIqRows<BlockIQ3_XXS>,
                                     .iq3_s = ScalarIqRows<BlockIQ3_S>,
                                     .iq1_s = ScalarIqRows<BlockIQ1_S>,
                                     .iq1_m = ScalarIqRows<BlockIQ1_M>};

}  // namespace kvshare::detail
