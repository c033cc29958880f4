// Gemma 4's audio tower (`gemma4a`; HF Gemma4AudioModel + the audio
// Gemma4MultimodalEmbedder; docs/audio.md "Encoders"): two subsampling
// convolutions (padded frames zeroed first, LayerNorm over channels, ReLU), a
// linear, the conformer blocks (conformer.h: 12 keys, k scaled by
// ln(1 + e) / ln 2, hidden logits -1e9), the output projection, then RMSNorm
// without weight and the projection to the text width.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "audio/audio_encoders.h"
#include "audio/conformer.h"
#include "audio/sscp.h"
#include "common/str.h"
#include "quant/tensor_lookup.h"

namespace kvshare::detail {
namespace {

class Gemma4Audio : public AudioEncoderBase {
 public:
  Gemma4Audio(GgufFile file, const AudioConfig& c, EncoderPrecision precision)
      : AudioEncoderBase(std::move(file), c, precision) {
    const TensorLookup t(file_);
    LoadSscp(file_, c.sscp_channels, conv_);
    sscp_proj_ = LoadLinear(t, "a.input_projection", c.n_embd, std::int64_t{c.sscp_freq} * c.sscp_channels[1]);
    const std::int64_t d = c.n_embd, ff = c.n_ff;
    const LinearOptions clamps{.clamps = c.clipped_linears, .bf16 = bf16()};  // the blocks' linears
    for (int i = 0; i < c.n_layer; ++i) {
      const std::string p = Str("a.blk.", i, ".");
      ConformerBlock b;
      LoadHalfFfns(t, p, d, ff, clamps, b);
      b.attn_pre_norm = t.Vec(p + "attn_pre_norm.weight", d);
      b.attn_post_norm = t.Vec(p + "attn_post_norm.weight", d);
      b.q = LoadLinear(t, p + "attn_q", d, d, clamps);
      b.k = LoadLinear(t, p + "attn_k", d, d, clamps);
      b.v = LoadLinear(t, p + "attn_v", d, d, clamps);
      b.out = LoadLinear(t, p + "attn_out", d, d, clamps);
      b.rel_keys = RelativeKeys(LoadLinear(t, p + "attn_k_rel", d, d), c.n_embd);
      const float* pds = t.Vec(p + "per_dim_scale.weight", c.head_dim);  // softplus applied by the converter
      b.per_dim_scale.assign(pds, pds + c.head_dim);
      // The converter's names cross here: conv_norm is the pre-norm, norm_conv the post-convolution one.
      b.conv_norm = t.Vec(p + "conv_norm.weight", d);
      b.norm_conv = t.Vec(p + "norm_conv.weight", d);
      b.conv_dw_t = DepthwiseTaps(t.Vec(p + "conv_dw.weight", d * c.conv_kernel), c.n_embd, c.conv_kernel);
      b.pw1 = LoadLinear(t, p + "conv_pw1", 2 * d, d, clamps);
      b.pw2 = LoadLinear(t, p + "conv_pw2", d, d, clamps);
      b.final_norm = t.Vec(p + "ln2.weight", d);
      blocks_.push_back(std::move(b));
    }
    options_ = ConformerOptions{.n_embd = c.n_embd, .n_ff = c.n_ff, .n_head = c.n_head, .head_dim = c.head_dim,
                                .conv_kernel = c.conv_kernel, .eps = c.eps, .max_distance = 11,
                                .k_scale = static_cast<float>(std::log(1.0 + std::exp(1.0)) / std::log(2.0)),
                                .hidden_logit = -1.0e9f};
    out_proj_ = LoadLinear(t, "a.pre_encode.out", c.n_embd_out, d, {.bias = true, .bf16 = bf16()});
    embed_ = LoadLinear(t, "mm.a.input_projection", c.n_embd_text, c.n_embd_out);
  }

  AudioTowerOutput Tower(const AudioFeatures& f, ThreadPool* pool) const override {
    CheckFeatures(f, config_.n_mel);
    std::vector<std::uint8_t> mask = f.mask;
    std::vector<float> x = f.values;  // [frames, freq, channels]
    int frames = f.n_frames, freq = f.n_bins;
    for (int i = 0; i < 2; ++i) {
      const int in = conv_[i].in;
      for (int t = 0; t < frames; ++t) {
        if (!mask[t]) std::fill_n(x.begin() + std::size_t(t) * freq * in, std::size_t(freq) * in, 0.0f);
      }
      x = SscpConvolve(conv_[i], x, frames, freq, /*time_offset=*/-1, pool);
      frames = (frames - 1) / 2 + 1;
      freq = (freq - 1) / 2 + 1;
      LayerNormRows(x.data(), std::int64_t(frames) * freq, conv_[i].out, conv_[i].norm, nullptr, config_.eps, pool);
      for (float& v : x) v = std::max(v, 0.0f);
      std::vector<std::uint8_t> kept;
      for (std::size_t t = 0; t < mask.size(); t += 2) kept.push_back(mask[t]);
      mask = std::move(kept);
    }
    std::vector<float> h(std::size_t(frames) * config_.n_embd), scratch;
    ApplyLinear(sscp_proj_, x.data(), frames, h.data(), scratch, pool);
    RunConformer(blocks_, options_, h, mask, pool);
    AudioTowerOutput out{frames, config_.n_embd_out, std::vector<float>(std::size_t(frames) * config_.n_embd_out),
                         mask};
    ApplyLinear(out_proj_, h.data(), frames, out.values.data(), scratch, pool);
    return out;
  }

  std::vector<float> Encode(const AudioFeatures& f, ThreadPool* pool) const override {
    return EmbedValid(Tower(f, pool), nullptr, embed_, /*post_norm=*/false, pool);
  }

 private:
  SscpConv conv_[2];
  Linear sscp_proj_, out_proj_, embed_;
  std::vector<ConformerBlock> blocks_;
  ConformerOptions options_;
};

}  // namespace

std::unique_ptr<AudioEncoder> LoadGemma4Audio(GgufFile file, const AudioConfig& config, EncoderPrecision precision) {
  return std::make_unique<Gemma4Audio>(std::move(file), config, precision);
}

}  // namespace kvshare::detail
