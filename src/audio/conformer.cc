// The shared conformer block (conformer.h). Matmuls go through quant/'s
// MatMul or oneDNN's bf16 matmul (vision/vision_ops.h's linears); the
// attention is local_attention.h's: HF adds the relative-position logits
// before its softcap, which the GQA op applies before its bias
// (docs/audio.md "Encoders").
#include "audio/conformer.h"

#include <algorithm>
#include <cmath>

#include "audio/conformer_rows.h"
#include "audio/local_attention.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {
namespace {

void HalfFfn(const ConformerBlock& b, int which, const ConformerOptions& o, std::vector<float>& h, std::int64_t T,
             ThreadPool* pool) {
  std::vector<float> n = h, u(static_cast<std::size_t>(T * o.n_ff)), y(h.size()), scratch;
  RmsNormRows(n.data(), T, o.n_embd, b.ffn_pre[which], o.eps, pool);
  ApplyLinear(b.ffn_up[which], n.data(), T, u.data(), scratch, pool);
  ParallelForRanges(pool, T, RowGrain(pool, T, o.n_ff),
                    [&](std::int64_t t0, std::int64_t t1) { SiluRows(u.data() + t0 * o.n_ff, (t1 - t0) * o.n_ff); });
  ApplyLinear(b.ffn_down[which], u.data(), T, y.data(), scratch, pool);
  RmsNormRows(y.data(), T, o.n_embd, b.ffn_post[which], o.eps, pool);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] += 0.5f * y[i];
}

// The projections, the scaled queries and keys, then LocalAttention
// (local_attention.h).
void Attention(const ConformerBlock& b, const ConformerOptions& o, const std::vector<float>& sinusoids,
               const std::vector<float>& x, const std::vector<std::uint8_t>& valid, std::vector<float>& out,
               ThreadPool* pool) {
  const std::int64_t T = static_cast<std::int64_t>(valid.size()), d = o.n_embd;
  const int hd = o.head_dim;
  std::vector<float> q(x.size()), k(x.size()), v(x.size()), rel(static_cast<std::size_t>((kPast + 1) * d)), scratch;
  const Linear* ls[] = {&b.q, &b.k, &b.v};
  float* ys[] = {q.data(), k.data(), v.data()};
  ApplyLinears(ls, x.data(), T, ys, scratch, pool);
  ApplyLinear(b.rel, sinusoids.data(), kPast + 1, rel.data(), scratch, pool);
  const float q_scale = static_cast<float>(1.0 / std::sqrt(double(hd)) / std::log(2.0));  // hd^-1/2 / softplus(0)
  for (std::int64_t i = 0; i < T * d; ++i) q[i] = q[i] * q_scale * b.per_dim_scale[i % hd];
  if (o.k_scale != 1.0f) {
    for (float& e : k) e *= o.k_scale;
  }
  LocalAttention(q.data(), k.data(), v.data(), rel.data(), valid.data(),
                 {.frames = T, .n_head = o.n_head, .head_dim = hd, .max_distance = o.max_distance,
                  .hidden_logit = o.hidden_logit},
                 out.data(), pool);
}

