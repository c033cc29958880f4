// GeluTanhMul, Softcap and SumOfSquares (src/model/activations.h) against their formulas in
// double, on every compiled SIMD target this CPU runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hwy/targets.h"
#include "model/activations.h"

namespace kvshare {
namespace {

double GeluTanhRef(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

// Values around 0, both tails (where 1 + tanh cancels), saturation and
// random normals of scale 3 (Gemma's gate pre-activations are O(1..10)).
std::vector<float> Inputs(std::size_t n, std::mt19937& rng) {
  std::vector<float> g = {0.0f,  -0.0f, 1e-30f, -1e-30f, 0.5f,   -0.5f, 3.0f,
                          -3.0f, 8.0f,  -8.0f,  20.0f,   -20.0f, 1e4f,  -1e4f};
  std::normal_distribution<float> nd(0.0f, 3.0f);
  while (g.size() < n) g.push_back(nd(rng));
  g.resize(n);
  return g;
}

// |error| <= 1e-6 * max(1, |x|) * |u|: tanh to a few ulp, times the factor
// 0.5 x u; absolute near x = 0 and in the negative tail, where the result is
// tiny and 1 + tanh loses its relative accuracy in any float implementation.
void ExpectNearFormula(const std::vector<float>& g, const std::vector<float>& u, const std::vector<float>& out) {
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double want = GeluTanhRef(g[i]) * u[i];
    const double tol =
        1e-6 * std::max(1.0, std::fabs(static_cast<double>(g[i]))) * std::fabs(static_cast<double>(u[i]));
    EXPECT_NEAR(out[i], want, tol) << "x = " << g[i] << " u = " << u[i];
  }
}

TEST(GeluTanhMul, MatchesFormulaOnEveryCompiledTarget) {
  int targets = 0;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    ++targets;
    std::mt19937 rng(5);
    // (n = 0: nothing is read or written; the pointers may be null.)
    detail::GeluTanhMul(nullptr, nullptr, nullptr, 0);
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{37}, std::size_t{2048}}) {
      const std::vector<float> g = Inputs(n, rng), u = Inputs(n, rng);
      std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
      detail::GeluTanhMul(g.data(), u.data(), out.data(), static_cast<std::int64_t>(n));
      ExpectNearFormula(g, u, out);
      // In place (out aliases g) gives the same bits.
      std::vector<float> inplace = g;
      detail::GeluTanhMul(inplace.data(), u.data(), inplace.data(), static_cast<std::int64_t>(n));
      EXPECT_EQ(0, std::memcmp(inplace.data(), out.data(), n * sizeof(float)));
      // Each element alone (the one-lane tail path) gives the same bits as
      // inside a full vector.
      for (std::size_t i = 0; i < n && i < 64; ++i) {
        float one = 0.0f;
        detail::GeluTanhMul(&g[i], &u[i], &one, 1);
        EXPECT_EQ(0, std::memcmp(&one, &out[i], sizeof(float))) << "element " << i << " n " << n;
      }
    }
    if (HasFailure()) ADD_FAILURE() << "target " << hwy::TargetName(target);
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(targets, 1);
}

TEST(GeluTanhMul, KnownValues) {
  // gelu_tanh(1) = 0.8411920..., gelu_tanh(-1) = -0.1588080..., saturation
  // x and 0 at the tails.
  const std::vector<float> g = {1.0f, -1.0f, 10.0f, -10.0f}, u = {1.0f, 1.0f, 2.0f, 1.0f};
  std::vector<float> out(4);
  detail::GeluTanhMul(g.data(), u.data(), out.data(), 4);
  EXPECT_NEAR(out[0], 0.841192, 1e-6);
  EXPECT_NEAR(out[1], -0.158808, 1e-6);
  EXPECT_FLOAT_EQ(out[2], 20.0f);
  EXPECT_NEAR(out[3], 0.0, 1e-6);
}

// cap * tanh(x / cap): relative 1e-6 of |result| plus 1e-6 cap absolute (tanh
// to a few ulp; x / cap is one rounding away from the exact quotient), on
// logits of every scale, each element alone equal to inside a vector.
TEST(Softcap, MatchesFormulaOnEveryCompiledTarget) {
  int targets = 0;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    ++targets;
    std::mt19937 rng(9);
    detail::Softcap(nullptr, 0, 30.0f);
    for (std::size_t n : {std::size_t{1}, std::size_t{13}, std::size_t{1000}}) {
      std::vector<float> x = Inputs(n, rng);
      for (float& e : x) e *= 4.0f;  // logits of +-100 and beyond saturate
      std::vector<float> out = x;
      detail::Softcap(out.data(), static_cast<std::int64_t>(n), 30.0f);
      for (std::size_t i = 0; i < n; ++i) {
        const double want = 30.0 * std::tanh(static_cast<double>(x[i]) / 30.0);
        EXPECT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 30e-6) << "x = " << x[i];
        float one = x[i];
        detail::Softcap(&one, 1, 30.0f);
        EXPECT_EQ(0, std::memcmp(&one, &out[i], sizeof(float))) << "element " << i << " n " << n;
      }
    }
    if (HasFailure()) ADD_FAILURE() << "target " << hwy::TargetName(target);
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(targets, 1);
}

// SumOfSquares: the same bits on every target (its fixed summation tree) and
// within 1e-15 relative of a long double sum; lengths around the groups of 8.
TEST(SumOfSquares, SameOnEveryTargetAndNearExact) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (std::size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 256, 640, 1001, 2048}) {
    std::vector<float> x(n);
    for (float& e : x) e = nd(rng);
    if (n > 3) x[3] = 1e20f;  // a huge element next to small ones
    long double exact = 0;
    for (float e : x) exact += static_cast<long double>(e) * e;
    double first = 0;
    int targets = 0;
    for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      const double s = detail::SumOfSquares(x.data(), static_cast<std::int64_t>(n));
      if (targets++ == 0) first = s;
      EXPECT_EQ(0, std::memcmp(&s, &first, sizeof s)) << "n " << n << " target " << hwy::TargetName(target);
      EXPECT_NEAR(s, static_cast<double>(exact), 1e-15 * static_cast<double>(exact)) << "n " << n;
    }
    hwy::SetSupportedTargetsForTest(0);
    EXPECT_GE(targets, 1);
  }
}

}  // namespace
}  // namespace kvshare
