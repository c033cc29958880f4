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

// Buffers one RunConformer call reuses across blocks (large vectors freed
// and allocated again per block cost page faults and zeroing).
struct Workspace {
  std::vector<float> n, u, y, q, k, v, att, c, scratch;  // u: the FFN hidden or pw1 output
  Workspace(std::int64_t T, const ConformerOptions& o)
      : n(std::size_t(T * o.n_embd)), u(std::size_t(T * std::max(o.n_ff, 2 * o.n_embd))), y(n.size()), q(n.size()),
        k(n.size()), v(n.size()), att(n.size()), c(n.size()) {}
};

// h += scale * y over the pool.
void AddScaled(std::vector<float>& h, const std::vector<float>& y, float scale, std::int64_t T, std::int64_t d,
               ThreadPool* pool) {
  ParallelForRanges(pool, T, RowGrain(pool, T, d), [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t i = t0 * d; i < t1 * d; ++i) h[i] += scale * y[i];
  });
}

void HalfFfn(const ConformerBlock& b, int which, const ConformerOptions& o, std::vector<float>& h, std::int64_t T,
             Workspace& w, ThreadPool* pool) {
  std::copy(h.begin(), h.end(), w.n.begin());
  RmsNormRows(w.n.data(), T, o.n_embd, b.ffn_pre[which], o.eps, pool);
  ApplyLinear(b.ffn_up[which], w.n.data(), T, w.u.data(), w.scratch, pool);
  ParallelForRanges(pool, T, RowGrain(pool, T, o.n_ff),
                    [&](std::int64_t t0, std::int64_t t1) { SiluRows(w.u.data() + t0 * o.n_ff, (t1 - t0) * o.n_ff); });
  ApplyLinear(b.ffn_down[which], w.u.data(), T, w.y.data(), w.scratch, pool);
  RmsNormRows(w.y.data(), T, o.n_embd, b.ffn_post[which], o.eps, pool);
  AddScaled(h, w.y, 0.5f, T, o.n_embd, pool);
}

// x + attn_post_norm(out(LocalAttention(q, k, v of attn_pre_norm(x)))), the
// queries and keys scaled first (local_attention.h).
void Attention(const ConformerBlock& b, const ConformerOptions& o, std::vector<float>& h,
               const std::vector<std::uint8_t>& valid, Workspace& w, ThreadPool* pool) {
  const std::int64_t T = static_cast<std::int64_t>(valid.size()), d = o.n_embd;
  const int hd = o.head_dim;
  std::copy(h.begin(), h.end(), w.n.begin());
  RmsNormRows(w.n.data(), T, d, b.attn_pre_norm, o.eps, pool);
  const Linear* ls[] = {&b.q, &b.k, &b.v};
  float* ys[] = {w.q.data(), w.k.data(), w.v.data()};
  ApplyLinears(ls, w.n.data(), T, ys, w.scratch, pool);
  const float q_scale = static_cast<float>(1.0 / std::sqrt(double(hd)) / std::log(2.0));  // hd^-1/2 / softplus(0)
  ParallelForRanges(pool, T, RowGrain(pool, T, d), [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t i = t0 * d; i < t1 * d; ++i) w.q[i] = w.q[i] * q_scale * b.per_dim_scale[i % hd];
    if (o.k_scale != 1.0f) {
      for (std::int64_t i = t0 * d; i < t1 * d; ++i) w.k[i] *= o.k_scale;
    }
  });
  LocalAttention(w.q.data(), w.k.data(), w.v.data(), b.rel_keys.data(), valid.data(),
                 {.frames = T, .n_head = o.n_head, .head_dim = hd, .max_distance = o.max_distance,
                  .hidden_logit = o.hidden_logit},
                 w.att.data(), pool);
  ApplyLinear(b.out, w.att.data(), T, w.y.data(), w.scratch, pool);
  RmsNormRows(w.y.data(), T, d, b.attn_post_norm, o.eps, pool);
  AddScaled(h, w.y, 1.0f, T, d, pool);
}

void LightConv(const ConformerBlock& b, const ConformerOptions& o, std::vector<float>& h, std::int64_t T,
               Workspace& w, ThreadPool* pool) {
  const std::int64_t d = o.n_embd;
  std::copy(h.begin(), h.end(), w.n.begin());
  RmsNormRows(w.n.data(), T, d, b.conv_norm, o.eps, pool);
  ApplyLinear(b.pw1, w.n.data(), T, w.u.data(), w.scratch, pool);
  ParallelForRanges(pool, T, RowGrain(pool, T, 2 * d), [&](std::int64_t t0, std::int64_t t1) {
    GluRows(w.u.data() + t0 * 2 * d, t1 - t0, d, w.n.data() + t0 * d);  // first half * sigmoid(second half)
  });
  const int K = o.conv_kernel;
  // Causal depthwise: K - 1 frames of zeros in front. Taps outer, channels
  // inner (a vector loop over the [K, d] kernel); each value still sums its
  // taps in order 0 .. K - 1 from zero.
  ParallelForRanges(pool, T, RowGrain(pool, T, d * K), [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      float* ct = w.c.data() + t * d;
      std::fill_n(ct, d, 0.0f);
      for (int j = 0; j < K; ++j) {
        const std::int64_t ts = t - (K - 1) + j;
        if (ts < 0) continue;
        const float* wt = b.conv_dw_t.data() + j * d;
        const float* nt = w.n.data() + ts * d;
        for (std::int64_t i = 0; i < d; ++i) ct[i] += wt[i] * nt[i];
      }
    }
  });
  RmsNormRows(w.c.data(), T, d, b.norm_conv, o.eps, pool);
  ParallelForRanges(pool, T, RowGrain(pool, T, d),
                    [&](std::int64_t t0, std::int64_t t1) { SiluRows(w.c.data() + t0 * d, (t1 - t0) * d); });
  ApplyLinear(b.pw2, w.c.data(), T, w.y.data(), w.scratch, pool);
  AddScaled(h, w.y, 1.0f, T, d, pool);
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

namespace {

// The sinusoids of relative distances 12 .. 0 (row c: distance 12 - c), d / 2
// timescales from 1 to 1e4, sin then cos, float32 as HF computes them:
// [13, d].
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

}  // namespace

std::vector<float> RelativeKeys(const Linear& rel, int d) {
  std::vector<float> keys(static_cast<std::size_t>((kPast + 1) * d)), scratch;
  ApplyLinear(rel, RelativeSinusoids(d).data(), kPast + 1, keys.data(), scratch, nullptr);
  return keys;
}

void RunConformer(const std::vector<ConformerBlock>& blocks, const ConformerOptions& o, std::vector<float>& h,
                  const std::vector<std::uint8_t>& valid, ThreadPool* pool) {
  const std::int64_t T = static_cast<std::int64_t>(valid.size()), d = o.n_embd;
  Workspace w(T, o);
  for (const ConformerBlock& b : blocks) {
    HalfFfn(b, 0, o, h, T, w, pool);
    Attention(b, o, h, valid, w, pool);
    if (o.zero_padded_before_conv) {
      for (std::int64_t t = 0; t < T; ++t) {
        if (!valid[t]) std::fill_n(h.begin() + t * d, d, 0.0f);
      }
    }
    LightConv(b, o, h, T, w, pool);
    HalfFfn(b, 1, o, h, T, w, pool);
    RmsNormRows(h.data(), T, d, b.final_norm, o.eps, pool);
  }
}

}  // namespace kvshare::detail
