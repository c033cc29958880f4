// PLACEHOLDER, to be replaced at merge by the HF-exact preprocessing
// (src/vision/preprocess.h: antialiased bilinear / bicubic resize, Gemma 3
// pan-and-scan). This file resizes by nearest neighbour only, so that the
// encoders run end to end meanwhile; its pixels are NOT what HF's processors
// give. The sizes (fixed, or Gemma 4's aspect-preserving budget rule) are
// HF's.
#include <algorithm>
#include <cmath>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "vision/preprocess_calls.h"

namespace kvshare::detail {

namespace {

// HF Gemma4ImageProcessor get_aspect_ratio_preserving_size.
void BudgetSize(int h, int w, int budget, int cell, int& out_h, int& out_w) {
  const double f = std::sqrt(static_cast<double>(budget) * cell * cell / (static_cast<double>(h) * w));
  out_h = static_cast<int>(std::floor(f * h / cell)) * cell;
  out_w = static_cast<int>(std::floor(f * w / cell)) * cell;
  if (out_h == 0) {
    out_h = cell;
    out_w = std::min(w / h * cell, budget * cell);
  } else if (out_w == 0) {
    out_w = cell;
    out_h = std::min(h / w * cell, budget * cell);
  }
}

PixelTensor Resize(const Image& image, int h, int w, const VisionConfig& c) {
  PixelTensor p{h, w, std::vector<float>(3 * static_cast<std::size_t>(h) * w)};
  for (int y = 0; y < h; ++y) {
    const int sy = std::min(image.height - 1, static_cast<int>((y + 0.5) * image.height / h));
    for (int x = 0; x < w; ++x) {
      const int sx = std::min(image.width - 1, static_cast<int>((x + 0.5) * image.width / w));
      for (int ch = 0; ch < 3; ++ch) {
        const float v = image.rgb[(static_cast<std::size_t>(sy) * image.width + sx) * 3 + ch] / 255.0f;
        p.chw[(static_cast<std::size_t>(ch) * h + y) * w + x] = (v - c.image_mean[ch]) / c.image_std[ch];
      }
    }
  }
  return p;
}

}  // namespace

std::vector<PixelTensor> PreprocessImage(const Image& image, const VisionConfig& config,
                                         const PreprocessOptions& options) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != 3 * static_cast<std::size_t>(image.width) * image.height) {
    throw Error(
        Str("image is empty or malformed: ", image.width, " x ", image.height, " with ", image.rgb.size(), " bytes"));
  }
  if (config.image_size > 0) {
    if (options.pan_and_scan) throw Error("pan-and-scan is not implemented by the placeholder preprocessing yet");
    return {Resize(image, config.image_size, config.image_size, config)};
  }
  const int b = options.max_soft_tokens;
  if (b != 70 && b != 140 && b != 280 && b != 560 && b != 1120) {
    throw Error(Str("soft-token budget ", b, " is not one of 70, 140, 280, 560, 1120"));
  }
  int h = 0, w = 0;
  BudgetSize(image.height, image.width, b, config.patch_size * config.pool, h, w);
  return {Resize(image, h, w, config)};
}

}  // namespace kvshare::detail
