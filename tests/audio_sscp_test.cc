// The subsampling convolution (src/audio/sscp.h) against a plain double
// reference: the direct one-channel path and the im2col path, odd and even
// sizes, both time paddings (Gemma 4: -1, Gemma 3n: 0), more than one
// im2col pass; the float sums of at most 9 * in terms within
// 9 in 2^-24 sum |w x| of the exact ones; thread independence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "audio/sscp.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {
namespace {

std::vector<float> Uniform(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = d(rng);
  return v;
}

void Check(int in, int out, int frames, int freq, int time_offset, std::uint64_t seed) {
  const std::vector<float> w = Uniform(std::size_t(out) * in * 9, seed);
  const std::vector<float> x = Uniform(std::size_t(frames) * freq * in, seed + 1);
  const SscpConv c = SscpConv::FromF32(w.data(), in, out);
  ThreadPool pool(3);
  const std::vector<float> y = SscpConvolve(c, x, frames, freq, time_offset, nullptr);
  EXPECT_EQ(y, SscpConvolve(c, x, frames, freq, time_offset, &pool));
  const int t_out = (frames - 1) / 2 + 1, f_out = (freq - 1) / 2 + 1;
  ASSERT_EQ(y.size(), std::size_t(t_out) * f_out * out);
  for (int t = 0; t < t_out; ++t) {
    for (int f = 0; f < f_out; ++f) {
      for (int o = 0; o < out; ++o) {
        double sum = 0.0, abs_sum = 0.0;
        for (int ci = 0; ci < in; ++ci) {
          for (int ky = 0; ky < 3; ++ky) {
            for (int kx = 0; kx < 3; ++kx) {
              const int ti = 2 * t + time_offset + ky, fi = 2 * f - 1 + kx;
              if (ti < 0 || ti >= frames || fi < 0 || fi >= freq) continue;
              const double p = double(w[(std::size_t(o) * in + ci) * 9 + ky * 3 + kx]) *
                               x[(std::size_t(ti) * freq + fi) * in + ci];
              sum += p;
              abs_sum += std::abs(p);
            }
          }
        }
        const double bound = 9.0 * in * std::ldexp(1.0, -24) * abs_sum + 1e-30;
        ASSERT_NEAR(y[(std::size_t(t) * f_out + f) * out + o], sum, bound)
            << "in " << in << " frames " << frames << " freq " << freq << " offset " << time_offset << " at " << t
            << ", " << f << ", " << o;
      }
    }
  }
}

TEST(AudioSscp, MatchesDoubleReference) {
  std::uint64_t seed = 1;
  for (int in : {1, 3}) {
    for (int time_offset : {-1, 0}) {
      for (int frames : {1, 2, 7, 70}) {  // 70: two im2col passes of 32 output frames
        for (int freq : {1, 6, 9}) Check(in, in == 1 ? 16 : 5, frames, freq, time_offset, seed += 7);
      }
    }
  }
}

}  // namespace
}  // namespace kvshare::detail
