// Quantized weights: dequantization of hand-built blocks against hand-computed
// values; MatMul on every compiled kernel level against dequantize + double
// matmul, with a tolerance from the int8 activation quantization error, and
// each SIMD level against the scalar twin on the same int8 activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "common/float_convert.h"
#include "common_record_measured.h"
#include "hwy/targets.h"
#include "kvshare/common/error.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/quant.h"
#include "quant/weight_types.h"

namespace kvshare {
namespace {

using detail::F32ToBF16;
using detail::F32ToF16;

std::vector<float> Dequant(GgmlType t, const void* src, std::int64_t n) {
  std::vector<float> y(static_cast<std::size_t>(n));
  DequantizeRow(t, src, y.data(), n);
  return y;
}

TEST(Dequant, Q8_0) {
  BlockQ8_0 b{};
  b.d = F32ToF16(0.5f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<std::int8_t>(j * 8 - 128);
  const auto y = Dequant(GgmlType::kQ8_0, &b, 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[1], -60.0f);
  EXPECT_EQ(y[31], 60.0f);
}

TEST(Dequant, Q4_0) {
  BlockQ4_0 b{};
  b.d = F32ToF16(2.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
  const auto y = Dequant(GgmlType::kQ4_0, &b, 32);
  EXPECT_EQ(y[0], -16.0f);   // 2 * (0 - 8)
  EXPECT_EQ(y[15], 14.0f);   // 2 * (15 - 8)
  EXPECT_EQ(y[16], 14.0f);   // high nibble of qs[0] = 15
  EXPECT_EQ(y[31], -16.0f);  // high nibble of qs[15] = 0
}

TEST(Dequant, Q5_0) {
  BlockQ5_0 b{};
  b.d = F32ToF16(1.0f);
  const std::uint32_t h = 0x80000001u;  // 5th bit set for elements 0 and 31
  std::memcpy(b.qh, &h, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = 0x73;  // low 3, high 7
  const auto y = Dequant(GgmlType::kQ5_0, &b, 32);
  EXPECT_EQ(y[0], 3.0f);    // (3 | 16) - 16
  EXPECT_EQ(y[1], -13.0f);  // 3 - 16
  EXPECT_EQ(y[16], -9.0f);  // 7 - 16
  EXPECT_EQ(y[31], 7.0f);   // (7 | 16) - 16
}

TEST(Dequant, Q4_1) {
  BlockQ4_1 b{};
  b.d = F32ToF16(2.0f);
  b.m = F32ToF16(-3.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
  const auto y = Dequant(GgmlType::kQ4_1, &b, 32);
  EXPECT_EQ(y[0], -3.0f);   // 2 * 0 - 3
  EXPECT_EQ(y[15], 27.0f);  // 2 * 15 - 3
  EXPECT_EQ(y[16], 27.0f);  // high nibble of qs[0] = 15
  EXPECT_EQ(y[31], -3.0f);  // high nibble of qs[15] = 0
}

TEST(Dequant, Q5_1) {
  BlockQ5_1 b{};
  b.d = F32ToF16(1.0f);
  b.m = F32ToF16(0.5f);
  const std::uint32_t h = 0x80000001u;  // 5th bit set for elements 0 and 31
  std::memcpy(b.qh, &h, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = 0x73;  // low 3, high 7
  const auto y = Dequant(GgmlType::kQ5_1, &b, 32);
  EXPECT_EQ(y[0], 19.5f);   // (3 | 16) + 0.5
  EXPECT_EQ(y[1], 3.5f);    // 3 + 0.5
  EXPECT_EQ(y[16], 7.5f);   // 7 + 0.5
  EXPECT_EQ(y[31], 23.5f);  // (7 | 16) + 0.5
}

TEST(Dequant, Q4_K) {
  BlockQ4_K b{};
  b.d = F32ToF16(1.0f);
  b.dmin = F32ToF16(0.5f);
  // sc0..3 = 1 (+ top bits 01 of sc4..7), m0..3 = 2, low nibbles of sc4..7 = 5, of m4..7 = 3.
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = 0x41;
    b.scales[j + 4] = 0x02;
    b.scales[j + 8] = 0x35;
  }
  std::memset(b.qs, 0x97, sizeof b.qs);  // low nibble 7, high nibble 9
  const auto y = Dequant(GgmlType::kQ4_K, &b, 256);
  EXPECT_EQ(y[0], 6.0f);      // 1*1*7 - 0.5*2
  EXPECT_EQ(y[32], 8.0f);     // 1*1*9 - 0.5*2
  EXPECT_EQ(y[128], 145.5f);  // sc = 5 | 1<<4 = 21: 21*7 - 0.5*3
  EXPECT_EQ(y[255], 187.5f);  // 21*9 - 1.5
}

// The Q4_K block above plus 5th bits: qh[l] bit j goes to element 32j + l.
TEST(Dequant, Q5_K) {
  BlockQ5_K b{};
  b.d = F32ToF16(1.0f);
  b.dmin = F32ToF16(0.5f);
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = 0x41;
    b.scales[j + 4] = 0x02;
    b.scales[j + 8] = 0x35;
  }
  std::memset(b.qs, 0x97, sizeof b.qs);  // low nibble 7, high nibble 9
  b.qh[0] = 0x01;                        // element 0 (sub-block 0)
  b.qh[1] = 0x02;                        // element 33 (sub-block 1)
  b.qh[31] = 0x80;                       // element 255 (sub-block 7)
  const auto y = Dequant(GgmlType::kQ5_K, &b, 256);
  EXPECT_EQ(y[0], 22.0f);     // 1*1*(7+16) - 0.5*2
  EXPECT_EQ(y[1], 6.0f);      // 1*1*7 - 1
  EXPECT_EQ(y[32], 8.0f);     // 1*1*9 - 1
  EXPECT_EQ(y[33], 24.0f);    // 1*1*(9+16) - 1
  EXPECT_EQ(y[128], 145.5f);  // sc = 21: 21*7 - 0.5*3
  EXPECT_EQ(y[254], 187.5f);  // 21*9 - 1.5
  EXPECT_EQ(y[255], 523.5f);  // 21*(9+16) - 1.5
}

TEST(Dequant, Q6_K) {
  BlockQ6_K b{};
  b.d = F32ToF16(0.25f);
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<std::int8_t>(g - 8);
  std::memset(b.ql, 0x21, sizeof b.ql);  // low 1, high 2
  std::memset(b.qh, 0xE4, sizeof b.qh);  // 2-bit fields 0, 1, 2, 3
  const auto y = Dequant(GgmlType::kQ6_K, &b, 256);
  EXPECT_EQ(y[0], 62.0f);          // q = 1 - 32 = -31, sc[0] = -8
  EXPECT_EQ(y[32], 22.5f);         // q = 17 - 32 = -15, sc[2] = -6
  EXPECT_EQ(y[64], -2.0f);         // q = 34 - 32 = 2, sc[4] = -4
  EXPECT_EQ(y[96], -9.0f);         // q = 50 - 32 = 18, sc[6] = -2
  EXPECT_EQ(y[128 + 16], -7.75f);  // half 1, sc[9] = 1, q = -31
}

TEST(Dequant, Q2_K) {
  BlockQ2_K b{};
  b.d = F32ToF16(0.5f);
  b.dmin = F32ToF16(0.25f);
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<std::uint8_t>(((g % 4) << 4) | (g + 1));
  for (int i = 0; i < 64; ++i) b.qs[i] = 0xE4;  // 2-bit fields 0, 1, 2, 3 (j = 0..3)
  b.qs[33] = 0x03;                              // n = 1, l = 1: code 3 at j = 0, 0 at j = 1..3
  const auto y = Dequant(GgmlType::kQ2_K, &b, 256);
  EXPECT_EQ(y[0], 0.0f);                        // code 0, sc 1, m 0
  EXPECT_EQ(y[17], -0.25f);                     // group 1: sc 2, m 1, code 0
  EXPECT_EQ(y[32], 0.5f * 3 * 1 - 0.5f);        // j = 1: group 2 (sc 3, m 2), code 1
  EXPECT_EQ(y[96 + 20], 0.5f * 8 * 3 - 0.75f);  // j = 3, l = 20: group 7 (sc 8, m 3), code 3
  EXPECT_EQ(y[129], 0.5f * 9 * 3);              // n = 1, l = 1, j = 0: group 8 (sc 9, m 0), code 3
  EXPECT_EQ(y[161], -0.5f);                     // j = 1: group 10 (sc 11, m 2), code 0
}

TEST(Dequant, Q3_K) {
  BlockQ3_K b{};
  b.d = F32ToF16(0.5f);
  // 6-bit scales s_g = g + 30 (so s_g - 32 = g - 2): low nibbles in bytes 0-7
  // (groups 0-7 low, 8-15 high), 2-bit highs in bytes 8-11 (group g at byte
  // 8 + g % 4, bits 2 (g / 4)).
  for (int g = 0; g < 16; ++g) {
    const int sg = g + 30;
    b.scales[g % 8] |= static_cast<std::uint8_t>((sg & 0xF) << (4 * (g / 8)));
    b.scales[8 + g % 4] |= static_cast<std::uint8_t>((sg >> 4) << (2 * (g / 4)));
  }
  for (int g = 0; g < 16; ++g) EXPECT_EQ(Q3KScale(g, b.scales), g + 30) << g;
  for (int i = 0; i < 64; ++i) b.qs[i] = 0xE4;  // codes 0, 1, 2, 3 at j = 0..3
  b.hmask[5] = 0x01;                            // element 5 (n = 0, j = 0) keeps its code; others - 4
  b.hmask[7] = 0x80;                            // element 128 + 96 + 7 (n = 1, j = 3)
  const auto y = Dequant(GgmlType::kQ3_K, &b, 256);
  EXPECT_EQ(y[0], 0.5f * -2 * -4);            // group 0: s - 32 = -2, code 0 - 4
  EXPECT_EQ(y[5], 0.0f);                      // code 0, high bit set
  EXPECT_EQ(y[64 + 16], 0.5f * 3 * -2);       // j = 2, l = 16: group 5, code 2 - 4
  EXPECT_EQ(y[128 + 96 + 7], 0.5f * 12 * 3);  // group 14, code 3, high bit set
  EXPECT_EQ(y[128 + 96 + 8], 0.5f * 12 * -1);
}

TEST(Dequant, IQ4) {
  BlockIQ4_NL nl{};
  nl.d = F32ToF16(0.5f);
  for (int j = 0; j < 16; ++j) nl.qs[j] = static_cast<std::uint8_t>((15 - j) << 4 | j);
  const auto y = Dequant(GgmlType::kIQ4_NL, &nl, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * kIq4Values[j]);
    EXPECT_EQ(y[16 + j], 0.5f * kIq4Values[15 - j]);
  }
  BlockIQ4_XS xs{};
  xs.d = F32ToF16(0.25f);
  // ls_ib = 32 + ib - 4 (6 bits): low nibbles in scales_l, high 2 bits in scales_h.
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = 28 + ib;
    xs.scales_l[ib / 2] |= static_cast<std::uint8_t>((ls & 0xF) << (4 * (ib % 2)));
    xs.scales_h = static_cast<std::uint16_t>(xs.scales_h | ((ls >> 4) << (2 * ib)));
  }
  for (int i = 0; i < 128; ++i) xs.qs[i] = static_cast<std::uint8_t>(i % 16);
  const auto z = Dequant(GgmlType::kIQ4_XS, &xs, 256);
  for (int ib = 0; ib < 8; ++ib) {
    EXPECT_EQ(IQ4XSScale(ib, xs), 28 + ib);
    EXPECT_EQ(z[32 * ib + 3], 0.25f * static_cast<float>(ib - 4) * kIq4Values[3]) << ib;
    EXPECT_EQ(z[32 * ib + 16 + 3], 0.25f * static_cast<float>(ib - 4) * kIq4Values[0]) << ib;
  }
}

TEST(Dequant, TernaryAndMxfp4) {
  BlockTQ2_0 t2{};
  t2.d = F32ToF16(0.5f);
  for (int i = 0; i < 64; ++i) t2.qs[i] = 0x24;  // codes 0, 1, 2, 0 at j = 0..3
  const auto y2 = Dequant(GgmlType::kTQ2_0, &t2, 256);
  EXPECT_EQ(y2[0], -0.5f);
  EXPECT_EQ(y2[32], 0.0f);
  EXPECT_EQ(y2[64 + 5], 0.5f);
  EXPECT_EQ(y2[128 + 96], -0.5f);

  // TQ1_0: a byte b holds 5 trits as b = ceil(256 * v / 243), v the base-3
  // number with the first trit most significant.
  BlockTQ1_0 t1{};
  t1.d = F32ToF16(2.0f);
  const int trits[5] = {2, 0, 1, 1, 2};  // v = 2*81 + 0*27 + 1*9 + 1*3 + 2 = 176
  const auto pack = [](int v) { return static_cast<std::uint8_t>((v * 256 + 242) / 243); };
  t1.qs[7] = pack(176);
  t1.qs[32 + 3] = pack(176);
  t1.qh[2] = pack(2 * 81 + 0 * 27 + 1 * 9 + 1 * 3);  // 4 trits 2, 0, 1, 1 (then a 0)
  for (int m = 0; m < 5; ++m) EXPECT_EQ(Tq1Digit(t1.qs[7], m), trits[m]) << m;
  const auto y1 = Dequant(GgmlType::kTQ1_0, &t1, 256);
  for (int m = 0; m < 5; ++m) {
    EXPECT_EQ(y1[32 * m + 7], 2.0f * static_cast<float>(trits[m] - 1)) << m;
    EXPECT_EQ(y1[160 + 16 * m + 3], 2.0f * static_cast<float>(trits[m] - 1)) << m;
  }
  for (int m = 0; m < 4; ++m) EXPECT_EQ(y1[240 + 4 * m + 2], 2.0f * static_cast<float>(trits[m] - 1)) << m;
  EXPECT_EQ(y1[0], -2.0f);  // byte 0 is trits 0, 0, 0, 0, 0

  BlockMXFP4 mx{};
  mx.e = 130;  // 2^(130 - 128) = 4
  for (int j = 0; j < 16; ++j) mx.qs[j] = static_cast<std::uint8_t>((15 - j) << 4 | j);
  const auto ym = Dequant(GgmlType::kMXFP4, &mx, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(ym[j], 4.0f * kMxfp4Values[j]);
    EXPECT_EQ(ym[16 + j], 4.0f * kMxfp4Values[15 - j]);
  }
  EXPECT_EQ(Mxfp4Scale(127), 0.5f);
  EXPECT_EQ(Mxfp4Scale(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(Mxfp4Scale(0), std::ldexp(1.0f, -128));
}

// The types gguf-py cannot dequantize (Q1_0, Q2_0) and NVFP4's scale
// decoding, on hand-built blocks against ggml-quants.c's formulas.
TEST(Dequant, Q1_0Q2_0AndNvfp4) {
  BlockQ1_0 b1{};
  b1.d = F32ToF16(0.75f);
  b1.qs[0] = 0x05;   // elements 0 and 2 positive
  b1.qs[15] = 0x80;  // element 127 positive
  const auto y1 = Dequant(GgmlType::kQ1_0, &b1, 128);
  for (int j = 0; j < 128; ++j) EXPECT_EQ(y1[j], j == 0 || j == 2 || j == 127 ? 0.75f : -0.75f) << j;

  BlockQ2_0 b2{};
  b2.d = F32ToF16(-2.0f);
  b2.qs[0] = 0xE4;   // codes 0, 1, 2, 3 at j = 0..3
  b2.qs[15] = 0x80;  // code 2 at element 63
  const auto y2 = Dequant(GgmlType::kQ2_0, &b2, 64);
  EXPECT_EQ(y2[0], 2.0f);
  EXPECT_EQ(y2[1], -0.0f);
  EXPECT_EQ(y2[2], -2.0f);
  EXPECT_EQ(y2[3], -4.0f);
  EXPECT_EQ(y2[63], -2.0f);
  EXPECT_EQ(y2[4], 2.0f);

  // UE4M3: 0x38 = exponent 7, mantissa 0: 1.0, halved; 0x01: 2^-9, halved;
  // 0x7F (NaN) and 0 give 0; bit 7 is ignored.
  EXPECT_EQ(Ue4m3Scale(0x38), 0.5f);
  EXPECT_EQ(Ue4m3Scale(0x3C), 0.75f);
  EXPECT_EQ(Ue4m3Scale(0x01), std::ldexp(1.0f, -10));
  EXPECT_EQ(Ue4m3Scale(0x7F), 0.0f);
  EXPECT_EQ(Ue4m3Scale(0x00), 0.0f);
  EXPECT_EQ(Ue4m3Scale(0xB8), 0.5f);
  BlockNVFP4 nv{};
  nv.d[0] = 0x38;
  nv.d[3] = 0x48;  // exponent 9: 4, halved
  for (int j = 0; j < 8; ++j) nv.qs[j] = static_cast<std::uint8_t>((15 - j) << 4 | j);
  nv.qs[31] = 0x9F;  // element 63 (high nibble of byte 7 of sub-block 3): code 9 = -1
  const auto yn = Dequant(GgmlType::kNVFP4, &nv, 64);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(yn[j], 0.5f * kMxfp4Values[j]) << j;
    EXPECT_EQ(yn[8 + j], 0.5f * kMxfp4Values[15 - j]) << j;
  }
  EXPECT_EQ(yn[48 + 7], 2.0f * kMxfp4Values[15]);
  EXPECT_EQ(yn[63], -2.0f);
}

TEST(Dequant, FloatTypes) {
  const std::uint16_t h[2] = {F32ToF16(1.5f), F32ToF16(-0.25f)};
  const std::uint16_t bf[2] = {F32ToBF16(3.0f), F32ToBF16(-2.0f)};
  const float f[2] = {7.0f, -1.0f};
  EXPECT_EQ(Dequant(GgmlType::kF16, h, 2), (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(Dequant(GgmlType::kBF16, bf, 2), (std::vector<float>{3.0f, -2.0f}));
  EXPECT_EQ(Dequant(GgmlType::kF32, f, 2), (std::vector<float>{7.0f, -1.0f}));
  EXPECT_THROW(Dequant(GgmlType::kQ8_0, f, 16), Error);
  EXPECT_THROW(Dequant(GgmlType::kQ8_K, f, 256), Error);
}

// Random but valid weight bytes: fp16 scale fields are set to small finite values.
std::vector<std::uint8_t> RandomWeights(GgmlType t, std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  const std::int64_t nb = rows * cols / GgmlBlockSize(t);
  const std::size_t bb = static_cast<std::size_t>(GgmlBlockBytes(t));
  std::vector<std::uint8_t> w(static_cast<std::size_t>(nb) * bb);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (auto& v : w) v = static_cast<std::uint8_t>(byte(rng));
  auto put16 = [&](std::size_t at, float v) {
    const std::uint16_t h = F32ToF16(v);
    std::memcpy(w.data() + at, &h, 2);
  };
  if (t == GgmlType::kF32) {
    for (std::int64_t i = 0; i < rows * cols; ++i) {
      const float v = scale(rng) * 50;
      std::memcpy(w.data() + 4 * i, &v, 4);
    }
    return w;
  }
  if (t == GgmlType::kF16 || t == GgmlType::kBF16) {
    for (std::int64_t i = 0; i < rows * cols; ++i) {
      const float v = scale(rng) * 50;
      const std::uint16_t h = t == GgmlType::kF16 ? F32ToF16(v) : F32ToBF16(v);
      std::memcpy(w.data() + 2 * i, &h, 2);
    }
    return w;
  }
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::size_t at = static_cast<std::size_t>(b) * bb;
    if (t == GgmlType::kQ6_K) {
      put16(at + 208, scale(rng));
    } else if (t == GgmlType::kQ2_K) {
      put16(at + 80, std::fabs(scale(rng)));
      put16(at + 82, std::fabs(scale(rng)));
    } else if (t == GgmlType::kQ3_K) {
      put16(at + 108, scale(rng));
    } else if (t == GgmlType::kTQ2_0) {
      put16(at + 64, scale(rng));
    } else if (t == GgmlType::kTQ1_0) {
      put16(at + 52, scale(rng));
    } else if (t == GgmlType::kMXFP4) {
      w[at] = static_cast<std::uint8_t>(118 + byte(rng) % 8);  // 2^-10 .. 2^-3
    } else if (t == GgmlType::kQ4_K || t == GgmlType::kQ5_K) {
      put16(at, std::fabs(scale(rng)));
      put16(at + 2, std::fabs(scale(rng)));
    } else if (t == GgmlType::kNVFP4) {  // E4M3 sub-block scales 2^-7 .. 2^-2
      for (int s = 0; s < 4; ++s) w[at + s] = static_cast<std::uint8_t>(0x08 * (1 + byte(rng) % 6) + byte(rng) % 8);
    } else if (t == GgmlType::kIQ1_M) {  // d's fp16 bits are the scale words' top nibbles
      const std::uint16_t h = F32ToF16(scale(rng));
      for (int k = 0; k < 4; ++k) {
        std::uint16_t word;
        std::memcpy(&word, w.data() + at + 48 + 2 * k, 2);
        word = static_cast<std::uint16_t>((word & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12));
        std::memcpy(w.data() + at + 48 + 2 * k, &word, 2);
      }
    } else if (t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1) {
      put16(at, scale(rng));
      put16(at + 2, scale(rng) * 4);  // the block minimum, of either sign
    } else {
      put16(at, scale(rng));
    }
  }
  return w;
}

struct MatShape {
  GgmlType type;
  std::int64_t rows, cols, m;
};

void CheckMatMul(const MatShape& s, KernelLevel level, ThreadPool* pool, std::mt19937& rng) {
  const auto wbytes = RandomWeights(s.type, s.rows, s.cols, rng);
  const WeightMatrix w = WeightMatrix::Make(wbytes.data(), s.type, s.rows, s.cols);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(s.m * s.cols));
  for (auto& v : x) v = nd(rng);
  x[0] = 6.0f;  // an outlier widens one block's scale
  std::vector<float> y(static_cast<std::size_t>(s.m * s.rows), NAN);
  MatMul(w, {.x = x.data(), .m = s.m, .y = y.data(), .pool = pool, .level = level});

  // Float weights, and every weight type on the kFloat level, see unrounded activations.
  const bool float_w =
      s.type == GgmlType::kF32 || s.type == GgmlType::kF16 || s.type == GgmlType::kBF16 || level == KernelLevel::kFloat;
  // Activations are quantized per block of qb with step amax/127: each x_i moves
  // by at most amax_b/254, so |err| <= sum_b amax_b/254 * sum_{i in b} |w_i|,
  // plus fp32 accumulation (relative 1e-5 of sum |w_i x_i| and of the scale-sum terms).
  const std::int64_t qb = float_w ? s.cols : UsesSuperBlockActivations(s.type) ? 256 : 32;
  std::vector<float> wrow(static_cast<std::size_t>(s.cols));
  for (std::int64_t r = 0; r < s.rows; ++r) {
    DequantizeRow(s.type, wbytes.data() + static_cast<std::size_t>(r) * w.row_bytes, wrow.data(), s.cols);
    float wmax = 0.0f;
    for (float v : wrow) wmax = std::fmax(wmax, std::fabs(v));
    for (std::int64_t i = 0; i < s.m; ++i) {
      const float* xi = x.data() + i * s.cols;
      double ref = 0.0, quant_err = 0.0, mag = 0.0;
      for (std::int64_t b = 0; b < s.cols / qb; ++b) {
        double amax = 0.0, wsum = 0.0;
        for (std::int64_t c = b * qb; c < (b + 1) * qb; ++c) {
          ref += static_cast<double>(wrow[c]) * xi[c];
          amax = std::fmax(amax, std::fabs(xi[c]));
          wsum += std::fabs(wrow[c]);
          mag += std::fabs(static_cast<double>(xi[c])) * (std::fabs(wrow[c]) + wmax);
        }
        quant_err += amax / 254.0 * wsum;
      }
      const double tol = (float_w ? 0.0 : quant_err * 1.0001) + 1e-5 * mag + 1e-6;
      const float got = y[static_cast<std::size_t>(i * s.rows + r)];
      ASSERT_NEAR(got, ref, tol) << GgmlTypeName(s.type) << " level " << KernelLevelName(level) << " rows " << s.rows
                                 << " cols " << s.cols << " m " << s.m << " at row " << r << " x-row " << i;
    }
  }
}

const GgmlType kIntTypes[] = {
    GgmlType::kQ8_0,    GgmlType::kQ4_0,   GgmlType::kQ4_1,  GgmlType::kQ5_0,    GgmlType::kQ5_1,
    GgmlType::kQ4_K,    GgmlType::kQ5_K,   GgmlType::kQ6_K,  GgmlType::kQ2_K,    GgmlType::kQ3_K,
    GgmlType::kIQ4_NL,  GgmlType::kIQ4_XS, GgmlType::kTQ1_0, GgmlType::kTQ2_0,   GgmlType::kMXFP4,
    GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS, GgmlType::kIQ3_S,
    GgmlType::kIQ1_S,   GgmlType::kIQ1_M,  GgmlType::kNVFP4, GgmlType::kQ1_0,    GgmlType::kQ2_0};
// The types whose SIMD kernels repeat the scalar twin's fma per block.
const GgmlType kFmaTwinTypes[] = {GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS,
                                  GgmlType::kIQ3_S,   GgmlType::kIQ1_S,  GgmlType::kIQ1_M};
const GgmlType kTypes[] = {
    GgmlType::kQ8_0,    GgmlType::kQ4_0,  GgmlType::kQ4_1,  GgmlType::kQ5_0,    GgmlType::kQ5_1,   GgmlType::kQ4_K,
    GgmlType::kQ5_K,    GgmlType::kQ6_K,  GgmlType::kQ2_K,  GgmlType::kQ3_K,    GgmlType::kIQ4_NL, GgmlType::kIQ4_XS,
    GgmlType::kTQ1_0,   GgmlType::kTQ2_0, GgmlType::kMXFP4, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
    GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kIQ1_S, GgmlType::kIQ1_M,   GgmlType::kNVFP4,  GgmlType::kQ1_0,
    GgmlType::kQ2_0,    GgmlType::kF32,   GgmlType::kF16,   GgmlType::kBF16};

// Every row of the weight-type table gets the checks below at every level.
TEST(MatMul, ChecksEveryWeightType) {
  for (const detail::WeightTypeTraits& t : detail::WeightTypes()) {
    EXPECT_NE(std::find(std::begin(kTypes), std::end(kTypes), t.type), std::end(kTypes)) << t.name;
  }
  EXPECT_EQ(std::size(kTypes), detail::WeightTypes().size());
}

TEST(MatMul, MatchesDequantReferenceOnEveryLevel) {
  std::mt19937 rng(1234);
  ThreadPool pool(3);
  int levels = 0;
  for (KernelLevel level : {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512Vnni, KernelLevel::kAmx,
                            KernelLevel::kFloat}) {
    if (!KernelLevelAvailable(level)) continue;
    ++levels;
    for (GgmlType t : kTypes) {
      const bool k = UsesSuperBlockActivations(t);
      const std::int64_t bs = GgmlBlockSize(t);
      // Odd block counts (1, 3, 5 blocks: the AVX-512 pair loop's tail), odd
      // rows, m = 1 and m = 3, 6 (activation-row groups of 3, and of 4 + 2).
      for (std::int64_t nblk : {std::int64_t{1}, std::int64_t{3}, k ? std::int64_t{5} : std::int64_t{20}}) {
        const std::int64_t cols =
            t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16 ? 32 * nblk + 7 : bs * nblk;
        for (std::int64_t rows : {1, 7, 33}) {
          for (std::int64_t m : {1, 3, 6}) {
            CheckMatMul({t, rows, cols, m}, level, rows == 33 ? &pool : nullptr, rng);
          }
        }
      }
    }
  }
  EXPECT_GE(levels, 1);
  testing::RecordMeasured("kernel levels tested: %d (default %s)\n", levels, KernelLevelName(DefaultKernelLevel()));
}

// Random weights [rows, cols] of a type and activations [m, cols] (normal).
struct RandomMatMul {
  std::vector<std::uint8_t> wbytes;
  WeightMatrix w;
  std::vector<float> x;
  RandomMatMul(GgmlType t, std::int64_t rows, std::int64_t cols, std::int64_t m, std::mt19937& rng)
      : wbytes(RandomWeights(t, rows, cols, rng)),
        w(WeightMatrix::Make(wbytes.data(), t, rows, cols)),
        x(static_cast<std::size_t>(m * cols)) {
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
  }
};

TEST(MatMul, IndependentOfThreadCount) {
  std::mt19937 rng(7);
  for (GgmlType t : kTypes) {
    const std::int64_t rows = 97, cols = 512, m = 2;
    const RandomMatMul c(t, rows, cols, m, rng);
    std::vector<float> y1(static_cast<std::size_t>(m * rows)), y4(y1.size());
    MatMul(c.w, {.x = c.x.data(), .m = m, .y = y1.data()});
    ThreadPool pool(4);
    MatMul(c.w, {.x = c.x.data(), .m = m, .y = y4.data(), .pool = &pool});
    EXPECT_EQ(0, std::memcmp(y1.data(), y4.data(), y1.size() * 4)) << GgmlTypeName(t);
  }
}

// The kernels take activation rows in groups (detail::kMaxActRows): a row's
// result must not depend on the group it lands in. m = 13 (groups of 8 and
// 5; the generic kernels split those into 4 + 4 and 4 + 1) against each row
// alone (m = 1), bit for bit, on every level.
TEST(MatMul, RowResultIndependentOfActivationGroup) {
  std::mt19937 rng(11);
  for (KernelLevel level : {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512Vnni, KernelLevel::kAmx,
                            KernelLevel::kFloat}) {
    if (!KernelLevelAvailable(level)) continue;
    for (GgmlType t : kTypes) {
      const std::int64_t rows = 13, cols = 768, m = 13;
      const RandomMatMul c(t, rows, cols, m, rng);
      std::vector<float> all(static_cast<std::size_t>(m * rows)), one(static_cast<std::size_t>(rows));
      MatMul(c.w, {.x = c.x.data(), .m = m, .y = all.data(), .level = level});
      for (std::int64_t i = 0; i < m; ++i) {
        MatMul(c.w, {.x = c.x.data() + i * cols, .m = 1, .y = one.data(), .level = level});
        EXPECT_EQ(0, std::memcmp(one.data(), all.data() + i * rows, one.size() * 4))
            << GgmlTypeName(t) << " level " << KernelLevelName(level) << " activation row " << i;
      }
    }
  }
}

// Float weights run in register tiles of several weight and activation rows
// (kernels/float.cc): every output must equal the one-row dot product
// (detail::DotF32 / DotF16 / DotBF16) bit for bit, on row counts around the
// tile sizes and row lengths with a partial SIMD chunk and a scalar tail.
TEST(MatMul, FloatTilesMatchOneDot) {
  std::mt19937 rng(5);
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    for (std::int64_t cols : {7, 53, 588}) {
      const std::int64_t rows = 7, m = 11;
      const RandomMatMul c(t, rows, cols, m, rng);
      std::vector<float> y(static_cast<std::size_t>(m * rows));
      MatMul(c.w, {.x = c.x.data(), .m = m, .y = y.data()});
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::uint8_t* wr = c.wbytes.data() + static_cast<std::size_t>(r) * c.w.row_bytes;
        const auto* w16 = reinterpret_cast<const std::uint16_t*>(wr);
        for (std::int64_t i = 0; i < m; ++i) {
          const float* xi = c.x.data() + i * cols;
          const float want = t == GgmlType::kF32   ? detail::DotF32(reinterpret_cast<const float*>(wr), xi, cols)
                             : t == GgmlType::kF16 ? detail::DotF16(w16, xi, cols)
                                                   : detail::DotBF16(w16, xi, cols);
          EXPECT_EQ(0, std::memcmp(&want, &y[static_cast<std::size_t>(i * rows + r)], 4))
              << GgmlTypeName(t) << " cols " << cols << " row " << r << " x-row " << i;
        }
      }
    }
  }
}

// One SIMD level against the scalar twin on random weights and activations:
// both see the same int8 activations and form the same exact integer block
// sums, so they differ only by fp32 rounding of the per-block products and of
// their sum (at most ~nb ulps of sum |w_i x_i|; allowed 1e-5 of it). Returns
// the number of outputs compared.
int CompareWithScalarTwin(GgmlType t, std::int64_t rows, std::int64_t cols, std::int64_t m, KernelLevel level,
                          ThreadPool* pool, std::mt19937& rng) {
  const RandomMatMul c(t, rows, cols, m, rng);
  std::vector<float> ys(static_cast<std::size_t>(m * rows)), yv(ys.size());
  MatMul(c.w, {.x = c.x.data(), .m = m, .y = ys.data(), .pool = pool, .level = KernelLevel::kScalar});
  MatMul(c.w, {.x = c.x.data(), .m = m, .y = yv.data(), .pool = rows > 16 ? pool : nullptr, .level = level});
  std::vector<float> wrow(static_cast<std::size_t>(cols));
  int compared = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t, c.wbytes.data() + static_cast<std::size_t>(r) * c.w.row_bytes, wrow.data(), cols);
    float wmax = 0.0f;
    for (float v : wrow) wmax = std::fmax(wmax, std::fabs(v));
    for (std::int64_t i = 0; i < m; ++i) {
      double mag = 0.0;
      for (std::int64_t k = 0; k < cols; ++k) mag += std::fabs(c.x[i * cols + k]) * (std::fabs(wrow[k]) + wmax);
      const std::size_t at = static_cast<std::size_t>(i * rows + r);
      EXPECT_NEAR(yv[at], ys[at], 1e-5 * mag + 1e-6)
          << GgmlTypeName(t) << " level " << KernelLevelName(level) << " rows " << rows << " cols " << cols << " m "
          << m << " at row " << r << " x-row " << i;
      if (std::fabs(yv[at] - ys[at]) > 1e-5 * mag + 1e-6) return compared;  // one report per shape
      ++compared;
    }
  }
  return compared;
}

