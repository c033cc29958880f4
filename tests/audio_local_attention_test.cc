// The conformer's float kernels (src/audio/local_attention.h,
// conformer_rows.h) against plain double references: the chunked local
// attention at random and edge shapes (clips shorter than a block, not a
// multiple of 12, padded frames, no visible key, head widths off the vector
// width, both hidden logits) within the float bound of its header, thread
// independence; SiLU and GLU within a few ulp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "audio/conformer_rows.h"
#include "audio/local_attention.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {
namespace {

std::vector<float> Normal(std::size_t n, std::uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<float> v(n);
  for (float& e : v) e = static_cast<float>(d(rng));
  return v;
}

struct Case {
  std::int64_t frames;
  int n_head, head_dim, max_distance;
  float hidden;
  double scale;  // of q and k: large enough for the softcap to bend some logits
};

// The double reference of one (t, h) (HF's chunked attention written out);
// also returns the float bound of local_attention.h for it.
void Reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
               const std::vector<float>& rel, const std::vector<std::uint8_t>& valid, std::int64_t t, int h,
               double* y, double* bound) {
  const std::int64_t d = std::int64_t{c.n_head} * c.head_dim, first = t / kChunk * kChunk - kPast;
  const int hd = c.head_dim;
  double logits[kSlots], w[kSlots], sum = 0.0, dot_abs = 0.0, vmax = 0.0;
  for (int j = 0; j < kSlots; ++j) {
    const std::int64_t kp = first + j, dist = t - kp;
    if (!(kp >= 0 && kp < c.frames && valid[kp] && dist >= 0 && dist <= c.max_distance)) {
      logits[j] = c.hidden;
      continue;
    }
    double s = 0.0, a = 0.0;
    for (int i = 0; i < hd; ++i) {
      const double qi = q[t * d + h * hd + i], ki = k[kp * d + h * hd + i], ri = rel[(kPast - dist) * d + h * hd + i];
      s += qi * (ki + ri);
      a += std::abs(qi) * (std::abs(ki) + std::abs(ri));
    }
    dot_abs = std::max(dot_abs, a);
    logits[j] = 50.0 * std::tanh(s / 50.0);
  }
  const double top = *std::max_element(logits, logits + kSlots);
  for (int j = 0; j < kSlots; ++j) sum += (w[j] = std::exp(logits[j] - top));
  for (int i = 0; i < hd; ++i) {
    double acc = 0.0;
    for (int j = 0; j < kSlots; ++j) {
      const std::int64_t kp = first + j;
      if (kp >= 0 && kp < c.frames) {
        acc += w[j] * v[kp * d + h * hd + i];
        vmax = std::max(vmax, std::abs(double(v[kp * d + h * hd + i])));
      }
    }
    y[i] = acc / sum;
  }
  // A logit off by e moves each weight by about e relative (twice over the
  // softmax); the float sums add ~kSlots ulp of the largest value.
  const double u = std::ldexp(1.0, -24);
  const double logit_err = (hd + 2) * u * dot_abs + 8 * 50.0 * u;
  *bound = (2.5 * logit_err + 4 * kSlots * u) * vmax + 1e-30;
}

void Check(const Case& c, std::uint64_t seed, int threads) {
  const std::int64_t d = std::int64_t{c.n_head} * c.head_dim, n = c.frames * d;
  const std::vector<float> q = Normal(n, seed, c.scale), k = Normal(n, seed + 1, c.scale),
                           v = Normal(n, seed + 2, 1.0), rel = Normal((kPast + 1) * d, seed + 3, c.scale);
  std::vector<std::uint8_t> valid(c.frames, 1);
  std::mt19937_64 rng(seed + 4);
  for (auto& e : valid) e = (rng() % 5) != 0;  // a fifth padded
  if (c.frames > 30) std::fill(valid.begin() + 12, valid.begin() + 26, 0);  // a block with no visible key
  std::vector<float> out(n, -7.0f);
  ThreadPool pool(threads);
  LocalAttention(q.data(), k.data(), v.data(), rel.data(), valid.data(),
                 {.frames = c.frames, .n_head = c.n_head, .head_dim = c.head_dim, .max_distance = c.max_distance,
                  .hidden_logit = c.hidden},
                 out.data(), &pool);
  std::vector<double> y(c.head_dim);
  for (std::int64_t t = 0; t < c.frames; ++t) {
    for (int h = 0; h < c.n_head; ++h) {
      double bound = 0.0;
      Reference(c, q, k, v, rel, valid, t, h, y.data(), &bound);
      for (int i = 0; i < c.head_dim; ++i) {
        ASSERT_NEAR(out[t * d + h * c.head_dim + i], y[i], bound)
            << "T " << c.frames << " hd " << c.head_dim << " t " << t << " h " << h << " i " << i;
      }
    }
  }
}

TEST(AudioLocalAttention, MatchesDoubleReference) {
  const float lowest = std::numeric_limits<float>::lowest();
  const Case cases[] = {
      {1, 1, 8, 12, lowest, 1.0},    {5, 2, 3, 11, -1e9f, 1.0},      {12, 1, 16, 12, lowest, 2.0},
      {13, 2, 17, 11, -1e9f, 3.0},   {37, 3, 20, 12, lowest, 1.5},   {50, 2, 128, 11, -1e9f, 0.3},
      {101, 8, 32, 12, lowest, 2.0}, {60, 1, 64, 0, -1e9f, 1.0},
  };
  std::uint64_t seed = 1;
  for (const Case& c : cases) Check(c, seed += 10, 1 + static_cast<int>(seed % 3));
}

TEST(AudioLocalAttention, ThreadCountDoesNotChangeResults) {
  const std::int64_t T = 77, d = 4 * 24;
  const std::vector<float> q = Normal(T * d, 3, 2.0), k = Normal(T * d, 4, 2.0), v = Normal(T * d, 5, 1.0),
                           rel = Normal((kPast + 1) * d, 6, 1.0);
  std::vector<std::uint8_t> valid(T, 1);
  valid[70] = valid[3] = 0;
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    outs.emplace_back(T * d);
    LocalAttention(q.data(), k.data(), v.data(), rel.data(), valid.data(),
                   {.frames = T, .n_head = 4, .head_dim = 24, .max_distance = 12}, outs.back().data(), &pool);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

TEST(AudioConformerRows, SiluAndGluWithinFewUlp) {
  for (std::int64_t n : {1, 7, 16, 33, 1000}) {
    std::vector<float> x = Normal(n, 40 + n, 6.0), g = Normal(2 * n * 3, 50 + n, 6.0), out(n * 3);
    x[0] = -100.0f;  // exp(100) overflows the denominator to inf: SiLU 0
    const std::vector<float> x0 = x;
    SiluRows(x.data(), n);
    GluRows(g.data(), 3, n, out.data());
    for (std::int64_t i = 0; i < n; ++i) {
      const double s = x0[i] / (1.0 + std::exp(-double(x0[i])));
      EXPECT_NEAR(x[i], s, 4e-7 * std::abs(s) + 1e-37) << n << " " << i;
    }
    for (std::int64_t t = 0; t < 3; ++t) {
      for (std::int64_t i = 0; i < n; ++i) {
        const double a = g[t * 2 * n + i], b = g[t * 2 * n + n + i], r = a / (1.0 + std::exp(-b));
        EXPECT_NEAR(out[t * n + i], r, 4e-7 * std::abs(r) + 1e-37) << n << " " << t << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kvshare::detail
