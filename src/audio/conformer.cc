// The shared conformer block (conformer.h). Matmuls go through quant/'s
// MatMul (vision/vision_ops.h's linears); the attention is computed here in
// double: HF adds the relative-position logits before its softcap, which the
// GQA op applies before its bias (docs/audio.md "Encoders").
#include "audio/conformer.h"

#include <algorithm>
#include <cmath>

#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {
namespace {

constexpr int kChunk = 12;  // attention_chunk_size: queries per block
constexpr int kPast = 12;   // attention_context_left - 1: context slots before a block, distances 12 .. 0
constexpr int kSlots = kChunk + kPast;
constexpr float kSoftcap = 50.0f;  // attention_logit_cap

void Silu(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void HalfFfn(const ConformerBlock& b, int which, const ConformerOptions& o, std::vector<float>& h, std::int64_t T,
             ThreadPool* pool) {
  std::vector<float> n = h, u(static_cast<std::size_t>(T * o.n_ff)), y(h.size()), scratch;
  RmsNormRows(n.data(), T, o.n_embd, b.ffn_pre[which], o.eps, pool);
  ApplyLinear(b.ffn_up[which], n.data(), T, u.data(), scratch, pool);
  Silu(u.data(), u.size());
  ApplyLinear(b.ffn_down[which], u.data(), T, y.data(), scratch, pool);
  RmsNormRows(y.data(), T, o.n_embd, b.ffn_post[which], o.eps, pool);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] += 0.5f * y[i];
}

// One query frame t over its block's 24 context slots, every head.
void AttendQuery(const ConformerOptions& o, const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<float>& rel, const std::vector<std::uint8_t>& valid,
                 std::int64_t t, std::vector<float>& out) {
  const std::int64_t T = static_cast<std::int64_t>(valid.size()), d = o.n_embd;
  const int hd = o.head_dim;
  const std::int64_t first = t / kChunk * kChunk - kPast;
  for (int h = 0; h < o.n_head; ++h) {
    const float* qt = q.data() + t * d + h * hd;
    double logits[kSlots], w[kSlots], sum = 0.0;
    for (int j = 0; j < kSlots; ++j) {
      const std::int64_t kp = first + j, dist = t - kp;
      if (!(kp >= 0 && kp < T && valid[kp] && dist >= 0 && dist <= o.max_distance)) {
        logits[j] = o.hidden_logit;  // hidden: its logits do not matter
        continue;
      }
      const float* kr = k.data() + kp * d + h * hd;
      const float* rr = rel.data() + (kPast - dist) * d + h * hd;
      double ac = 0.0, bd = 0.0;
      for (int i = 0; i < hd; ++i) {
        ac += double(qt[i]) * kr[i];
        bd += double(qt[i]) * rr[i];
      }
      logits[j] = kSoftcap * std::tanh((ac + bd) / kSoftcap);
    }
    const double top = *std::max_element(logits, logits + kSlots);
    for (int j = 0; j < kSlots; ++j) sum += (w[j] = std::exp(logits[j] - top));
    float* y = out.data() + t * d + h * hd;
    for (int i = 0; i < hd; ++i) {
      double acc = 0.0;
      for (int j = 0; j < kSlots; ++j) {
        const std::int64_t kp = first + j;
        if (kp >= 0 && kp < T) acc += w[j] * v[kp * d + h * hd + i];
      }
      y[i] = static_cast<float>(acc / sum);
    }
  }
}

// Blocks of 12 queries over 24 context slots starting 12 frames before the
// block (HF _convert_to_block / _extract_block_context); logit =
// softcap(q.k + q.r[distance]); a slot is visible when its key is inside the
// clip, valid and 0..max_distance frames back, else its logit is
// o.hidden_logit, so a query with no visible key averages all 24 slots
// (zeros outside the clip), as HF's softmax over equal logits does.
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
  // Queries are independent: ranges of them per thread (the same arithmetic
  // for every split).
  ParallelForRanges(pool, T, RowGrain(pool, T, std::int64_t{kSlots} * d), [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) AttendQuery(o, q, k, v, rel, valid, t, out);
  });
}

void LightConv(const ConformerBlock& b, const ConformerOptions& o, std::vector<float>& h, std::int64_t T,
               ThreadPool* pool) {
  const std::int64_t d = o.n_embd;
  std::vector<float> n = h, g(static_cast<std::size_t>(T * 2 * d)), c(h.size()), y(h.size()), scratch;
  RmsNormRows(n.data(), T, d, b.conv_norm, o.eps, pool);
  ApplyLinear(b.pw1, n.data(), T, g.data(), scratch, pool);
  for (std::int64_t t = 0; t < T; ++t) {  // GLU: first half * sigmoid(second half)
    const float* row = g.data() + t * 2 * d;
    for (std::int64_t i = 0; i < d; ++i) n[t * d + i] = row[i] / (1.0f + std::exp(-row[d + i]));
  }
  const int K = o.conv_kernel;
  // Causal depthwise: K - 1 frames of zeros in front.
  ParallelForRanges(pool, T, RowGrain(pool, T, d * K), [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      for (std::int64_t i = 0; i < d; ++i) {
        float acc = 0.0f;
        for (int j = 0; j < K; ++j) {
          const std::int64_t ts = t - (K - 1) + j;
          if (ts >= 0) acc += b.conv_dw[i * K + j] * n[ts * d + i];
        }
        c[t * d + i] = acc;
      }
    }
  });
  RmsNormRows(c.data(), T, d, b.norm_conv, o.eps, pool);
  Silu(c.data(), c.size());
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
