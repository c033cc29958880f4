// AudioEncoder::Load: the mmproj's audio projector type picks the encoder
// (audio_encoder.h); AudioEncoderBase (audio_encoders.h); and the unified
// model's encoder, which is only the embedder (HF Gemma4UnifiedModel
// get_audio_features: raw frames -> RMSNorm without weight -> Linear).
#include <utility>

#include "audio/audio_encoders.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "quant/tensor_lookup.h"
#include "vision/bf16_matmul.h"

namespace kvshare {

namespace detail {
namespace {

class Gemma4UnifiedAudio : public AudioEncoderBase {
 public:
  Gemma4UnifiedAudio(GgufFile file, const AudioConfig& c) : AudioEncoderBase(std::move(file), c) {
    embed_ = LoadLinear(TensorLookup(file_), "mm.a.input_projection", c.n_embd_text, c.samples_per_token);
  }
  AudioTowerOutput Tower(const AudioFeatures& f, ThreadPool*) const override {
    CheckFeatures(f, config_.samples_per_token);
    return AudioTowerOutput{f.n_frames, f.n_bins, f.values, f.mask};
  }
  std::vector<float> Encode(const AudioFeatures& f, ThreadPool* pool) const override {
    return EmbedValid(Tower(f, pool), nullptr, embed_, /*post_norm=*/false, pool);
  }

 private:
  Linear embed_;
};

}  // namespace

AudioEncoderBase::AudioEncoderBase(GgufFile file, const AudioConfig& config, EncoderPrecision precision)
    : file_(std::move(file)), config_(config), precision_(precision) {}

namespace {

// The conformer blocks' matrices. The converters keep the depthwise kernels
// F32 in F16 files, so they do not count.
bool IsAudioMatrix(const GgufTensor& t) {
  return t.n_dims == 2 && t.name.starts_with("a.blk.") && !t.name.ends_with("conv_dw.weight");
}

}  // namespace

void AudioEncoderBase::CheckFeatures(const AudioFeatures& f, int width) const {
  const char* name = AudioProjectorTypeName(config_.projector);
  if (f.n_bins != width || f.n_frames <= 0) {
    throw Error(Str(name, " encoder: features are ", f.n_frames, " x ", f.n_bins, ", expected at least one frame of ",
                    width, " values (", config_.projector == AudioProjectorType::kGemma4UA ? "RawAudioFrames" : "AudioFrontEndFor",
                    " gives them)"));
  }
  if (f.values.size() != static_cast<std::size_t>(f.n_frames) * width || f.mask.size() != static_cast<std::size_t>(f.n_frames)) {
    throw Error(Str(name, " encoder: features hold ", f.values.size(), " values and ", f.mask.size(),
                    " mask entries, expected ", f.n_frames, " x ", width, " and ", f.n_frames));
  }
}

std::vector<float> AudioEncoderBase::EmbedValid(const AudioTowerOutput& tower, const float* pre, const Linear& embed,
                                                bool post_norm, ThreadPool* pool) const {
  std::vector<float> rows;
  for (int t = 0; t < tower.n_frames; ++t) {
    if (!tower.mask[t]) continue;
    const float* r = tower.values.data() + static_cast<std::size_t>(t) * tower.width;
    rows.insert(rows.end(), r, r + tower.width);
  }
  const std::int64_t n = static_cast<std::int64_t>(rows.size()) / tower.width;
  RmsNormRows(rows.data(), n, tower.width, pre, config_.eps, pool);
  std::vector<float> out(static_cast<std::size_t>(n) * config_.n_embd_text), scratch;
  ApplyLinear(embed, rows.data(), n, out.data(), scratch, pool);
  if (post_norm) RmsNormRows(out.data(), n, config_.n_embd_text, nullptr, config_.eps, pool);
  return out;
}

}  // namespace detail

std::vector<float> AudioEncoder::HardToken(int) const {
  throw Error(detail::Str("the ", AudioProjectorTypeName(config().projector),
                          " audio encoder has no hard tokens (only Gemma 3n's gemma3na has)"));
}

std::unique_ptr<AudioEncoder> AudioEncoder::Load(const std::string& path, const AudioEncoderOptions& options) {
  GgufFile file = GgufFile::Open(path);
  const AudioConfig config = ReadAudioConfig(file);
  switch (config.projector) {
    case AudioProjectorType::kGemma4A: {
      const EncoderPrecision p = detail::ResolveEncoderPrecision(file, options.precision, "audio", detail::IsAudioMatrix);
      return detail::LoadGemma4Audio(std::move(file), config, p);
    }
    case AudioProjectorType::kGemma4UA: return detail::LoadGemma4UnifiedAudio(std::move(file), config);
    case AudioProjectorType::kGemma3nA: {
      const EncoderPrecision p = detail::ResolveEncoderPrecision(file, options.precision, "audio", detail::IsAudioMatrix);
      return detail::LoadGemma3nAudio(std::move(file), config, p);
    }
  }
  throw Error("unreachable audio projector type");
}

namespace detail {

std::unique_ptr<AudioEncoder> LoadGemma4UnifiedAudio(GgufFile file, const AudioConfig& config) {
  return std::make_unique<Gemma4UnifiedAudio>(std::move(file), config);
}

}  // namespace detail

}  // namespace kvshare
