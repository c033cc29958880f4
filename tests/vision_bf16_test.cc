// The bf16 encoder path (src/vision/bf16_rows.h, bf16_matmul.h, and
// vision_ops.h's BidirectionalAttention with bf16: the GQA op's
// GqaMatMulPrecision::kBf16) against plain double references: bit-exact rounding of
// the row helpers, and tolerances for the products derived from bf16
// rounding (each input rounded to nearest even, 8 significant bits: relative
// error <= 2^-8, so a product of two <= ~2^-7; f32 accumulation adds ~K 2^-24), at random and edge
// shapes (sizes not multiples of oneDNN's blocks or of the 128-row / 64-query
// tiles), plus thread-count independence. The product tests skip on CPUs
// where oneDNN has no bf16 matmul (below AVX-512).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/float_convert.h"
#include "kvshare/common/thread_pool.h"
#include "quant/quant.h"
#include "vision/bf16_matmul.h"
#include "vision/bf16_rows.h"
#include "vision/vision_ops.h"

namespace kvshare::detail {
namespace {

constexpr double kBf16U = 1.0 / 256;                       // 2^-8: one rounding's relative error bound
constexpr double kBf16Eps = 2 * kBf16U + kBf16U * kBf16U;  // a product of two rounded values

std::vector<float> Normal(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(nd(rng));
  return v;
}

double Rounded(float x) { return BF16ToF32(F32ToBF16(x)); }

TEST(VisionBf16Test, RowsConvertAsScalar) {
  std::vector<float> x = Normal(300, 1, 100.0);
  // Ties (low half exactly 0x8000, both parities of the kept bit), zeros,
  // tiny and huge values.
  const std::uint32_t bits[] = {0x3F808000u, 0x3F818000u, 0x00000000u, 0x80000000u,
                                0x00000001u, 0x7F7FFFFFu, 0x3F7FFFFFu, 0xBF808001u};
  for (std::size_t i = 0; i < std::size(bits); ++i) std::memcpy(&x[i * 7], &bits[i], 4);
  for (std::int64_t n : {0, 1, 15, 16, 17, 33, 300}) {
    std::vector<std::uint16_t> y(static_cast<std::size_t>(n) + 1, 0xABCD);
    F32ToBf16Rows(x.data(), n, y.data());
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], F32ToBF16(x[i])) << "n " << n << " i " << i;
    EXPECT_EQ(y[n], 0xABCD) << "wrote past n = " << n;
  }
}

TEST(VisionBf16Test, ExpShiftedMatchesReference) {
  for (std::int64_t n : {1, 7, 16, 31, 100, 1000}) {
    const std::vector<float> s = Normal(static_cast<std::size_t>(n), 2 + n, 4.0);
    for (float scale : {1.0f, 0.125f}) {
      std::vector<std::uint16_t> p(static_cast<std::size_t>(n));
      const float sum = ExpShiftedToBf16(s.data(), n, scale, p.data());
      const double mx = *std::max_element(s.begin(), s.end());
      double want_sum = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double got = BF16ToF32(p[i]);
        const double want = std::exp(scale * (s[i] - mx));
        // bf16 rounding (2^-8) plus the float exp's few ulp.
        ASSERT_NEAR(got, want, want * (kBf16U + 1e-6)) << "n " << n << " i " << i;
        want_sum += got;
      }
      EXPECT_NEAR(sum, want_sum, want_sum * 1e-6) << "n " << n;
      EXPECT_GE(sum, 1.0f);  // the max's own term is exactly 1
    }
  }
}

class VisionBf16ProductTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Bf16MatMulSupported()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU";
  }
};

// y = x W^T against double references: tight against the rounded inputs
// (only f32 accumulation), within the bf16 bound against the exact ones.
void CheckMatrix(std::int64_t m, std::int64_t n, std::int64_t k, GgmlType type, std::uint64_t seed,
                 Bf16MatrixOptions options) {
  std::vector<float> wf = Normal(static_cast<std::size_t>(n * k), seed, 1.0 / std::sqrt(k));
  std::vector<std::uint16_t> w16(wf.size());
  const void* data = wf.data();
  std::size_t row_bytes = static_cast<std::size_t>(k) * 4;
  if (type != GgmlType::kF32) {
    for (std::size_t i = 0; i < wf.size(); ++i) {
      w16[i] = type == GgmlType::kF16 ? F32ToF16(wf[i]) : F32ToBF16(wf[i]);
      wf[i] = type == GgmlType::kF16 ? F16ToF32(w16[i]) : BF16ToF32(w16[i]);
    }
    data = w16.data();
    row_bytes = static_cast<std::size_t>(k) * 2;
  }
  WeightMatrix w;
  w.data = data;
  w.type = type;
  w.rows = n;
  w.cols = k;
  w.row_bytes = row_bytes;
  const Bf16Matrix b(w, options);
  EXPECT_EQ(b.amx_tiles(), options.amx_tiles && AmxBf16Usable());
  EXPECT_EQ(b.rows(), n);
  EXPECT_EQ(b.cols(), k);
  const std::vector<float> x = Normal(static_cast<std::size_t>(m * k), seed + 1);
  std::vector<float> y(static_cast<std::size_t>(m * n) + 1, 123.0f), y3(y.size(), 123.0f);
  b.Apply(x.data(), m, y.data(), nullptr);
  ThreadPool pool(3);
  b.Apply(x.data(), m, y3.data(), &pool);
  EXPECT_EQ(y, y3) << "thread count changed the result";
  EXPECT_EQ(y.back(), 123.0f) << "wrote past m rows";
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double rounded = 0, exact = 0, mag = 0;
      for (std::int64_t t = 0; t < k; ++t) {
        const float xv = x[i * k + t], wv = wf[j * k + t];
        rounded += Rounded(xv) * Rounded(wv);
        exact += static_cast<double>(xv) * wv;
        mag += std::fabs(static_cast<double>(xv) * wv);
      }
      const double got = y[i * n + j];
      ASSERT_NEAR(got, rounded, mag * k * 1.2e-7 + 1e-30) << m << "x" << n << "x" << k << " at " << i << "," << j;
      ASSERT_NEAR(got, exact, mag * (kBf16Eps + k * 1.2e-7)) << m << "x" << n << "x" << k;
    }
  }
}

