// Gemma 3n's audio tower (`gemma3na`; HF Gemma3nAudioEncoder + the audio
// Gemma3nMultimodalEmbedder's soft path; docs/audio.md "Encoders"): two
// subsampling convolutions (zeros at the end of time only, cumulative group
// norm, ReLU; the mask is not applied), a linear, the conformer blocks
// (conformer.h: 13 keys, k unscaled, raw per_dim_scale through softplus,
// padded frames zeroed before the light convolution), every 4th frame, then
// RMSNorm (soft_emb_norm), the projection and RMSNorm without weight.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "audio/audio_encoders.h"
#include "audio/conformer.h"
#include "audio/sscp.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "quant/tensor_lookup.h"

namespace kvshare::detail {
namespace {

constexpr double kGroupNormEps = 1e-3;  // sscp_conv_group_norm_eps (not in the GGUF)
constexpr int kReduction = 4;           // conf_reduction_factor (not in the GGUF)
constexpr int kPromptSlots = 188;       // audio_soft_tokens_per_image: 30 s

// HF Gemma3nAudioCumulativeGroupNorm on x [frames, n] (n = freq * channels,
// channel fastest): frame t is normalized by the mean and variance of frames
// 0 .. t over all n values (the variance summing each frame's squared
// distance to its own running mean), then scaled per channel.
void CumulativeGroupNorm(std::vector<float>& x, int frames, int n, int channels, const float* w) {
  double sum = 0.0, sq = 0.0;
  for (int t = 0; t < frames; ++t) {
    float* row = x.data() + std::size_t(t) * n;
    for (int i = 0; i < n; ++i) sum += row[i];
    const double count = double(n) * (t + 1);
    const double mean = sum / count;
    for (int i = 0; i < n; ++i) sq += (row[i] - mean) * (row[i] - mean);
    const double inv = 1.0 / std::sqrt(sq / count + kGroupNormEps);
    for (int i = 0; i < n; ++i) row[i] = static_cast<float>((row[i] - mean) * inv) * w[i % channels];
  }
}

std::vector<float> Softplus(const float* x, int n) {
  std::vector<float> y(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) y[i] = static_cast<float>(std::log1p(std::exp(double(x[i]))));
  return y;
}

class Gemma3nAudio : public AudioEncoderBase {
 public:
  Gemma3nAudio(GgufFile file, const AudioConfig& c, EncoderPrecision precision)
      : AudioEncoderBase(std::move(file), c, precision) {
    const TensorLookup t(file_);
    LoadSscp(file_, c.sscp_channels, conv_);
    sscp_proj_ = LoadLinear(t, "a.pre_encode.out", c.n_embd, std::int64_t{c.sscp_freq} * c.sscp_channels[1]);
    const std::int64_t d = c.n_embd, ff = c.n_ff;
    const LinearOptions lo{.bf16 = bf16()};  // the blocks' linears
    for (int i = 0; i < c.n_layer; ++i) {
      const std::string p = Str("a.blk.", i, ".");
      ConformerBlock b;
      LoadHalfFfns(t, p, d, ff, lo, b);
      b.attn_pre_norm = t.Vec(p + "ln1.weight", d);
      b.attn_post_norm = t.Vec(p + "ln2.weight", d);
      b.q = LoadLinear(t, p + "attn_q", d, d, lo);
      b.k = LoadLinear(t, p + "attn_k", d, d, lo);
      b.v = LoadLinear(t, p + "attn_v", d, d, lo);
      b.out = LoadLinear(t, p + "attn_out", d, d, lo);
      b.rel_keys = RelativeKeys(LoadLinear(t, p + "linear_pos", d, d), c.n_embd);
      b.per_dim_scale = Softplus(t.Vec(p + "per_dim_scale", c.head_dim), c.head_dim);  // stored raw
      b.conv_norm = t.Vec(p + "conv_norm.weight", d);
      b.norm_conv = t.Vec(p + "norm_conv.weight", d);
      b.conv_dw_t = DepthwiseTaps(t.Vec(p + "conv_dw.weight", d * c.conv_kernel), c.n_embd, c.conv_kernel);
      b.pw1 = LoadLinear(t, p + "conv_pw1", 2 * d, d, lo);
      b.pw2 = LoadLinear(t, p + "conv_pw2", d, d, lo);
      b.final_norm = t.Vec(p + "layer_pre_norm.weight", d);  // the block's last norm, despite the name
      blocks_.push_back(std::move(b));
    }
    options_ = ConformerOptions{.n_embd = c.n_embd, .n_ff = c.n_ff, .n_head = c.n_head, .head_dim = c.head_dim,
                                .conv_kernel = c.conv_kernel, .eps = c.eps, .max_distance = 12, .k_scale = 1.0f,
                                .hidden_logit = std::numeric_limits<float>::lowest(),
                                .zero_padded_before_conv = true};
    soft_norm_ = t.Vec("mm.a.soft_emb_norm.weight", d);
    hard_norm_ = t.Vec("mm.a.hard_emb_norm.weight", d);
    hard_table_ = t.Vec("mm.a.embedding.weight", d * c.n_vocab_hard);
    embed_ = LoadLinear(t, "mm.a.input_projection", c.n_embd_text, d);
  }

