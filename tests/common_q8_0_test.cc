// The q8_0 storage dtype: DTypeBytes / view sizes, and the row quantizer
// (common/q8_0.h) against its stated error bound, llama.cpp's block layout and
// its edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/float_convert.h"
#include "common/q8_0.h"
#include "common_record_measured.h"
#include "kvshare/common/error.h"
#include "kvshare/common/tensor.h"

namespace kvshare::detail {
namespace {

std::string ErrorOf(void (*f)()) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct Block {
  std::uint16_t d_bits;
  std::int8_t q[32];
};

Block Quantize(const std::vector<float>& x) {
  static_assert(sizeof(Block) == 34);
  Block b;
  QuantizeRowQ8_0(x.data(), 32, &b);
  return b;
}

std::vector<float> Dequantize(const Block& b) {
  std::vector<float> y(32);
  DequantizeRowQ8_0(&b, 32, y.data());
  return y;
}

double MaxAbs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

TEST(Q8_0, DTypeSizesAndNames) {
  EXPECT_STREQ(DTypeName(DType::kQ8_0), "q8_0");
  EXPECT_EQ(DTypeBlockSize(DType::kQ8_0), 32);
  EXPECT_EQ(DTypeBlockSize(DType::kFloat16), 1);
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 0), 0u);
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 256), 8u * 34);
  EXPECT_EQ(DTypeBytes(DType::kFloat16, 7), 14u);
  EXPECT_TRUE(IsKvCacheDType(DType::kQ8_0));
  EXPECT_TRUE(IsQuantized(DType::kQ8_0));
  EXPECT_FALSE(IsFloatingPoint(DType::kQ8_0));
  EXPECT_FALSE(IsKvCacheDType(DType::kInt32));
  // A BNSH view [2, 1, 5, 64]: 2 * 5 rows of 2 blocks.
  const TensorView v{nullptr, DType::kQ8_0, Shape{2, 1, 5, 64}};
  EXPECT_EQ(v.NumBytes(), 2u * 5 * 2 * 34);
  const std::string e = ErrorOf([] { (void)DTypeBytes(DType::kQ8_0, 40); });
  EXPECT_NE(e.find("40 elements is not a multiple of 32"), std::string::npos) << e;
  const std::string s = ErrorOf([] { (void)DTypeSize(DType::kQ8_0); });
  EXPECT_NE(s.find("use DTypeBytes"), std::string::npos) << s;
}

// GGML block_q8_0: fp16 d = max|x| / 127 first, then 32 int8 codes; the
// element of largest magnitude gets code +-127.
TEST(Q8_0, BlockLayoutIsLlamaCpps) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 0.25f * static_cast<float>(i - 16);  // max |x| = 4 at i = 0
  const Block b = Quantize(x);
  EXPECT_EQ(b.d_bits, F32ToF16(4.0f / 127.0f));
  EXPECT_EQ(b.q[0], -127);
  EXPECT_EQ(b.q[16], 0);
  const float d = F16ToF32(b.d_bits);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b.q[i], static_cast<int>(std::round(x[i] / d))) << i;
  // Element access through LoadAsFloat reads the same values.
  const std::vector<float> y = Dequantize(b);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(LoadAsFloat(&b, DType::kQ8_0, i), y[i]) << i;
}

// Random blocks over 12 decades of magnitude: every element within the bound,
// every code in [-127, 127], the block max at +-127, and the bound not vacuous
// (the worst element uses at least a third of it).
TEST(Q8_0, RoundTripWithinTheStatedBound) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<double> mag(-6.0, 6.0);
  double worst_ratio = 0.0;
  for (int trial = 0; trial < 4000; ++trial) {
    const float scale = static_cast<float>(std::pow(10.0, mag(rng)));
    std::vector<float> x(32);
    for (float& v : x) v = nd(rng) * scale;
    const Block b = Quantize(x);
    const std::vector<float> y = Dequantize(b);
    const double amax = MaxAbs(x), bound = Q8_0ErrorBound(amax);
    int max_code = 0;
    for (int i = 0; i < 32; ++i) {
      const double err = std::fabs(static_cast<double>(x[i]) - y[i]);
      ASSERT_LE(err, bound) << "trial " << trial << " i " << i << " amax " << amax;
      ASSERT_GE(b.q[i], -127);
      max_code = std::max(max_code, std::abs(static_cast<int>(b.q[i])));
      if (amax > 0.01) worst_ratio = std::max(worst_ratio, err / bound);
    }
    if (amax > 127 * 0x1p-14) {
      EXPECT_EQ(max_code, 127) << "trial " << trial;
    }
  }
  EXPECT_GT(worst_ratio, 0.33);
  testing::RecordMeasured("q8_0 round trip: worst error / bound = %.3f\n", worst_ratio);
}

