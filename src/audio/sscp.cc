// The subsampling convolutions (sscp.h).
#include "audio/sscp.h"

#include <algorithm>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "quant/tensor_lookup.h"

namespace kvshare::detail {

SscpConv SscpConv::Load(const GgufFile& file, int i, int in, int out) {
  const std::string name = Str("a.conv1d.", i, ".weight");
  const GgufTensor& t = file.Tensor(name);
  if (t.type != GgmlType::kF32) {
    throw Error(Str("mmproj ", file.name(), ": tensor '", name, "' is ", GgmlTypeName(t.type),
                    ", expected F32 (as llama.cpp's converter writes the audio convolutions)"));
  }
  SscpConv c = FromF32(reinterpret_cast<const float*>(t.data), in, out);
  c.norm = TensorLookup(file).Vec(Str("a.conv1d.", i, ".norm.weight"), out);
  return c;
}

SscpConv SscpConv::FromF32(const float* w, int in, int out) {
  SscpConv c;
  c.in = in;
  c.out = out;
  c.w = WeightMatrix{.data = w, .type = GgmlType::kF32, .rows = out, .cols = 9LL * in,
                     .row_bytes = sizeof(float) * 9 * static_cast<std::size_t>(in)};
  if (in == 1) {
    c.taps.resize(std::size_t(9) * out);
    for (int o = 0; o < out; ++o) {
      for (int k = 0; k < 9; ++k) c.taps[std::size_t(k) * out + o] = w[std::size_t(o) * 9 + k];
    }
  }
  return c;
}

void LoadSscp(const GgufFile& file, const int (&channels)[2], SscpConv (&conv)[2]) {
  for (int i = 0; i < 2; ++i) conv[i] = SscpConv::Load(file, i, i == 0 ? 1 : channels[0], channels[i]);
}

namespace {

// One input channel: y[t, f, :] = sum over the visible taps, in (ky, kx)
// order, of taps[k, :] * x[ti, fi].
void ConvolveOneChannel(const SscpConv& c, const std::vector<float>& x, int frames, int freq, int time_offset,
                        std::vector<float>& y, ThreadPool* pool) {
  const int t_out = (frames - 1) / 2 + 1, f_out = (freq - 1) / 2 + 1, n = c.out;
  const std::int64_t grain = RowGrain(pool, t_out, std::int64_t{f_out} * 9 * n);
  ParallelForRanges(pool, t_out, grain, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      for (int fo = 0; fo < f_out; ++fo) {
        float* acc = y.data() + (std::size_t(t) * f_out + fo) * n;
        std::fill_n(acc, n, 0.0f);
        for (int ky = 0; ky < 3; ++ky) {
          const std::int64_t ti = 2 * t + time_offset + ky;
          if (ti < 0 || ti >= frames) continue;
          for (int kx = 0; kx < 3; ++kx) {
            const int fi = 2 * fo - 1 + kx;
            if (fi < 0 || fi >= freq) continue;
            const float v = x[std::size_t(ti) * freq + fi];
            const float* w = c.taps.data() + std::size_t(ky * 3 + kx) * n;
            for (int o = 0; o < n; ++o) acc[o] += w[o] * v;
          }
        }
      }
    }
  });
}

}  // namespace

std::vector<float> SscpConvolve(const SscpConv& c, const std::vector<float>& x, int frames, int freq, int time_offset,
                                ThreadPool* pool) {
  const int t_out = (frames - 1) / 2 + 1, f_out = (freq - 1) / 2 + 1, cols = 9 * c.in;
  std::vector<float> y(std::size_t(t_out) * f_out * c.out);
  if (c.in == 1) {
    ConvolveOneChannel(c, x, frames, freq, time_offset, y, pool);
    return y;
  }
  constexpr int kFramesPerPass = 32;  // bounds the im2col buffer (real geometry: 32 x 32 x 1152 floats)
  std::vector<float> rows(std::size_t(kFramesPerPass) * f_out * cols);
  for (int t0 = 0; t0 < t_out; t0 += kFramesPerPass) {
    const int nt = std::min(kFramesPerPass, t_out - t0);
    std::fill(rows.begin(), rows.end(), 0.0f);
    for (int dt = 0; dt < nt; ++dt) {
      for (int fo = 0; fo < f_out; ++fo) {
        float* row = rows.data() + (std::size_t(dt) * f_out + fo) * cols;
        for (int ky = 0; ky < 3; ++ky) {
          const int ti = 2 * (t0 + dt) + time_offset + ky;
          if (ti < 0 || ti >= frames) continue;
          for (int kx = 0; kx < 3; ++kx) {
            const int fi = 2 * fo - 1 + kx;
            if (fi < 0 || fi >= freq) continue;
            const float* src = x.data() + (std::size_t(ti) * freq + fi) * c.in;
            for (int ci = 0; ci < c.in; ++ci) row[(ci * 3 + ky) * 3 + kx] = src[ci];
          }
        }
      }
    }
    MatMul(c.w, {.x = rows.data(), .m = std::int64_t(nt) * f_out, .y = y.data() + std::size_t(t0) * f_out * c.out,
                 .pool = pool});
  }
  return y;
}

}  // namespace kvshare::detail