  AudioTowerOutput Tower(const AudioFeatures& f, ThreadPool* pool) const override {
    CheckFeatures(f, config_.n_mel);
    std::vector<float> x = f.values;  // [frames, freq, channels]
    int frames = f.n_frames, freq = f.n_bins;
    for (int i = 0; i < 2; ++i) {
      x = SscpConvolve(conv_[i], x, frames, freq, /*time_offset=*/0, pool);
      frames = (frames - 1) / 2 + 1;
      freq = (freq - 1) / 2 + 1;
      CumulativeGroupNorm(x, frames, freq * conv_[i].out, conv_[i].out, conv_[i].norm);
      for (float& v : x) v = std::max(v, 0.0f);
    }
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(frames));
    for (int t = 0; t < frames; ++t) mask[t] = f.mask[std::min(4 * t, f.n_frames - 1)];  // time stride 2 x 2
    std::vector<float> h(std::size_t(frames) * config_.n_embd), scratch;
    ApplyLinear(sscp_proj_, x.data(), frames, h.data(), scratch, pool);
    RunConformer(blocks_, options_, h, mask, pool);
    const int kept = (frames + kReduction - 1) / kReduction, d = config_.n_embd;
    AudioTowerOutput out{kept, d, std::vector<float>(std::size_t(kept) * d, 0.0f), std::vector<std::uint8_t>(kept)};
    for (int t = 0; t < kept; ++t) {
      out.mask[t] = mask[std::size_t(t) * kReduction];
      if (out.mask[t]) std::copy_n(h.begin() + std::size_t(t) * kReduction * d, d, out.values.begin() + std::size_t(t) * d);
    }
    return out;
  }

  std::vector<float> Encode(const AudioFeatures& f, ThreadPool* pool) const override {
    return EmbedValid(Tower(f, pool), soft_norm_, embed_, /*post_norm=*/true, pool);
  }

  std::vector<float> PromptTokens(const AudioFeatures& f, ThreadPool* pool) const override {
    const AudioTowerOutput tower = Tower(f, pool);
    if (tower.n_frames > kPromptSlots) {
      throw Error(Str("gemma3na encoder: the clip gives ", tower.n_frames, " audio tokens, more than the ",
                      kPromptSlots, " the prompt holds (30 s; cut or split the clip)"));
    }
    const std::vector<float> soft = EmbedValid(tower, soft_norm_, embed_, /*post_norm=*/true, pool);
    const std::vector<float> pad = HardToken(config_.n_vocab_hard - 1);
    const std::size_t w = static_cast<std::size_t>(config_.n_embd_text);
    std::vector<float> out;
    out.reserve(kPromptSlots * w);
    std::size_t next = 0;  // soft rows are the valid frames, in order
    for (int t = 0; t < kPromptSlots; ++t) {
      const bool valid = t < tower.n_frames && tower.mask[t];
      const float* row = valid ? soft.data() + (next++) * w : pad.data();
      out.insert(out.end(), row, row + w);
    }
    return out;
  }

  std::vector<float> HardToken(int row) const override {
    if (row < 0 || row >= config_.n_vocab_hard) {
      throw Error(Str("gemma3na encoder: hard token row ", row, " is outside 0..", config_.n_vocab_hard - 1));
    }
    const int d = config_.n_embd;
    std::vector<float> x(hard_table_ + std::size_t(row) * d, hard_table_ + std::size_t(row + 1) * d);
    RmsNormRows(x.data(), 1, d, hard_norm_, config_.eps, nullptr);
    std::vector<float> out(static_cast<std::size_t>(config_.n_embd_text)), scratch;
    ApplyLinear(embed_, x.data(), 1, out.data(), scratch, nullptr);
    RmsNormRows(out.data(), 1, config_.n_embd_text, nullptr, config_.eps, nullptr);
    return out;
  }

 private:
  SscpConv conv_[2];
  Linear sscp_proj_, embed_;
  const float* soft_norm_ = nullptr;
  const float* hard_norm_ = nullptr;
  const float* hard_table_ = nullptr;  // [n_vocab_hard, n_embd]
  std::vector<ConformerBlock> blocks_;
  ConformerOptions options_;
};

}  // namespace

std::unique_ptr<AudioEncoder> LoadGemma3nAudio(GgufFile file, const AudioConfig& config, EncoderPrecision precision) {
  return std::make_unique<Gemma3nAudio>(std::move(file), config, precision);
}

}  // namespace kvshare::detail