TEST(Q8_0, AllZeroBlockIsZeroScaleAndCodes) {
  const Block b = Quantize(std::vector<float>(32, 0.0f));
  EXPECT_EQ(b.d_bits, 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b.q[i], 0);
  for (float v : Dequantize(b)) EXPECT_EQ(v, 0.0f);
  // -0.0 too.
  const Block n = Quantize(std::vector<float>(32, -0.0f));
  EXPECT_EQ(n.d_bits, 0);
}

// One huge value sets the scale: it comes back to fp16 precision, the small
// ones flush to 0 (they are below half a step) within the bound.
TEST(Q8_0, OneHugeValue) {
  std::vector<float> x(32, 0.001f);
  x[7] = 1000.0f;
  const Block b = Quantize(x);
  const std::vector<float> y = Dequantize(b);
  EXPECT_EQ(b.q[7], 127);
  EXPECT_NEAR(y[7], 1000.0f, 1000.0 * 0x1p-10);
  for (int i = 0; i < 32; ++i) {
    if (i == 7) continue;
    EXPECT_EQ(b.q[i], 0) << i;
    EXPECT_LE(std::fabs(x[i] - y[i]), Q8_0ErrorBound(1000.0)) << i;
  }
}

// The max magnitude negative: the scale is positive and that element's code is -127.
TEST(Q8_0, NegativeMax) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 0.1f * static_cast<float>(i % 5);
  x[31] = -3.0f;
  const Block b = Quantize(x);
  EXPECT_GT(F16ToF32(b.d_bits), 0.0f);
  EXPECT_EQ(b.q[31], -127);
  const std::vector<float> y = Dequantize(b);
  EXPECT_NEAR(y[31], -3.0f, 3.0 * 0x1p-10);
  for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(x[i] - y[i]), Q8_0ErrorBound(3.0)) << i;
}

// fp16-subnormal scales (max|x| < 127 * 2^-14) and saturation at fp16's max.
TEST(Q8_0, TinyAndHugeScales) {
  for (const float amax : {1e-9f, 3e-6f, 1e-4f, 5e-3f}) {
    std::vector<float> x(32);
    for (int i = 0; i < 32; ++i) x[i] = amax * static_cast<float>(i - 16) / 16.0f;
    const std::vector<float> y = Dequantize(Quantize(x));
    for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(x[i] - y[i]), Q8_0ErrorBound(amax)) << amax << " " << i;
  }
  std::vector<float> big(32, 1e9f);
  const Block b = Quantize(big);
  EXPECT_EQ(b.d_bits, 0x7BFF);  // 65504, never inf
  EXPECT_EQ(b.q[0], 127);
}

// Quantizing a dequantized block gives back the same bytes (normal scales):
// copies through float (external K/V into a q8_0 present) are exact.
TEST(Q8_0, RequantizationIsIdempotent) {
  std::mt19937_64 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<float> x(32);
    const float s = static_cast<float>(std::pow(10.0, (trial % 9) - 2));
    for (float& v : x) v = nd(rng) * s;
    const Block a = Quantize(x);
    const Block b = Quantize(Dequantize(a));
    ASSERT_EQ(0, std::memcmp(&a, &b, sizeof(Block))) << "trial " << trial;
  }
}

// Rows of several blocks: each block has its own scale.
TEST(Q8_0, RowsQuantizePerBlock) {
  std::vector<float> x(96);
  for (int i = 0; i < 96; ++i) x[i] = (i < 32 ? 100.0f : i < 64 ? 0.01f : 1.0f) * std::sin(0.37f * i);
  std::vector<unsigned char> q(DTypeBytes(DType::kQ8_0, 96));
  QuantizeRowQ8_0(x.data(), 96, q.data());
  std::vector<float> y(96);
  DequantizeRowQ8_0(q.data(), 96, y.data());
  for (int blk = 0; blk < 3; ++blk) {
    const std::vector<float> part(x.begin() + blk * 32, x.begin() + blk * 32 + 32);
    const double bound = Q8_0ErrorBound(MaxAbs(part));
    for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(x[blk * 32 + i] - y[blk * 32 + i]), bound) << blk << " " << i;
  }
  // The small middle block keeps its own resolution (a shared scale would flush it).
  EXPECT_NE(y[40], 0.0f);
}

}  // namespace
}  // namespace kvshare::detail
