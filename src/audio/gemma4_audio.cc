// Gemma 4's audio tower (`gemma4a`; HF Gemma4AudioModel + the audio
// Gemma4MultimodalEmbedder; docs/audio.md "Encoders"): a subsampling
// convolution projection (two 3x3 stride-2 convolutions, LayerNorm over
// channels, ReLU, a linear), conformer blocks (half FFN, chunked local
// attention with relative positions and a logit softcap, light convolution,
// half FFN, norm), the output projection, then RMSNorm and the projection to
// the text width. Matmuls go through quant/'s MatMul (vision/vision_ops.h's
// linears, with Gemma 4's clamps); the attention is computed here: HF adds
// the relative-position logits before its softcap, which the GQA op applies
// before its bias.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "audio/audio_encoders.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "quant/quant.h"
#include "quant/tensor_lookup.h"
#include "vision/vision_ops.h"

namespace kvshare::detail {
namespace {

constexpr int kChunk = 12;      // attention_chunk_size
constexpr int kPast = 12;       // attention_context_left - 1: relative positions 12 .. 0
constexpr int kWindow = 12;     // sliding_window_mask_function((12, 0)): 0 <= q - k < 12
constexpr float kSoftcap = 50.0f;
constexpr float kInvalid = -1.0e9f;  // attention_invalid_logits_value

struct Block {
  const float *ffn_norm, *ffn_post_norm, *ffn_norm_1, *ffn_post_norm_1;
  Linear ffn_up, ffn_down, ffn_up_1, ffn_down_1;
  const float *attn_pre_norm, *attn_post_norm, *per_dim_scale;  // per_dim_scale: softplus applied by the converter
  Linear q, k, v, out, k_rel;
  const float *conv_norm, *conv_dw, *norm_conv, *ln2;
  Linear pw1, pw2;
};

struct ConvLayer {
  WeightMatrix w;  // [out, in * 9]: columns (in, ky, kx), GGUF {3, 3, in, out} as stored
  const float* norm = nullptr;
  int in = 0, out = 0;
};

void Silu(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

class Gemma4Audio : public AudioEncoderBase {
 public:
  Gemma4Audio(GgufFile file, const AudioConfig& c) : AudioEncoderBase(std::move(file), c) {
    const TensorLookup t(file_);
    const LinearOptions clamps{.clamps = c.clipped_linears};
    for (int i = 0; i < 2; ++i) {
      ConvLayer& l = conv_[i];
      l.in = i == 0 ? 1 : c.sscp_channels[0];
      l.out = c.sscp_channels[i];
      const GgufTensor& w = file_.Tensor(Str("a.conv1d.", i, ".weight"));
      if (w.type != GgmlType::kF32) throw Error(Str("gemma4a: tensor 'a.conv1d.", i, ".weight' must be F32 (the converter writes it so)"));
      l.w = WeightMatrix{.data = w.data, .type = GgmlType::kF32, .rows = l.out, .cols = 9LL * l.in,
                         .row_bytes = sizeof(float) * 9 * static_cast<std::size_t>(l.in)};
      l.norm = t.Vec(Str("a.conv1d.", i, ".norm.weight"), l.out);
    }
    sscp_proj_ = LoadLinear(t, "a.input_projection", c.n_embd, std::int64_t{c.sscp_freq} * c.sscp_channels[1]);
    const std::int64_t d = c.n_embd, ff = c.n_ff;
    for (int b = 0; b < c.n_layer; ++b) {
      const std::string p = Str("a.blk.", b, ".");
      Block k;
      k.ffn_norm = t.Vec(p + "ffn_norm.weight", d);
      k.ffn_post_norm = t.Vec(p + "ffn_post_norm.weight", d);
      k.ffn_norm_1 = t.Vec(p + "ffn_norm_1.weight", d);
      k.ffn_post_norm_1 = t.Vec(p + "ffn_post_norm_1.weight", d);
      k.ffn_up = LoadLinear(t, p + "ffn_up", ff, d, clamps);
      k.ffn_down = LoadLinear(t, p + "ffn_down", d, ff, clamps);
      k.ffn_up_1 = LoadLinear(t, p + "ffn_up_1", ff, d, clamps);
      k.ffn_down_1 = LoadLinear(t, p + "ffn_down_1", d, ff, clamps);
      k.attn_pre_norm = t.Vec(p + "attn_pre_norm.weight", d);
      k.attn_post_norm = t.Vec(p + "attn_post_norm.weight", d);
      k.per_dim_scale = t.Vec(p + "per_dim_scale.weight", c.head_dim);
      k.q = LoadLinear(t, p + "attn_q", d, d, clamps);
      k.k = LoadLinear(t, p + "attn_k", d, d, clamps);
      k.v = LoadLinear(t, p + "attn_v", d, d, clamps);
      k.out = LoadLinear(t, p + "attn_out", d, d, clamps);
      k.k_rel = LoadLinear(t, p + "attn_k_rel", d, d);
      k.conv_norm = t.Vec(p + "conv_norm.weight", d);
      k.norm_conv = t.Vec(p + "norm_conv.weight", d);
      k.ln2 = t.Vec(p + "ln2.weight", d);
      const GgufTensor& dw = file_.Tensor(p + "conv_dw.weight");
      if (dw.type != GgmlType::kF32) throw Error(Str("gemma4a: tensor '", p, "conv_dw.weight' must be F32"));
      k.conv_dw = reinterpret_cast<const float*>(dw.data);
      k.pw1 = LoadLinear(t, p + "conv_pw1", 2 * d, d, clamps);
      k.pw2 = LoadLinear(t, p + "conv_pw2", d, d, clamps);
      blocks_.push_back(std::move(k));
    }
    out_proj_ = LoadLinear(t, "a.pre_encode.out", c.n_embd_out, d, {.bias = true});
    embed_ = LoadLinear(t, "mm.a.input_projection", c.n_embd_text, c.n_embd_out);
    RelativePositions();
  }

  AudioTowerOutput Tower(const AudioFeatures& f, ThreadPool* pool) const override {
    CheckFeatures(f, config_.n_mel);
    std::vector<std::uint8_t> mask = f.mask;
    std::vector<float> x = f.values;  // [T, F, C] with C = 1
    int frames = f.n_frames, freq = f.n_bins;
    for (const ConvLayer& l : conv_) x = Subsample(l, x, mask, frames, freq, pool);
    const std::int64_t T = frames, d = config_.n_embd;
    std::vector<float> h(static_cast<std::size_t>(T * d)), scratch;
    ApplyLinear(sscp_proj_, x.data(), T, h.data(), scratch, pool);
    for (const Block& b : blocks_) Layer(b, h, mask, pool);
    AudioTowerOutput out{static_cast<int>(T), config_.n_embd_out, std::vector<float>(static_cast<std::size_t>(T) * config_.n_embd_out), mask};
    ApplyLinear(out_proj_, h.data(), T, out.values.data(), scratch, pool);
    return out;
  }

  std::vector<float> Encode(const AudioFeatures& f, ThreadPool* pool) const override {
    AudioTowerOutput t = Tower(f, pool);
    return EmbedValid(t, embed_, pool);
  }

 private:
  // One SSCP layer on x [frames, freq, in] (channel fastest): padded frames
  // zeroed, the convolution (im2col rows of (in, ky, kx), a MatMul per block
  // of output frames), LayerNorm over channels, ReLU; the mask keeps every
  // second entry.
  std::vector<float> Subsample(const ConvLayer& l, std::vector<float>& x, std::vector<std::uint8_t>& mask, int& frames,
                               int& freq, ThreadPool* pool) const {
    for (int t = 0; t < frames; ++t) {
      if (!mask[t]) std::fill_n(x.begin() + std::size_t(t) * freq * l.in, std::size_t(freq) * l.in, 0.0f);
    }
    const int t_out = (frames - 1) / 2 + 1, f_out = (freq - 1) / 2 + 1, cols = 9 * l.in;
    std::vector<float> y(std::size_t(t_out) * f_out * l.out);
    constexpr int kRowsPerPass = 32;
    std::vector<float> cols_buf(std::size_t(kRowsPerPass) * f_out * cols);
    for (int t0 = 0; t0 < t_out; t0 += kRowsPerPass) {
      const int nt = std::min(kRowsPerPass, t_out - t0);
      std::fill(cols_buf.begin(), cols_buf.end(), 0.0f);
      for (int dt = 0; dt < nt; ++dt) {
        for (int fo = 0; fo < f_out; ++fo) {
          float* row = cols_buf.data() + (std::size_t(dt) * f_out + fo) * cols;
          for (int ky = 0; ky < 3; ++ky) {
            const int ti = 2 * (t0 + dt) - 1 + ky;
            if (ti < 0 || ti >= frames) continue;
            for (int kx = 0; kx < 3; ++kx) {
              const int fi = 2 * fo - 1 + kx;
              if (fi < 0 || fi >= freq) continue;
              const float* src = x.data() + (std::size_t(ti) * freq + fi) * l.in;
              for (int ci = 0; ci < l.in; ++ci) row[(ci * 3 + ky) * 3 + kx] = src[ci];
            }
          }
        }
      }
      MatMul(l.w, {.x = cols_buf.data(), .m = std::int64_t(nt) * f_out,
                   .y = y.data() + std::size_t(t0) * f_out * l.out, .pool = pool});
    }
    LayerNormRows(y.data(), std::int64_t(t_out) * f_out, l.out, l.norm, nullptr, config_.eps, pool);
    for (float& v : y) v = std::max(v, 0.0f);
    std::vector<std::uint8_t> next;
    for (int t = 0; t < frames; t += 2) next.push_back(mask[t]);
    mask = std::move(next);
    frames = t_out;
    freq = f_out;
    return y;
  }

  // x + 0.5 * post(down(silu(up(pre(x))))).
  void HalfFfn(std::vector<float>& h, std::int64_t T, const float* pre, const Linear& up, const Linear& down,
               const float* post, ThreadPool* pool) const {
    const std::int64_t d = config_.n_embd;
    std::vector<float> n = h, u(static_cast<std::size_t>(T * config_.n_ff)), o(h.size()), scratch;
    RmsNormRows(n.data(), T, d, pre, config_.eps, pool);
    ApplyLinear(up, n.data(), T, u.data(), scratch, pool);
    Silu(u.data(), u.size());
    ApplyLinear(down, u.data(), T, o.data(), scratch, pool);
    RmsNormRows(o.data(), T, d, post, config_.eps, pool);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] += 0.5f * o[i];
  }

  void Layer(const Block& b, std::vector<float>& h, const std::vector<std::uint8_t>& mask, ThreadPool* pool) const {
    const std::int64_t T = static_cast<std::int64_t>(mask.size()), d = config_.n_embd;
    std::vector<float> scratch;
    HalfFfn(h, T, b.ffn_norm, b.ffn_up, b.ffn_down, b.ffn_post_norm, pool);
    {  // attention
      std::vector<float> n = h, att(h.size()), o(h.size());
      RmsNormRows(n.data(), T, d, b.attn_pre_norm, config_.eps, pool);
      Attention(b, n, mask, att, pool);
      ApplyLinear(b.out, att.data(), T, o.data(), scratch, pool);
      RmsNormRows(o.data(), T, d, b.attn_post_norm, config_.eps, pool);
      for (std::size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    }
    {  // light convolution
      std::vector<float> n = h, g(static_cast<std::size_t>(T * 2 * d)), c(h.size()), o(h.size());
      RmsNormRows(n.data(), T, d, b.conv_norm, config_.eps, pool);
      ApplyLinear(b.pw1, n.data(), T, g.data(), scratch, pool);
      for (std::int64_t t = 0; t < T; ++t) {  // GLU: first half * sigmoid(second half), into g's first half
        float* row = g.data() + t * 2 * d;
        for (std::int64_t i = 0; i < d; ++i) n[t * d + i] = row[i] / (1.0f + std::exp(-row[d + i]));
      }
      const int K = config_.conv_kernel;
      for (std::int64_t t = 0; t < T; ++t) {  // causal depthwise: K - 1 frames of zeros in front
        for (std::int64_t i = 0; i < d; ++i) {
          float acc = 0.0f;
          for (int j = 0; j < K; ++j) {
            const std::int64_t ts = t - (K - 1) + j;
            if (ts >= 0) acc += b.conv_dw[i * K + j] * n[ts * d + i];
          }
          c[t * d + i] = acc;
        }
      }
      RmsNormRows(c.data(), T, d, b.norm_conv, config_.eps, pool);
      Silu(c.data(), c.size());
      ApplyLinear(b.pw2, c.data(), T, o.data(), scratch, pool);
      for (std::size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    }
    HalfFfn(h, T, b.ffn_norm_1, b.ffn_up_1, b.ffn_down_1, b.ffn_post_norm_1, pool);
    RmsNormRows(h.data(), T, d, b.ln2, config_.eps, pool);
  }

  // HF Gemma4AudioAttention: blocks of 12 queries over 24 context slots (12
  // before the block); logit = softcap(q.k + q.r[distance]), a slot whose key
  // is padding, outside the clip or not 0..11 frames back gets -1e9 (so a
  // query with no visible key averages all 24 slots, as HF does).
  void Attention(const Block& b, const std::vector<float>& n, const std::vector<std::uint8_t>& mask,
                 std::vector<float>& out, ThreadPool* pool) const {
    const std::int64_t T = static_cast<std::int64_t>(mask.size()), d = config_.n_embd;
    const int H = config_.n_head, hd = config_.head_dim;
    std::vector<float> q(n.size()), k(n.size()), v(n.size()), rel(static_cast<std::size_t>((kPast + 1) * d)), scratch;
    const Linear* ls[] = {&b.q, &b.k, &b.v};
    float* ys[] = {q.data(), k.data(), v.data()};
    ApplyLinears(ls, n.data(), T, ys, scratch, pool);
    ApplyLinear(b.k_rel, positions_.data(), kPast + 1, rel.data(), scratch, pool);  // row c: distance 12 - c
    const float q_scale = static_cast<float>(1.0 / std::sqrt(double(hd)) / std::log(2.0));
    const float k_scale = static_cast<float>(std::log(1.0 + std::exp(1.0)) / std::log(2.0));
    for (std::int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        for (int i = 0; i < hd; ++i) q[t * d + h * hd + i] = q[t * d + h * hd + i] * q_scale * b.per_dim_scale[i];
      }
    }
    for (float& x : k) x *= k_scale;
    constexpr int kSlots = kChunk + kPast;
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int64_t first = t / kChunk * kChunk - kPast;  // the block's first context slot
      for (int h = 0; h < H; ++h) {
        const float* qt = q.data() + t * d + h * hd;
        double logits[kSlots];
        for (int j = 0; j < kSlots; ++j) {
          const std::int64_t kp = first + j, dist = t - kp;
          const bool inside = kp >= 0 && kp < T;
          double ac = 0.0, bd = 0.0;
          for (int i = 0; i < hd; ++i) {
            if (inside) ac += double(qt[i]) * k[kp * d + h * hd + i];
            if (dist >= 0 && dist <= kPast) bd += double(qt[i]) * rel[(kPast - dist) * d + h * hd + i];
          }
          const bool visible = inside && mask[kp] && dist >= 0 && dist < kWindow;
          logits[j] = visible ? kSoftcap * std::tanh((ac + bd) / kSoftcap) : kInvalid;
        }
        const double top = *std::max_element(logits, logits + kSlots);
        double w[kSlots], sum = 0.0;
        for (int j = 0; j < kSlots; ++j) sum += (w[j] = std::exp(logits[j] - top));
        float* o = out.data() + t * d + h * hd;
        for (int i = 0; i < hd; ++i) {
          double acc = 0.0;
          for (int j = 0; j < kSlots; ++j) {
            const std::int64_t kp = first + j;
            if (kp >= 0 && kp < T) acc += w[j] * v[kp * d + h * hd + i];
          }
          o[i] = static_cast<float>(acc / sum);
        }
      }
    }
  }

  // The sinusoids of distances 12 .. 0 (HF Gemma4AudioRelPositionalEncoding:
  // d / 2 timescales from 1 to 1e4, sin then cos), float32 as HF computes them.
  void RelativePositions() {
    const int d = config_.n_embd, half = d / 2;
    const double inc = std::log(1.0e4) / std::max(half - 1, 1);
    positions_.assign(static_cast<std::size_t>((kPast + 1) * d), 0.0f);
    for (int c = 0; c <= kPast; ++c) {
      const float pos = static_cast<float>(kPast - c);
      for (int i = 0; i < half; ++i) {
        const float inv = std::exp(static_cast<float>(i) * static_cast<float>(-inc));
        const float s = pos * inv;
        positions_[std::size_t(c) * d + i] = std::sin(s);
        positions_[std::size_t(c) * d + half + i] = std::cos(s);
      }
    }
  }

  ConvLayer conv_[2];
  Linear sscp_proj_, out_proj_, embed_;
  std::vector<Block> blocks_;
  std::vector<float> positions_;  // [13, n_embd]
};

}  // namespace

std::unique_ptr<AudioEncoder> LoadGemma4Audio(GgufFile file, const AudioConfig& config) {
  return std::make_unique<Gemma4Audio>(std::move(file), config);
}

}  // namespace kvshare::detail
