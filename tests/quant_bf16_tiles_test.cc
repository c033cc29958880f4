// The bf16 tile products (quant/bf16_tiles.h) against a double product of the
// bf16-rounded inputs (only the f32 sums may differ: gamma_K), and against the
// exact inputs within the header's bound; every row the same alone, in any
// batch and at any thread count; shapes around the tiles' 16 / 32 rows, 32
// columns and pairs of 16 weight rows. Skips where AMX-BF16 is not usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/float_convert.h"
#include "kvshare/common/thread_pool.h"
#include "quant/bf16_tiles.h"
#include "quant/quant.h"

namespace kvshare::detail {
namespace {

constexpr double kU = 1.0 / 256;  // one bf16 rounding

double Rounded(float v) { return BF16ToF32(F32ToBF16(v)); }

double GammaK(std::int64_t k) {
  const double ku = static_cast<double>(k) * std::ldexp(1.0, -24);
  return ku / (1 - ku);
}

// Weights W [n, k] of `type` (F32, F16, BF16 or Q8_0) with their dequantized
// values, and activations x [m, k].
struct Case {
  std::vector<std::uint8_t> bytes;
  std::vector<float> wf;  // dequantized W
  WeightMatrix w;
  std::vector<float> x;
  Case(GgmlType type, std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> src(static_cast<std::size_t>(n * k));
    for (float& v : src) v = nd(rng) / std::sqrt(static_cast<float>(k));
    x.resize(static_cast<std::size_t>(m * k));
    for (float& v : x) v = nd(rng);
    const std::size_t row_bytes = static_cast<std::size_t>(k / GgmlBlockSize(type) * GgmlBlockBytes(type));
    bytes.resize(row_bytes * static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < n; ++r) {
      std::uint8_t* dst = bytes.data() + r * row_bytes;
      const float* s = src.data() + r * k;
      for (std::int64_t c = 0; c < k; ++c) {
        if (type == GgmlType::kF32) reinterpret_cast<float*>(dst)[c] = s[c];
        if (type == GgmlType::kF16) reinterpret_cast<std::uint16_t*>(dst)[c] = F32ToF16(s[c]);
        if (type == GgmlType::kBF16) reinterpret_cast<std::uint16_t*>(dst)[c] = F32ToBF16(s[c]);
      }
      if (type == GgmlType::kQ8_0) {
        for (std::int64_t b = 0; b < k / 32; ++b) {
          float amax = 0;
          for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(s[32 * b + i]));
          BlockQ8_0& blk = reinterpret_cast<BlockQ8_0*>(dst)[b];
          const float d = amax / 127;
          blk.d = F32ToF16(d);
          for (int i = 0; i < 32; ++i)
            blk.qs[i] = static_cast<std::int8_t>(d == 0 ? 0 : std::lround(s[32 * b + i] / d));
        }
      }
    }
    w = WeightMatrix::Make(bytes.data(), type, n, k);
    wf.resize(src.size());
    for (std::int64_t r = 0; r < n; ++r) DequantizeRow(type, bytes.data() + r * row_bytes, wf.data() + r * k, k);
  }
};

class QuantBf16TilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!AmxBf16Usable()) GTEST_SKIP() << "no usable AMX-BF16 tiles here";
  }
};

// y for every row, the bounds of bf16_tiles.h, and the output left alone past m.
void Check(GgmlType type, std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed) {
  const Case c(type, m, n, k, seed);
  const AmxBf16Weights t(c.w);
  ASSERT_EQ(t.rows(), n);
  ASSERT_EQ(t.cols(), k);
  std::vector<float> y(static_cast<std::size_t>(m * n) + 1, 123.0f);
  t.Apply(c.x.data(), m, y.data(), nullptr);
  ASSERT_EQ(y.back(), 123.0f) << "wrote past m rows";
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t r = 0; r < n; ++r) {
      double rounded = 0, exact = 0, mag = 0, mag_r = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        const double xv = c.x[i * k + j], wv = c.wf[r * k + j];
        const double p = Rounded(c.x[i * k + j]) * Rounded(c.wf[r * k + j]);
        rounded += p;
        mag_r += std::fabs(p);
        exact += xv * wv;
        mag += std::fabs(xv * wv);
      }
      const double got = y[i * n + r];
      ASSERT_NEAR(got, rounded, GammaK(k) * mag_r + 1e-30)
          << GgmlTypeName(type) << " " << m << "x" << n << "x" << k << " at " << i << "," << r;
      ASSERT_NEAR(got, exact, (2 * kU + kU * kU) * mag + GammaK(k) * mag_r + 1e-30)
          << GgmlTypeName(type) << " " << m << "x" << n << "x" << k;
    }
  }
}

