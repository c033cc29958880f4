// VisionEncoder::Preprocess's dispatch (preprocess_calls.h): each family's HF
// processor (preprocess.h) with the geometry read from the mmproj.
#include "common/str.h"
#include "kvshare/common/error.h"
#include "vision/preprocess.h"
#include "vision/preprocess_calls.h"

namespace kvshare::detail {

std::vector<PixelTensor> PreprocessImage(const Image& image, const VisionConfig& config,
                                         const PreprocessOptions& options) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != 3 * static_cast<std::size_t>(image.width) * image.height) {
    throw Error(
        Str("image is empty or malformed: ", image.width, " x ", image.height, " with ", image.rgb.size(), " bytes"));
  }
  switch (config.projector) {
    case ProjectorType::kGemma3: {
      FixedResizeParams p{.size = config.image_size, .filter = ResizeFilter::kBilinear, .normalize = true};
      for (int c = 0; c < 3; ++c) {
        p.mean[c] = config.image_mean[c];
        p.std[c] = config.image_std[c];
      }
      const PanAndScanParams pan;
      return PreprocessGemma3(image, p, options.pan_and_scan ? &pan : nullptr);
    }
    case ProjectorType::kGemma3nV:
      return {PreprocessFixed(
          image, FixedResizeParams{.size = config.image_size, .filter = ResizeFilter::kBilinear, .normalize = false})};
    case ProjectorType::kGemma4V:
    case ProjectorType::kGemma4UV: {
      // Both count soft tokens in 48 px cells (16 px patches pooled 3 x 3, or
      // the unified model's 48 px patches).
      const int cell = config.patch_size * config.pool;
      if (cell != 48) throw Error(Str("Gemma 4 image cell of ", cell, " px; expected 48 (patch 16 x pool 3)"));
      return {PreprocessGemma4(image, options.max_soft_tokens, 16, 3)};
    }
  }
  throw Error("unknown projector type");
}

}  // namespace kvshare::detail