// Shapes: 1, 2, 3, 9 blocks (the AVX-512 pair loop's tail), rows not a
// multiple of the 16-row task or of the 8-row activation group, and m = 1, 2,
// 5, 9.
TEST(MatMul, SimdMatchesScalarTwin) {
  std::mt19937 rng(99);
  ThreadPool pool(2);
  int compared = 0;
  for (KernelLevel level : {KernelLevel::kAvx2, KernelLevel::kAvx512Vnni, KernelLevel::kAmx}) {
    if (!KernelLevelAvailable(level)) continue;
    for (GgmlType t : kIntTypes) {
      for (std::int64_t nblk : {1, 2, 3, 9}) {
        for (std::int64_t rows : {1, 5, 17, 33}) {
          for (std::int64_t m : {1, 2, 5, 9})
            compared += CompareWithScalarTwin(t, rows, GgmlBlockSize(t) * nblk, m, level, &pool, rng);
        }
      }
    }
  }
  testing::RecordMeasured("outputs compared with the scalar twin: %d\n", compared);
}

// The IQ grid kernels form the scalar twin's exact integer block sums and its
// fma per block (quant/quant_iq.h), so they are bitwise equal to it; also
// on the extreme blocks (every byte 0xFF: the largest grid indices and scales,
// every sign negative) against activations of one sign at full scale, where
// an int16 pair sum would saturate first, checked against a float64 product.
// m = 1 (AVX2 kernel on both levels), 2 and 11 (AVX-512: a 16-row tile and 5
// rows on the AVX2 kernel; passes of 8 and 3), 64 (8 full passes).
TEST(MatMul, FmaKernelsBitwiseEqualScalarTwin) {
  std::mt19937 rng(17);
  int levels = 0;
  for (KernelLevel level : {KernelLevel::kAvx2, KernelLevel::kAvx512Vnni, KernelLevel::kAmx}) {
    if (!KernelLevelAvailable(level)) continue;
    ++levels;
    for (GgmlType t : kFmaTwinTypes) {
      for (const auto& [extreme, m] : {std::pair{false, 1}, std::pair{false, 2}, std::pair{false, 11},
                                       std::pair{false, 64}, std::pair{true, 11}}) {
        const std::int64_t rows = 21, cols = 768;
        RandomMatMul c(t, rows, cols, m, rng);
        if (extreme) {
          std::vector<std::uint8_t> bytes(c.wbytes.size(), 0xFF);
          const std::size_t bb = static_cast<std::size_t>(GgmlBlockBytes(t));
          for (std::size_t at = 0; at < bytes.size(); at += bb) {
            // A small positive d (fp16 0x1400 = 2^-10) where the type has a d field.
            if (t != GgmlType::kIQ1_M) {
              bytes[at] = 0x00;
              bytes[at + 1] = 0x14;
            } else {
              for (int k = 0; k < 4; ++k)
                bytes[at + 48 + 2 * k + 1] = static_cast<std::uint8_t>(0x0F | ((0x1400 >> (4 * k)) & 0xF) << 4);
            }
          }
          c.wbytes = bytes;
          c.w = WeightMatrix::Make(c.wbytes.data(), t, rows, cols);
          for (auto& v : c.x) v = 1.0f + 0.01f * std::fabs(v);
        }
        std::vector<float> ys(static_cast<std::size_t>(m * rows)), yv(ys.size());
        MatMul(c.w, {.x = c.x.data(), .m = m, .y = ys.data(), .level = KernelLevel::kScalar});
        MatMul(c.w, {.x = c.x.data(), .m = m, .y = yv.data(), .level = level});
        EXPECT_EQ(0, std::memcmp(ys.data(), yv.data(), ys.size() * 4))
            << GgmlTypeName(t) << " level " << KernelLevelName(level) << " m " << m
            << (extreme ? " extreme blocks" : "");
        if (!extreme) continue;
        // x in [1, 1.05): each int8 activation is off by at most amax/254.
        std::vector<float> wrow(static_cast<std::size_t>(cols));
        for (std::int64_t r = 0; r < rows; ++r) {
          DequantizeRow(t, c.wbytes.data() + static_cast<std::size_t>(r) * c.w.row_bytes, wrow.data(), cols);
          for (std::int64_t i = 0; i < m; ++i) {
            double ref = 0.0, wsum = 0.0, amax = 0.0;
            for (std::int64_t k = 0; k < cols; ++k) {
              ref += static_cast<double>(wrow[k]) * c.x[i * cols + k];
              wsum += std::fabs(wrow[k]);
              amax = std::fmax(amax, c.x[i * cols + k]);
            }
            ASSERT_NEAR(yv[static_cast<std::size_t>(i * rows + r)], ref,
                        amax / 254.0 * wsum * 1.0001 + 1e-5 * amax * wsum)
                << GgmlTypeName(t) << " extreme blocks, level " << KernelLevelName(level);
          }
        }
      }
    }
  }
  if (levels == 0) GTEST_SKIP() << "no SIMD kernel level on this CPU";
}