TEST_F(QuantBf16TilesTest, MatchesReferenceAtEdgeShapes) {
  // Columns around 32 (odd: a pair half full), weight rows around the
  // 32-row pairs of blocks, activation rows around 16 and 32.
  std::uint64_t seed = 1;
  for (std::int64_t k : {1, 2, 31, 32, 33, 100}) {
    for (std::int64_t n : {1, 15, 16, 17, 33, 64}) Check(GgmlType::kF32, 3, n, k, seed++);
  }
  for (std::int64_t m = 1; m <= 40; ++m) Check(GgmlType::kF16, m, 48, 64, seed++);
  Check(GgmlType::kBF16, 130, 70, 257, seed++);
  Check(GgmlType::kF16, 129, 100, 300, seed++);
  Check(GgmlType::kQ8_0, 33, 36, 128, seed++);
}

TEST_F(QuantBf16TilesTest, LongRowsWithinBound) {
  // 4304 columns: the SigLIP MLP's, where gamma_K dominates the f32 sums.
  Check(GgmlType::kBF16, 20, 40, 4304, 99);
}

TEST_F(QuantBf16TilesTest, RowAloneEqualsBatchAndThreads) {
  const std::int64_t m = 150, n = 200, k = 96;
  const Case c(GgmlType::kF16, m, n, k, 7);
  const AmxBf16Weights t(c.w);
  std::vector<float> y(static_cast<std::size_t>(m * n)), y3(y.size()), one(static_cast<std::size_t>(n));
  t.Apply(c.x.data(), m, y.data(), nullptr);
  ThreadPool pool(3);
  t.Apply(c.x.data(), m, y3.data(), &pool);
  ASSERT_EQ(y, y3) << "thread count changed the result";
  for (std::int64_t i : {0, 15, 16, 31, 32, 100, 149}) {
    t.Apply(c.x.data() + i * k, 1, one.data(), &pool);
    for (std::int64_t r = 0; r < n; ++r) ASSERT_EQ(one[r], y[i * n + r]) << "row " << i << " alone, output " << r;
  }
  // A batch that starts elsewhere: rows 5 .. 44 as rows 0 .. 39.
  std::vector<float> part(static_cast<std::size_t>(40 * n));
  t.Apply(c.x.data() + 5 * k, 40, part.data(), nullptr);
  for (std::int64_t i = 0; i < 40; ++i) {
    for (std::int64_t r = 0; r < n; ++r) ASSERT_EQ(part[i * n + r], y[(i + 5) * n + r]) << i << "," << r;
  }
}

TEST_F(QuantBf16TilesTest, NonFiniteStaysInItsRow) {
  const std::int64_t m = 20, n = 17, k = 40;
  Case c(GgmlType::kF32, m, n, k, 3);
  c.x[5 * k + 7] = std::numeric_limits<float>::quiet_NaN();
  c.x[9 * k + 39] = std::numeric_limits<float>::infinity();
  const AmxBf16Weights t(c.w);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  t.Apply(c.x.data(), m, y.data(), nullptr);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t r = 0; r < n; ++r) {
      const float v = y[i * n + r];
      if (i == 5) {
        EXPECT_TRUE(std::isnan(v)) << r;
      } else if (i == 9) {
        EXPECT_FALSE(std::isfinite(v)) << r;
      } else {
        EXPECT_TRUE(std::isfinite(v)) << i << "," << r;
      }
    }
  }
}

}  // namespace
}  // namespace kvshare::detail
