// The audio part of an mmproj GGUF (kvshare/audio/audio_mmproj.h): projector
// type and geometry from the tensor shapes, each checked against the others
// (docs/audio.md "The mmproj" lists the names and layouts).
#include "kvshare/audio/audio_mmproj.h"

#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include "common/str.h"
#include "gguf/mmproj_tensors.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace {

using detail::CountMmprojBlocks;
using detail::MmprojTensor;
using detail::Str;
using detail::TensorDim;
using detail::ThrowTensorShape;

constexpr const char* kSupported = "gemma3na, gemma4a, gemma4ua";

// Output length of a 3-tap stride-2 convolution with one sample of padding
// on each side (Gemma 4) or before and after in frequency (Gemma 3n).
int Halved(int n) { return (n + 2 - 3) / 2 + 1; }

// The SSCP: two 3x3 stride-2 convolutions {3, 3, in, out} and the linear
// that takes their flattened (freq, channel) output to `width` (in, out as
// the file stores it: ne {freq * channels, width}).
void ReadSscp(const GgufFile& f, AudioConfig& c, const std::string& proj, bool proj_in_first) {
  const GgufTensor& c0 = MmprojTensor(f, "a.conv1d.0.weight", {3, 3, 1, -1});
  c.sscp_channels[0] = TensorDim(c0, 3);
  const GgufTensor& c1 = MmprojTensor(f, "a.conv1d.1.weight", {3, 3, c.sscp_channels[0], -1});
  c.sscp_channels[1] = TensorDim(c1, 3);
  MmprojTensor(f, "a.conv1d.0.norm.weight", {c.sscp_channels[0]});
  MmprojTensor(f, "a.conv1d.1.norm.weight", {c.sscp_channels[1]});
  c.sscp_freq = Halved(Halved(c.n_mel));
  const std::int64_t in = std::int64_t{c.sscp_freq} * c.sscp_channels[1];
  const GgufTensor& p = f.Tensor(proj);
  if (p.n_dims != 2 || p.ne[proj_in_first ? 0 : 1] != in || (c.n_embd > 0 && p.ne[proj_in_first ? 1 : 0] != c.n_embd)) {
    ThrowTensorShape(f, proj, p,
                     Str("[", in, ", ", c.n_embd, "] (the SSCP gives ", c.sscp_freq, " mel bins x ", c.sscp_channels[1],
                         " channels; ", c.n_mel, " mel bins in)"));
  }
}

// The conformer blocks' shapes, from block 0 (every block is checked for
// its first norm only: CountMmprojBlocks).
void ReadConformer(const GgufFile& f, AudioConfig& c, const char* norm_probe, const std::string& per_dim_scale) {
  c.n_layer = CountMmprojBlocks(f, "a.blk.", norm_probe, "audio encoder");
  const GgufTensor& q = MmprojTensor(f, "a.blk.0.attn_q.weight", {-1, -1});
  c.n_embd = TensorDim(q, 0);
  if (q.ne[1] != c.n_embd) ThrowTensorShape(f, "a.blk.0.attn_q.weight", q, Str("[", c.n_embd, ", ", c.n_embd, "]"));
  c.head_dim = TensorDim(MmprojTensor(f, per_dim_scale, {-1}), 0);
  if (c.n_embd % c.head_dim != 0) {
    throw Error(Str("mmproj ", f.name(), ": tensor '", per_dim_scale, "' gives a head size of ", c.head_dim,
                    ", which does not divide the audio encoder width ", c.n_embd));
  }
  c.n_head = c.n_embd / c.head_dim;
  const GgufTensor& up = MmprojTensor(f, "a.blk.0.ffn_up.weight", {c.n_embd, -1});
  c.n_ff = TensorDim(up, 1);
  MmprojTensor(f, "a.blk.0.ffn_down.weight", {c.n_ff, c.n_embd});
  MmprojTensor(f, "a.blk.0.conv_pw1.weight", {c.n_embd, 2 * c.n_embd});
  MmprojTensor(f, "a.blk.0.conv_pw2.weight", {c.n_embd, c.n_embd});
  for (const char* name : {"attn_k", "attn_v", "attn_out"}) {
    MmprojTensor(f, Str("a.blk.0.", name, ".weight"), {c.n_embd, c.n_embd});
  }
}