void LightConv(const ConformerBlock& b, const ConformerOptions& o, std::vector<float>& h, std::int64_t T,
               ThreadPool* pool) {
  const std::int64_t d = o.n_embd;
  std::vector<float> n = h, g(static_cast<std::size_t>(T * 2 * d)), c(h.size()), y(h.size()), scratch;
  RmsNormRows(n.data(), T, d, b.conv_norm, o.eps, pool);
  ApplyLinear(b.pw1, n.data(), T, g.data(), scratch, pool);
  ParallelForRanges(pool, T, RowGrain(pool, T, 2 * d), [&](std::int64_t t0, std::int64_t t1) {
    GluRows(g.data() + t0 * 2 * d, t1 - t0, d, n.data() + t0 * d);  // first half * sigmoid(second half)
  });
  const int K = o.conv_kernel;
  // Causal depthwise: K - 1 frames of zeros in front. Taps outer, channels
  // inner (a vector loop over the [K, d] kernel); each value still sums its
  // taps in order 0 .. K - 1 from zero.
  ParallelForRanges(pool, T, RowGrain(pool, T, d * K), [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      float* ct = c.data() + t * d;
      std::fill_n(ct, d, 0.0f);
      for (int j = 0; j < K; ++j) {
        const std::int64_t ts = t - (K - 1) + j;
        if (ts < 0) continue;
        const float* w = b.conv_dw_t.data() + j * d;
        const float* nt = n.data() + ts * d;
        for (std::int64_t i = 0; i < d; ++i) ct[i] += w[i] * nt[i];
      }
    }
  });
  RmsNormRows(c.data(), T, d, b.norm_conv, o.eps, pool);
  ParallelForRanges(pool, T, RowGrain(pool, T, d),
                    [&](std::int64_t t0, std::int64_t t1) { SiluRows(c.data() + t0 * d, (t1 - t0) * d); });
  ApplyLinear(b.pw2, c.data(), T, y.data(), scratch, pool);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] += y[i];
}

}  // namespace

void LoadHalfFfns(const TensorLookup& t, const std::string& prefix, std::int64_t d, std::int64_t ff,
                  const LinearOptions& options, ConformerBlock& b) {
  for (int f = 0; f < 2; ++f) {
    const std::string s = f == 0 ? "" : "_1";
    b.ffn_pre[f] = t.Vec(prefix + "ffn_norm" + s + ".weight", d);
    b.ffn_post[f] = t.Vec(prefix + "ffn_post_norm" + s + ".weight", d);
    b.ffn_up[f] = LoadLinear(t, prefix + "ffn_up" + s, ff, d, options);
    b.ffn_down[f] = LoadLinear(t, prefix + "ffn_down" + s, d, ff, options);
  }
}

std::vector<float> DepthwiseTaps(const float* conv_dw, int d, int kernel) {
  std::vector<float> t(static_cast<std::size_t>(d) * kernel);
  for (int c = 0; c < d; ++c) {
    for (int j = 0; j < kernel; ++j) t[std::size_t(j) * d + c] = conv_dw[std::size_t(c) * kernel + j];
  }
  return t;
}

std::vector<float> RelativeSinusoids(int d) {
  const int half = d / 2;
  const double inc = std::log(1.0e4) / std::max(half - 1, 1);
  std::vector<float> s(static_cast<std::size_t>((kPast + 1) * d), 0.0f);
  for (int c = 0; c <= kPast; ++c) {
    const float pos = static_cast<float>(kPast - c);
    for (int i = 0; i < half; ++i) {
      const float t = pos * std::exp(static_cast<float>(i) * static_cast<float>(-inc));
      s[std::size_t(c) * d + i] = std::sin(t);
      s[std::size_t(c) * d + half + i] = std::cos(t);
    }
  }
  return s;
}

void RunConformerBlock(const ConformerBlock& b, const ConformerOptions& o, const std::vector<float>& sinusoids,
                       std::vector<float>& h, const std::vector<std::uint8_t>& valid, ThreadPool* pool) {
  const std::int64_t T = static_cast<std::int64_t>(valid.size()), d = o.n_embd;
  HalfFfn(b, 0, o, h, T, pool);
  {
    std::vector<float> n = h, att(h.size()), y(h.size()), scratch;
    RmsNormRows(n.data(), T, d, b.attn_pre_norm, o.eps, pool);
    Attention(b, o, sinusoids, n, valid, att, pool);
    ApplyLinear(b.out, att.data(), T, y.data(), scratch, pool);
    RmsNormRows(y.data(), T, d, b.attn_post_norm, o.eps, pool);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] += y[i];
  }
  if (o.zero_padded_before_conv) {
    for (std::int64_t t = 0; t < T; ++t) {
      if (!valid[t]) std::fill_n(h.begin() + t * d, d, 0.0f);
    }
  }
  LightConv(b, o, h, T, pool);
  HalfFfn(b, 1, o, h, T, pool);
  RmsNormRows(h.data(), T, d, b.final_norm, o.eps, pool);
}

}  // namespace kvshare::detail
