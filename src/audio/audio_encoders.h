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
  AudioEncoderBase(GgufFile file, const AudioConfig& config);
  const AudioConfig& config() const override { return config_; }

 protected:
  // Throws kvshare::Error unless `f` holds n_frames >= 1 rows of `width`
  // values and a mask per frame.
  void CheckFeatures(const AudioFeatures& f, int width) const;
  // The valid rows of a tower's output, [valid, width].
  static std::vector<float> ValidRows(const AudioTowerOutput& tower);

  GgufFile file_;  // declared first: the weights point into its mapping
  AudioConfig config_;
};

std::unique_ptr<AudioEncoder> LoadGemma3nAudio(GgufFile file, const AudioConfig& config);
std::unique_ptr<AudioEncoder> LoadGemma4Audio(GgufFile file, const AudioConfig& config);
std::unique_ptr<AudioEncoder> LoadGemma4UnifiedAudio(GgufFile file, const AudioConfig& config);

}  // namespace kvshare::detail
