// What every VisionEncoder implementation shares: the mapped mmproj, its
// VisionConfig, Preprocess through the family's HF-style preprocessing
// (preprocess_calls.h), the pixel-tensor geometry check and TokensFor from it.
// The encoders (siglip.cc, gemma4_vision.cc, gemma4_unified.cc,
// mobilenet_v5.cc) derive from it. Internal to src/vision.
#pragma once

#include <memory>
#include <vector>

#include "kvshare/gguf/gguf.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare::detail {

class EncoderBase : public VisionEncoder {
 public:
  EncoderBase(GgufFile file, const VisionConfig& config, EncoderPrecision precision = EncoderPrecision::kF32);

  const VisionConfig& config() const override { return config_; }
  const GgufFile& gguf() const override { return file_; }
  EncoderPrecision precision() const override { return precision_; }
  std::vector<PixelTensor> Preprocess(const Image& image, const PreprocessOptions& options) const override;
  // (H / cell) (W / cell), cell = patch_size * pool, after CheckPixels.
  int TokensFor(const PixelTensor& pixels) const override;

 protected:
  // Throws kvshare::Error unless pixels holds 3 * height * width values and
  // its sides are image_size (fixed-size encoders) or positive multiples of
  // patch_size * pool (variable size), naming the expected geometry.
  void CheckPixels(const PixelTensor& pixels) const;

  GgufFile file_;  // declared first: the weights point into its mapping
  VisionConfig config_;
  EncoderPrecision precision_;  // kF32 or kBF16
  bool bf16() const { return precision_ == EncoderPrecision::kBF16; }
};

// The encoders of this directory, each from its mmproj file and the config
// ReadVisionConfig gave. kvshare::Error names a missing or ill-shaped tensor.
// `precision`: kF32 or kBF16 (ResolveEncoderPrecision's).
std::unique_ptr<VisionEncoder> LoadSiglip(GgufFile file, const VisionConfig& config, EncoderPrecision precision);
std::unique_ptr<VisionEncoder> LoadGemma4Vision(GgufFile file, const VisionConfig& config, EncoderPrecision precision);
std::unique_ptr<VisionEncoder> LoadGemma4Unified(GgufFile file, const VisionConfig& config);

}  // namespace kvshare::detail
