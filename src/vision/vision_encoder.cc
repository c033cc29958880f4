// VisionEncoder::Load: the mmproj's projector type picks the encoder
// (vision_encoder.h); EncoderBase: what the encoders share (encoder_base.h).
#include "kvshare/vision/vision_encoder.h"

#include <utility>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "vision/bf16_matmul.h"
#include "vision/encoder_base.h"
#include "vision/mmproj.h"
#include "vision/mobilenet_v5.h"
#include "vision/preprocess_calls.h"

namespace kvshare {
namespace {

// The encoder blocks' matrices, those `auto` precision looks at.
bool IsVisionMatrix(const GgufTensor& t) { return t.n_dims == 2 && t.name.starts_with("v.blk."); }

}  // namespace

std::unique_ptr<VisionEncoder> VisionEncoder::Load(const std::string& path, const VisionEncoderOptions& options) {
  GgufFile file = GgufFile::Open(path);
  const VisionConfig config = detail::ReadVisionConfig(file);
  switch (config.projector) {
    case ProjectorType::kGemma3: {
      const EncoderPrecision p = detail::ResolveEncoderPrecision(file, options.precision, "vision", IsVisionMatrix);
      return detail::LoadSiglip(std::move(file), config, p);
    }
    case ProjectorType::kGemma3nV: return detail::LoadMobileNetV5(std::move(file), config);
    case ProjectorType::kGemma4V: {
      const EncoderPrecision p = detail::ResolveEncoderPrecision(file, options.precision, "vision", IsVisionMatrix);
      return detail::LoadGemma4Vision(std::move(file), config, p);
    }
    case ProjectorType::kGemma4UV: return detail::LoadGemma4Unified(std::move(file), config);
  }
  throw Error("unreachable projector type");
}

namespace detail {

EncoderBase::EncoderBase(GgufFile file, const VisionConfig& config, EncoderPrecision precision)
    : file_(std::move(file)), config_(config), precision_(precision) {}

std::vector<PixelTensor> EncoderBase::Preprocess(const Image& image, const PreprocessOptions& options) const {
  return PreprocessImage(image, config_, options);
}

void EncoderBase::CheckPixels(const PixelTensor& pixels) const {
  const char* name = ProjectorTypeName(config_.projector);
  const int cell = config_.patch_size * config_.pool;
  if (config_.image_size > 0) {
    if (pixels.height != config_.image_size || pixels.width != config_.image_size) {
      throw Error(Str(name, " encoder: pixel tensor is ", pixels.height, " x ", pixels.width, ", expected ",
                      config_.image_size, " x ", config_.image_size, " (Preprocess gives that size)"));
    }
  } else if (pixels.height <= 0 || pixels.width <= 0 || pixels.height % cell != 0 || pixels.width % cell != 0) {
    throw Error(Str(name, " encoder: pixel tensor is ", pixels.height, " x ", pixels.width,
                    ", expected positive sides that are multiples of ", cell));
  }
  const std::size_t n = 3 * static_cast<std::size_t>(pixels.height) * static_cast<std::size_t>(pixels.width);
  if (pixels.chw.size() != n) {
    throw Error(Str(name, " encoder: pixel tensor holds ", pixels.chw.size(), " values, expected 3 x ", pixels.height,
                    " x ", pixels.width, " = ", n));
  }
}

int EncoderBase::TokensFor(const PixelTensor& pixels) const {
  CheckPixels(pixels);
  return TokensForSize(pixels.height, pixels.width);
}

}  // namespace detail

}  // namespace kvshare