// The row lengths of Gemma 4 E2B's matrices (1536: q / k / v / gate / up /
// inp_gate / the LM head; 2048 and 4096: attn_output; 6144 and 12288:
// ffn_down; 256: proj), in the K-quant types of its Q4_K_M file and the
// 32-element types, decode (m = 1) and a prefill-like m = 6.
TEST(MatMul, SimdMatchesScalarTwinOnE2bRowLengths) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  int compared = 0;
  for (KernelLevel level : {KernelLevel::kAvx2, KernelLevel::kAvx512Vnni, KernelLevel::kAmx}) {
    if (!KernelLevelAvailable(level)) continue;
    for (GgmlType t : kIntTypes) {
      for (std::int64_t cols : {256, 1536, 2048, 4096, 6144, 12288}) {
        for (std::int64_t m : {1, 6}) compared += CompareWithScalarTwin(t, 19, cols, m, level, &pool, rng);
      }
    }
  }
  testing::RecordMeasured("outputs compared with the scalar twin: %d\n", compared);
}

// MatMulMany: every target's output bitwise equal to MatMul on its own, on
// every level, for targets of mixed types (both activation formats and a float
// type at once), 1 and 3 threads; mismatched column counts are refused.
TEST(MatMul, ManyMatchesOneAtATime) {
  std::mt19937 rng(21);
  ThreadPool pool(3);
  const std::int64_t cols = 512;
  const GgmlType types[] = {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0, GgmlType::kF16, GgmlType::kQ5_K};
  const std::int64_t rows[] = {40, 7, 33, 5, 64};
  std::vector<RandomMatMul> mats;
  for (std::size_t k = 0; k < std::size(types); ++k) mats.emplace_back(types[k], rows[k], cols, 0, rng);
  for (KernelLevel level : {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512Vnni, KernelLevel::kAmx,
                            KernelLevel::kFloat}) {
    if (!KernelLevelAvailable(level)) continue;
    for (std::int64_t m : {1, 5}) {
      std::vector<float> x(static_cast<std::size_t>(m * cols));
      std::normal_distribution<float> nd;
      for (auto& v : x) v = nd(rng);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<std::vector<float>> one(mats.size()), many(mats.size());
        std::vector<MatMulTarget> targets;
        for (std::size_t k = 0; k < mats.size(); ++k) {
          one[k].resize(static_cast<std::size_t>(m * rows[k]));
          many[k].assign(one[k].size(), NAN);
          MatMul(mats[k].w, {.x = x.data(), .m = m, .y = one[k].data(), .level = level});
          targets.push_back({.w = mats[k].w, .y = many[k].data()});
        }
        MatMulMany({.x = x.data(), .m = m, .targets = targets, .pool = p, .level = level});
        for (std::size_t k = 0; k < mats.size(); ++k) {
          EXPECT_EQ(0, std::memcmp(one[k].data(), many[k].data(), one[k].size() * 4))
              << GgmlTypeName(types[k]) << " level " << KernelLevelName(level) << " m " << m;
        }
      }
    }
  }
  const RandomMatMul other(GgmlType::kQ4_K, 3, 256, 0, rng);
  std::vector<float> x(cols), y0(40), y1(3);
  const MatMulTarget bad[] = {{.w = mats[0].w, .y = y0.data()}, {.w = other.w, .y = y1.data()}};
  EXPECT_THROW(MatMulMany({.x = x.data(), .m = 1, .targets = bad}), Error);
}

