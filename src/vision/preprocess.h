// vision/preprocess.h — each family's HF image processor (transformers 5.23,
// torchvision backend), from a decoded RGB image to the float pixel tensors
// the encoder takes (docs/vision.md "Preprocessing"). VisionEncoder::Preprocess
// calls these with the geometry it read from the mmproj:
//   Gemma 3   Gemma3ImageProcessor: resize to size x size bilinear, then the
//             fused rescale-normalize (x - 255·mean) / (255·std); optionally
//             pan-and-scan (the full image, then its crops, each resized).
//   Gemma 3n  SiglipImageProcessor as configured for it: size x size
//             bilinear, x / 255, no normalization (PreprocessFixed).
//   Gemma 4   Gemma4ImageProcessor (and the unified model's): the aspect-kept
//             size for a soft-token budget, bicubic, x / 255. Its 2x - 1 is
//             the encoder's (Gemma4VisionPatchEmbedder), not done here.
// The resize runs on the uint8 image (image_resize.h), the float math in
// float32 in HF's order, so the tensors equal HF's bit for bit.
// Internal to vision/.
#pragma once

#include <vector>

#include "kvshare/vision/image.h"
#include "kvshare/vision/vision_encoder.h"
#include "vision/image_resize.h"

namespace kvshare::detail {

// A fixed square input (Gemma 3, Gemma 3n).
struct FixedResizeParams {
  int size = 896;  // output side in pixels (the mmproj's clip.vision.image_size)
  ResizeFilter filter = ResizeFilter::kBilinear;
  // true: (x - 255·mean[c]) / (255·std[c]) in float32, as HF fuses rescale
  // and normalize; false: x · float(1/255).
  bool normalize = true;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
};

// HF's pan-and-scan settings (Gemma 3; the values of Google's released
// processor config, where the feature itself is off).
struct PanAndScanParams {
  int min_crop_size = 256;
  int max_num_crops = 4;
  double min_ratio_to_activate = 1.2;
};

// A crop of an image: rows [y, y + height), columns [x, x + width).
struct CropRect {
  int x = 0, y = 0, width = 0, height = 0;
};

// Pan-and-scan's crops of a height x width image, in HF's order (row-major
// over the crop grid); empty when the aspect ratio is below the threshold or
// a crop would be smaller than min_crop_size. The last crop along the long
// side may extend past the image: it is cut there, as a tensor slice is.
std::vector<CropRect> PanAndScanCrops(int height, int width, const PanAndScanParams& params);

// The image cut to `rect` (clipped to the image). Throws kvshare::Error on
// an empty result.
Image CropImage(const Image& image, const CropRect& rect);

// One image resized to params.size² and converted (Gemma 3 without
// pan-and-scan, Gemma 3n). Throws kvshare::Error on an empty image or a
// size below 1.
PixelTensor PreprocessFixed(const Image& image, const FixedResizeParams& params);

// Gemma 3: the full image, then (with `pan_and_scan`, when it applies) its
// crops, each through PreprocessFixed.
std::vector<PixelTensor> PreprocessGemma3(const Image& image, const FixedResizeParams& params,
                                          const PanAndScanParams* pan_and_scan);

// Gemma 4's target size {height, width} (HF get_aspect_ratio_preserving_size):
// f = sqrt(budget·pool²·patch² / (h·w)), each side floor(f·side / (pool·patch))
// multiples of pool·patch; a side that rounds to 0 becomes pool·patch and the
// other min(floor(long/short), budget) such blocks. Throws kvshare::Error on
// a size below 1, a budget outside {70, 140, 280, 560, 1120}, or when both
// sides round to 0.
struct TargetSize {
  int height = 0;
  int width = 0;
};
TargetSize Gemma4TargetSize(int height, int width, int max_soft_tokens, int patch = 16, int pool = 3);

// Gemma 4 / unified: resized (bicubic, up or down, no padding) to
// Gemma4TargetSize, then x · float(1/255); values in [0, 1]. Soft tokens:
// (height / (patch·pool)) · (width / (patch·pool)).
PixelTensor PreprocessGemma4(const Image& image, int max_soft_tokens, int patch = 16, int pool = 3);

}  // namespace kvshare::detail
