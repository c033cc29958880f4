// What the audio encoders share (audio_encoder.cc): the mapped mmproj, its
// AudioConfig, the feature check and the embedder step; and the encoders of
// this directory. Internal to src/audio.
#pragma once

#include <memory>
#include <vector>

#include "kvshare/audio/audio_encoder.h"
#include "vision/vision_ops.h"

namespace kvshare::detail {

class AudioEncoderBase : public AudioEncoder {
 public:
  AudioEncoderBase(GgufFile file, const AudioConfig& config, EncoderPrecision precision = EncoderPrecision::kF32);
  const AudioConfig& config() const override { return config_; }
  EncoderPrecision precision() const override { return precision_; }

 protected:
  // Throws kvshare::Error unless `f` holds n_frames >= 1 rows of `width`
  // values and a mask per frame.
  void CheckFeatures(const AudioFeatures& f, int width) const;
  // The soft tokens of a tower's valid rows (HF's multimodal embedders):
  // RMSNorm (weight `pre`, or none when null) -> `embed` -> RMSNorm without
  // weight when `post_norm` (Gemma 3n). [valid, n_embd_text].
  std::vector<float> EmbedValid(const AudioTowerOutput& tower, const float* pre, const Linear& embed, bool post_norm,
                                ThreadPool* pool) const;

  GgufFile file_;  // declared first: the weights point into its mapping
  AudioConfig config_;
  EncoderPrecision precision_;  // kF32 or kBF16
  bool bf16() const { return precision_ == EncoderPrecision::kBF16; }
};

// `precision`: kF32 or kBF16 (AudioEncoder::Load resolves kAuto).
std::unique_ptr<AudioEncoder> LoadGemma3nAudio(GgufFile file, const AudioConfig& config, EncoderPrecision precision);
std::unique_ptr<AudioEncoder> LoadGemma4Audio(GgufFile file, const AudioConfig& config, EncoderPrecision precision);
std::unique_ptr<AudioEncoder> LoadGemma4UnifiedAudio(GgufFile file, const AudioConfig& config);

}  // namespace kvshare::detail