// The SIMD activation quantizers against their scalar references, bitwise:
// random rows at several magnitudes, exact ties (x / d = k + 0.5), zeros,
// subnormals, NaN (ignored by the amax, stored as 127) and infinities.
void ExpectQuantizersMatchReference() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float nan = std::nanf(""), inf = HUGE_VALF;
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t n = 256 * (1 + trial % 3);
    std::vector<float> x(static_cast<std::size_t>(n));
    const float scale = std::ldexp(1.0f, trial % 40 - 20);
    for (float& v : x) v = normal(rng) * scale;
    switch (trial % 8) {
      case 1:  // exact ties: amax 127 so d = 1, values k + 0.5
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 32 == 0) ? 127.0f : static_cast<float>(i % 20) - 9.5f;
        break;
      case 2: std::fill(x.begin(), x.begin() + 64, 0.0f); break;  // all-zero blocks
      case 3:
        x[5] = nan;
        x[40] = -nan;
        x[300 % n] = nan;
        break;
      case 4:
        x[9] = inf;
        x[77] = -inf;
        break;
      case 5:
        for (float& v : x) v = std::ldexp(v, -130);
        break;                                                        // subnormal
      case 6: std::fill(x.begin() + 32, x.begin() + 64, nan); break;  // a block of NaN only
      default: break;
    }
    std::vector<ActQ8> a(static_cast<std::size_t>(n / 32)), b(a.size());
    QuantizeRowQ8(x.data(), a.data(), n);
    QuantizeRowQ8Reference(x.data(), b.data(), n);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(ActQ8)), 0) << "Q8 trial " << trial;
    std::vector<ActQ8K> k(static_cast<std::size_t>(n / 256)), kr(k.size());
    QuantizeRowQ8K(x.data(), k.data(), n);
    QuantizeRowQ8KReference(x.data(), kr.data(), n);
    EXPECT_EQ(std::memcmp(k.data(), kr.data(), k.size() * sizeof(ActQ8K)), 0) << "Q8K trial " << trial;
  }
  // A fixed case: +-amax map to +-127, d = amax / 127, and the sum is exact.
  std::vector<float> x(32, 0.0f);
  x[0] = 2.54f;
  x[1] = -2.54f;
  ActQ8 q;
  QuantizeRowQ8(x.data(), &q, 32);
  EXPECT_FLOAT_EQ(q.d, 2.54f / 127.0f);
  EXPECT_EQ(q.qs[0], 127);
  EXPECT_EQ(q.qs[1], -127);
  EXPECT_EQ(q.sum, 0);
}