TEST_F(VisionBf16ProductTest, MatrixMatchesReference) {
  // m around the 128-row tile, odd n and k (oneDNN pads K to pairs and N to
  // its blocks), each weight type; on the AMX tiles where usable and oneDNN.
  for (const bool tiles : {true, false}) {
    const Bf16MatrixOptions o{.amx_tiles = tiles};
    CheckMatrix(1, 1, 1, GgmlType::kF32, 10, o);
    CheckMatrix(127, 17, 5, GgmlType::kF16, 11, o);
    CheckMatrix(128, 33, 37, GgmlType::kBF16, 12, o);
    CheckMatrix(129, 64, 100, GgmlType::kF32, 13, o);
    CheckMatrix(300, 70, 257, GgmlType::kF16, 14, o);
  }
}

// Attention against a double softmax over the exact inputs: the scores move
// by at most kBf16Eps scale sum|q k| (rounded q, k), the weights by 2^-8
// (rounded p), the values by 2^-8: out is within max|v| (2 ds + 2^-7) of it.
void CheckAttention(std::int64_t S, int heads, int hd, float scale, std::uint64_t seed) {
  const std::int64_t qd = static_cast<std::int64_t>(heads) * hd;
  const std::size_t n = static_cast<std::size_t>(S * qd);
  const std::vector<float> q = Normal(n, seed), k = Normal(n, seed + 1), v = Normal(n, seed + 2);
  std::vector<float> out(n + 1, 7.0f), out3(n + 1, 7.0f);
  BidirectionalAttention(q.data(), k.data(), v.data(), S, heads, hd, scale, out.data(), nullptr, true);
  ThreadPool pool(3);
  BidirectionalAttention(q.data(), k.data(), v.data(), S, heads, hd, scale, out3.data(), &pool, true);
  EXPECT_EQ(out, out3) << "thread count changed the result";
  EXPECT_EQ(out.back(), 7.0f) << "wrote past the output";
  double vmax = 0;
  for (float x : v) vmax = std::max(vmax, std::fabs(static_cast<double>(x)));
  for (int h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < S; ++i) {
      std::vector<double> s(static_cast<std::size_t>(S));
      double mx = -1e300, ds = 0;
      for (std::int64_t j = 0; j < S; ++j) {
        double dot = 0, mag = 0;
        for (int t = 0; t < hd; ++t) {
          const double a = q[i * qd + h * hd + t], b = k[j * qd + h * hd + t];
          dot += a * b;
          mag += std::fabs(a * b);
        }
        s[j] = scale * dot;
        ds = std::max(ds, scale * mag * kBf16Eps);
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      const double tol = vmax * (2 * ds + kBf16Eps) + 1e-6;  // kBf16Eps ~ 2^-7
      for (int t = 0; t < hd; ++t) {
        double want = 0;
        for (std::int64_t j = 0; j < S; ++j) want += s[j] / sum * v[j * qd + h * hd + t];
        ASSERT_NEAR(out[i * qd + h * hd + t], want, tol) << "S " << S << " head " << h << " query " << i;
      }
    }
  }
}

TEST_F(VisionBf16ProductTest, AttentionMatchesReference) {
  constexpr std::int64_t kQueryRows = 64;  // the op's bf16 query block (src/attention/cpu_attend_bf16.cc)
  // Head sizes are multiples of 8 (the op's rule); 24 is none of 16.
  CheckAttention(1, 1, 8, 1.0f, 20);
  CheckAttention(5, 2, 24, 0.33f, 21);
  CheckAttention(kQueryRows, 2, 16, 0.25f, 22);
  CheckAttention(kQueryRows * 2 + 3, 3, 8, 1.0f, 23);  // a padded last query block
}

}  // namespace
}  // namespace kvshare::detail