void ReadGemma3nA(const GgufFile& f, AudioConfig& c) {
  ReadConformer(f, c, "ln1.weight", "a.blk.0.per_dim_scale");
  MmprojTensor(f, "a.blk.0.linear_pos.weight", {c.n_embd, c.n_embd});
  c.conv_kernel = TensorDim(MmprojTensor(f, "a.blk.0.conv_dw.weight", {-1, 1, c.n_embd}), 0);
  ReadSscp(f, c, "a.pre_encode.out.weight", /*proj_in_first=*/true);
  c.n_embd_out = c.n_embd;
  const GgufTensor& e = MmprojTensor(f, "mm.a.embedding.weight", {c.n_embd, -1});
  c.n_vocab_hard = TensorDim(e, 1);
  for (const char* n : {"mm.a.hard_emb_norm.weight", "mm.a.soft_emb_norm.weight"}) MmprojTensor(f, n, {c.n_embd});
  c.n_embd_text = TensorDim(MmprojTensor(f, "mm.a.input_projection.weight", {c.n_embd, -1}), 1);
}

void ReadGemma4A(const GgufFile& f, AudioConfig& c) {
  ReadConformer(f, c, "attn_pre_norm.weight", "a.blk.0.per_dim_scale.weight");
  MmprojTensor(f, "a.blk.0.attn_k_rel.weight", {c.n_embd, c.n_embd});
  c.conv_kernel = TensorDim(MmprojTensor(f, "a.blk.0.conv_dw.weight", {-1, c.n_embd}), 0);
  ReadSscp(f, c, "a.input_projection.weight", /*proj_in_first=*/true);
  const GgufTensor& out = MmprojTensor(f, "a.pre_encode.out.weight", {c.n_embd, -1});
  c.n_embd_out = TensorDim(out, 1);
  MmprojTensor(f, "a.pre_encode.out.bias", {c.n_embd_out});
  c.n_embd_text = TensorDim(MmprojTensor(f, "mm.a.input_projection.weight", {c.n_embd_out, -1}), 1);
  c.clipped_linears = f.FindTensor("a.blk.0.attn_q.input_min") != nullptr;
}

void ReadGemma4UA(const GgufFile& f, AudioConfig& c) {
  const GgufTensor& w = MmprojTensor(f, "mm.a.input_projection.weight", {-1, -1});
  c.samples_per_token = TensorDim(w, 0);
  c.n_embd_text = TensorDim(w, 1);
  c.n_mel = 0;  // clip.audio.num_mel_bins is a dummy here (docs/audio.md)
}

AudioProjectorType ReadType(const GgufFile& f) {
  detail::CheckMmprojFile(f);
  const std::optional<std::string_view> name = f.GetStringOpt("clip.audio.projector_type");
  if (!f.GetBoolOr("clip.has_audio_encoder", name.has_value()) || !name) {
    throw Error(Str("mmproj ", f.name(),
                    " has no audio encoder (clip.has_audio_encoder is false or no clip.audio.projector_type key): "
                    "this model cannot take audio; audio needs an mmproj of type ",
                    kSupported, " (Gemma 3n, Gemma 4 E2B / E4B, Gemma 4 unified)"));
  }
  if (*name == "gemma3na") return AudioProjectorType::kGemma3nA;
  if (*name == "gemma4a") return AudioProjectorType::kGemma4A;
  if (*name == "gemma4ua") return AudioProjectorType::kGemma4UA;
  throw Error(
      Str("mmproj ", f.name(), ": audio projector type '", *name, "' is not supported (supported: ", kSupported, ")"));
}

}  // namespace