// ... on every compiled Highway target this CPU runs.
TEST(QuantizeActivations, SimdMatchesReferenceBitwise) {
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    ExpectQuantizersMatchReference();
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Packed weights (kernels/packed.h: 16 rows interleaved for the kernels with
// weight rows in the lanes) give bitwise the outputs of the AVX-512 kernels
// on the unpacked weights: Q8_0 / Q4_0 / Q5_0 / IQ4_NL / IQ4_XS / Q4_K / Q6_K with random bytes
// (every code, fifth / high bit, scale and min), 1 to 20 blocks per row (1 to
// 5 super-blocks), 16 to 160 rows, m from 1 to 70 (passes of 8 activation
// rows and their remainders, and the 64-row groups of MatMul), on the calling
// thread and on 3 threads (tasks rounded to whole 16-row groups), on each
// level with packed kernels (AVX-512 and AVX2: all ten types). The reference
// is the AVX-512 level where the CPU has it, else the same level unpacked,
// except for Q8_0 / Q4_K / Q6_K on AVX2, whose unpacked kernels sum their
// lanes or scale groups in another order: there within 1e-5 of the output's
// magnitude. Q2_K / Q3_K have no AVX-512 row kernel and their AVX2 one sums
// float lanes: packed AVX2 is checked bitwise against packed AVX-512 where the
// CPU has it, and every packed Q2_K / Q3_K output without that twin against
// the unpacked kernel within the same bound. The AMX level (where the CPU
// has it) is checked bitwise against the AVX-512 one (packed, for Q2_K /
// Q3_K).
TEST(MatMul, PackedMatchesUnpackedBitwise) {
  std::mt19937 rng(31);
  const bool avx512 = KernelLevelAvailable(KernelLevel::kAvx512Vnni);
  std::vector<KernelLevel> levels;
  for (KernelLevel l : {KernelLevel::kAvx2, KernelLevel::kAvx512Vnni, KernelLevel::kAmx}) {
    if (KernelLevelAvailable(l)) levels.push_back(l);
  }
  if (levels.empty()) GTEST_SKIP() << "no kernel level with packed weights on this CPU (AVX2 or AVX-512 VNNI)";
  ThreadPool pool(3);
  int compared = 0, near = 0;
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ5_0, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS,
                     GgmlType::kMXFP4, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ2_K, GgmlType::kQ3_K}) {
    const bool k = UsesSuperBlockActivations(t);
    const bool low_k = t == GgmlType::kQ2_K || t == GgmlType::kQ3_K;
    for (std::int64_t nblk : {1, 2, 3, k ? 5 : 20}) {
      for (std::int64_t rows : {16, 48, 160}) {
        for (std::int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 70}) {
          const RandomMatMul c(t, rows, GgmlBlockSize(t) * nblk, m, rng);
          WeightMatrix packed = c.w;
          packed.packed = detail::Pack(c.w.data, t, rows, nblk);
          ThreadPool* p = (m + rows) % 2 == 0 ? &pool : nullptr;
          for (KernelLevel level : levels) {
            const bool ref_packed = low_k && avx512 && level != KernelLevel::kAvx512Vnni;
            const bool exact =
                low_k ? ref_packed : avx512 || level != KernelLevel::kAvx2 || (t != GgmlType::kQ8_0 && !k);
            const KernelLevel ref = avx512 ? KernelLevel::kAvx512Vnni : level;
            std::vector<float> want(static_cast<std::size_t>(m * rows)), got(want.size(), NAN);
            MatMul(ref_packed ? packed : c.w, {.x = c.x.data(), .m = m, .y = want.data(), .pool = p, .level = ref});
            MatMul(packed, {.x = c.x.data(), .m = m, .y = got.data(), .pool = p, .level = level});
            if (exact) {
              ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
                  << GgmlTypeName(t) << " " << KernelLevelName(level) << " rows " << rows << " blocks " << nblk << " m "
                  << m;
              compared += static_cast<int>(want.size());
            } else {
              float mag = 0.0f;
              for (float v : want) mag = std::fmax(mag, std::fabs(v));
              for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * mag + 1e-6f) << i;
              near += static_cast<int>(want.size());
            }
          }
        }
      }
    }
  }
  // PackForMatMul packs what the default level has a kernel for.
  const RandomMatMul q4k(GgmlType::kQ4_K, 16, 256, 0, rng), q50(GgmlType::kQ5_0, 16, 64, 0, rng);
  const KernelLevel def = DefaultKernelLevel();
  EXPECT_EQ(PackForMatMul(q4k.w).packed != nullptr, def == KernelLevel::kAvx512Vnni || def == KernelLevel::kAvx2 ||
                                                  def == KernelLevel::kAmx);
  EXPECT_EQ(PackForMatMul(q50.w).packed != nullptr, def == KernelLevel::kAvx512Vnni || def == KernelLevel::kAvx2 ||
                                                  def == KernelLevel::kAmx);
  const RandomMatMul q3k(GgmlType::kQ3_K, 16, 256, 0, rng);
  EXPECT_EQ(PackForMatMul(q3k.w).packed != nullptr, def == KernelLevel::kAvx512Vnni || def == KernelLevel::kAvx2 ||
                                                  def == KernelLevel::kAmx);
  // Mixed targets in one MatMulMany (default level); each against MatMul of
  // the unpacked matrix.
  const std::int64_t cols = 256, m = 9;
  const RandomMatMul a(GgmlType::kQ5_0, 80, cols, m, rng), b(GgmlType::kQ5_K, 48, cols, 0, rng),
      c(GgmlType::kQ8_0, 7, cols, 0, rng), d(GgmlType::kQ4_0, 32, cols, 0, rng);
  std::vector<MatMulTarget> targets;
  std::vector<std::vector<float>> want, got;
  for (const RandomMatMul* r : {&a, &b, &c, &d}) {
    want.emplace_back(static_cast<std::size_t>(m * r->w.rows));
    got.emplace_back(want.back().size(), NAN);
    MatMul(r->w, {.x = a.x.data(), .m = m, .y = want.back().data()});
    targets.push_back({.w = PackForMatMul(r->w), .y = got.back().data()});
  }
  EXPECT_EQ(targets[1].w.packed, nullptr);  // Q5_K: no packed layout
  EXPECT_EQ(targets[2].w.packed, nullptr);  // 7 rows: not whole groups of 16
  MatMulMany({.x = a.x.data(), .m = m, .targets = targets, .pool = &pool});
  for (std::size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(0, std::memcmp(want[k].data(), got[k].data(), want[k].size() * 4)) << k;
  // The scalar and float levels read the unpacked rows.
  WeightMatrix ap = a.w;
  ap.packed = detail::Pack(a.w.data, a.w.type, a.w.rows, cols / 32);
  for (KernelLevel level : {KernelLevel::kScalar, KernelLevel::kFloat}) {
    std::vector<float> y0(static_cast<std::size_t>(m * 80)), y1(y0.size(), NAN);
    MatMul(a.w, {.x = a.x.data(), .m = m, .y = y0.data(), .level = level});
    MatMul(ap, {.x = a.x.data(), .m = m, .y = y1.data(), .level = level});
    EXPECT_EQ(0, std::memcmp(y0.data(), y1.data(), y0.size() * 4)) << KernelLevelName(level);
  }
  testing::RecordMeasured("packed outputs compared bitwise: %d, within tolerance: %d\n", compared, near);
}

TEST(MatMul, PackRefusesWhatItCannotLayOut) {
  std::vector<std::uint8_t> w(34 * 32);
  EXPECT_FALSE(detail::CanPack(GgmlType::kQ5_K, 16));
  EXPECT_FALSE(detail::CanPack(GgmlType::kF16, 16));
  EXPECT_TRUE(detail::CanPack(GgmlType::kQ6_K, 16));
  EXPECT_FALSE(detail::CanPack(GgmlType::kQ8_0, 24));
  EXPECT_FALSE(detail::CanPack(GgmlType::kQ8_0, 0));
  EXPECT_TRUE(detail::CanPack(GgmlType::kQ5_0, 32));
  try {
    detail::Pack(w.data(), GgmlType::kQ5_K, 16, 1);
    ADD_FAILURE() << "Q5_K packed";
  } catch (const Error& e) {
    // The packable types from the weight-type table: the packed 32-element
    // types, then the packed K-quants.
    EXPECT_STREQ(e.what(),
                 "Pack: cannot repack Q5_K weights of 16 rows and 1 blocks (expected Q8_0, Q4_0, Q5_0, "
                 "IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K, Q4_K or Q6_K data with a positive multiple of 16 rows)");
  }
  EXPECT_THROW(detail::Pack(w.data(), GgmlType::kQ8_0, 8, 1), Error);
  EXPECT_THROW(detail::Pack(nullptr, GgmlType::kQ8_0, 16, 1), Error);
  // Not packable: returned unchanged, whatever the CPU.
  const WeightMatrix odd = WeightMatrix::Make(w.data(), GgmlType::kQ8_0, 8, 128);
  EXPECT_EQ(PackForMatMul(odd).packed, nullptr);
}

TEST(MatMul, RejectsBadInput) {
  std::vector<std::uint8_t> w(34);
  EXPECT_THROW(WeightMatrix::Make(w.data(), GgmlType::kQ8_K, 1, 256), Error);
  EXPECT_THROW(WeightMatrix::Make(w.data(), GgmlType::kQ8_0, 1, 48), Error);
  const WeightMatrix wm = WeightMatrix::Make(w.data(), GgmlType::kQ8_0, 1, 32);
  EXPECT_THROW(MatMul(wm, {.x = nullptr, .m = 1, .y = nullptr}), Error);
}

}  // namespace
}  // namespace kvshare