const char* AudioProjectorTypeName(AudioProjectorType type) {
  switch (type) {
    case AudioProjectorType::kGemma3nA: return "gemma3na";
    case AudioProjectorType::kGemma4A: return "gemma4a";
    case AudioProjectorType::kGemma4UA: return "gemma4ua";
  }
  return "unknown";
}

AudioConfig ReadAudioConfig(const GgufFile& f) {
  AudioConfig c;
  c.projector = ReadType(f);
  c.n_mel = static_cast<int>(f.GetU32Or("clip.audio.num_mel_bins", 128));
  // Gemma 4's converter once wrote a wrong eps, so llama.cpp hard-codes 1e-6
  // there; Gemma 3n's converter writes 1e-5 while HF uses 1e-6 (docs/audio.md).
  c.eps = c.projector == AudioProjectorType::kGemma3nA ? 1e-6f
                                                       : f.GetF32Or("clip.audio.attention.layer_norm_epsilon", 1e-6f);
  if (!std::isfinite(c.eps) || c.eps < 0) {
    throw Error(
        Str("mmproj ", f.name(), ": clip.audio.attention.layer_norm_epsilon is ", c.eps, ", expected finite and >= 0"));
  }
  if (c.projector != AudioProjectorType::kGemma4UA && c.n_mel <= 0) {
    throw Error(Str("mmproj ", f.name(), ": clip.audio.num_mel_bins is ", c.n_mel, ", expected a positive count"));
  }
  switch (c.projector) {
    case AudioProjectorType::kGemma3nA: ReadGemma3nA(f, c); break;
    case AudioProjectorType::kGemma4A: ReadGemma4A(f, c); break;
    case AudioProjectorType::kGemma4UA: ReadGemma4UA(f, c); break;
  }
  return c;
}

void CheckAudioMmprojFitsText(const AudioConfig& config, int text_n_embd) {
  if (config.n_embd_text != text_n_embd) {
    throw Error(Str("the mmproj (", AudioProjectorTypeName(config.projector), ") writes audio soft tokens of width ",
                    config.n_embd_text, " but the text model's embedding width is ", text_n_embd,
                    ": pass the mmproj converted from the same model"));
  }
}

LogMelConfig AudioFrontEndFor(const AudioConfig& config) {
  LogMelConfig c;
  switch (config.projector) {
    case AudioProjectorType::kGemma3nA: c = Gemma3nLogMelConfig(); break;
    case AudioProjectorType::kGemma4A: c = Gemma4LogMelConfig(); break;
    case AudioProjectorType::kGemma4UA:
      throw Error("gemma4ua takes raw audio frames, not log-mel features (RawAudioFrames)");
  }
  c.n_mels = config.n_mel;
  return c;
}

int AudioSoftTokens(const AudioConfig& config, const AudioFeatures& features) {
  if (config.projector == AudioProjectorType::kGemma4UA) return features.n_frames;
  // Gemma4Processor.replace_audio_token: per stride-2 convolution, the mask
  // keeps every 2nd entry, cut to the convolution's output length.
  std::vector<std::uint8_t> mask = features.mask;
  for (int pass = 0; pass < 2; ++pass) {
    const int t_out = mask.empty() ? 0 : Halved(static_cast<int>(mask.size()));
    std::vector<std::uint8_t> next;
    for (std::size_t i = 0; i < mask.size() && static_cast<int>(next.size()) < t_out; i += 2) next.push_back(mask[i]);
    mask = std::move(next);
  }
  if (config.projector == AudioProjectorType::kGemma3nA) {
    std::vector<std::uint8_t> kept;  // conf_reduction_factor 4
    for (std::size_t i = 0; i < mask.size(); i += 4) kept.push_back(mask[i]);
    mask = std::move(kept);
  }
  int n = 0;
  for (std::uint8_t m : mask) n += m;
  return n;
}

}  // namespace kvshare
