// The families' HF image processors (preprocess.h).
#include "vision/preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kvshare/common/error.h"

namespace kvshare::detail {
namespace {

void CheckImage(const Image& image, const char* who) {
  if (image.width < 1 || image.height < 1 || image.rgb.size() != std::size_t(image.width) * image.height * 3) {
    throw Error(std::string(who) + ": the image is empty or its pixel buffer does not match its " +
                std::to_string(image.width) + "x" + std::to_string(image.height) + " size");
  }
}

// HWC uint8 -> CHW float32 through `convert(channel, value)`.
template <typename Convert>
PixelTensor ToPixels(const Image& image, Convert convert) {
  PixelTensor out{image.height, image.width, {}};
  const std::size_t plane = std::size_t(image.height) * image.width;
  out.chw.resize(plane * 3);
  for (std::size_t i = 0; i < plane; ++i) {
    for (int c = 0; c < 3; ++c) out.chw[c * plane + i] = convert(c, image.rgb[i * 3 + c]);
  }
  return out;
}

// HF's rescale: the uint8 tensor times the Python float 1/255, computed in
// float32 (the scalar rounded to float first).
PixelTensor Rescale(const Image& image) {
  const float factor = static_cast<float>(1.0 / 255.0);
  return ToPixels(image, [factor](int, std::uint8_t v) { return static_cast<float>(v) * factor; });
}

}  // namespace

std::vector<CropRect> PanAndScanCrops(int height, int width, const PanAndScanParams& params) {
  if (height < 1 || width < 1) return {};
  const bool landscape = width >= height;
  const int long_side = landscape ? width : height;
  const int short_side = landscape ? height : width;
  const double ratio = static_cast<double>(long_side) / short_side;
  if (ratio < params.min_ratio_to_activate) return {};
  // Crops close to the aspect ratio (half rounded up), at least min_crop_size
  // long, 2 to max_num_crops of them.
  int n = static_cast<int>(std::floor(ratio + 0.5));
  n = std::min(long_side / std::max(params.min_crop_size, 1), n);
  n = std::min(params.max_num_crops, std::max(2, n));
  const int crop_long = (long_side + n - 1) / n;
  if (std::min(crop_long, short_side) < params.min_crop_size) return {};
  std::vector<CropRect> crops;
  for (int i = 0; i < n; ++i) {
    const int at = i * crop_long;
    const int len = std::min(crop_long, long_side - at);
    if (len <= 0) break;
    crops.push_back(landscape ? CropRect{at, 0, len, height} : CropRect{0, at, width, len});
  }
  return crops;
}

Image CropImage(const Image& image, const CropRect& rect) {
  CheckImage(image, "image crop");
  const int x0 = std::clamp(rect.x, 0, image.width), y0 = std::clamp(rect.y, 0, image.height);
  const int x1 = std::clamp(rect.x + rect.width, x0, image.width);
  const int y1 = std::clamp(rect.y + rect.height, y0, image.height);
  if (x1 == x0 || y1 == y0) throw Error("image crop: the rectangle lies outside the image");
  Image out{x1 - x0, y1 - y0, {}};
  out.rgb.reserve(std::size_t(out.width) * out.height * 3);
  for (int y = y0; y < y1; ++y) {
    const auto* row = &image.rgb[(std::size_t(y) * image.width + x0) * 3];
    out.rgb.insert(out.rgb.end(), row, row + std::size_t(out.width) * 3);
  }
  return out;
}

PixelTensor PreprocessFixed(const Image& image, const FixedResizeParams& params) {
  CheckImage(image, "image preprocessing");
  if (params.size < 1)
    throw Error("image preprocessing: the input size must be at least 1, got " + std::to_string(params.size));
  const Image resized = ResizeImage(image, params.size, params.size, params.filter);
  if (!params.normalize) return Rescale(resized);
  // HF fuses rescale and normalize: mean and std become float32 tensors
  // times 1/rescale_factor (255.0), then (x - mean) / std in float32.
  float mean[3], std[3];
  for (int c = 0; c < 3; ++c) {
    mean[c] = params.mean[c] * 255.0f;
    std[c] = params.std[c] * 255.0f;
    if (!(std[c] > 0.0f) && !(std[c] < 0.0f)) {
      throw Error("image preprocessing: image_std[" + std::to_string(c) + "] is 0");
    }
  }
  return ToPixels(resized, [&](int c, std::uint8_t v) { return (static_cast<float>(v) - mean[c]) / std[c]; });
}

std::vector<PixelTensor> PreprocessGemma3(const Image& image, const FixedResizeParams& params,
                                          const PanAndScanParams* pan_and_scan) {
  std::vector<PixelTensor> out;
  out.push_back(PreprocessFixed(image, params));
  if (pan_and_scan != nullptr) {
    for (const CropRect& rect : PanAndScanCrops(image.height, image.width, *pan_and_scan)) {
      out.push_back(PreprocessFixed(CropImage(image, rect), params));
    }
  }
  return out;
}

TargetSize Gemma4TargetSize(int height, int width, int max_soft_tokens, int patch, int pool) {
  if (height < 1 || width < 1) {
    throw Error("image preprocessing: image size must be at least 1x1, got " + std::to_string(width) + "x" +
                std::to_string(height));
  }
  constexpr int kBudgets[] = {70, 140, 280, 560, 1120};
  if (std::find(std::begin(kBudgets), std::end(kBudgets), max_soft_tokens) == std::end(kBudgets)) {
    throw Error("image soft-token budget must be one of 70, 140, 280, 560, 1120, got " +
                std::to_string(max_soft_tokens));
  }
  if (patch < 1 || pool < 1) {
    throw Error("image preprocessing: patch and pool must be at least 1, got " + std::to_string(patch) + " and " +
                std::to_string(pool));
  }
  // Double arithmetic in HF's order (Python floats).
  const std::int64_t max_patches = std::int64_t{max_soft_tokens} * pool * pool;
  const std::int64_t target_px = max_patches * patch * patch;
  const double factor = std::sqrt(static_cast<double>(target_px) / (static_cast<double>(height) * width));
  const int side = patch * pool;
  int h = static_cast<int>(std::floor(factor * height / side)) * side;
  int w = static_cast<int>(std::floor(factor * width / side)) * side;
  if (h == 0 && w == 0) {
    throw Error("image preprocessing: a " + std::to_string(width) + "x" + std::to_string(height) +
                " image resizes to 0x0 at a budget of " + std::to_string(max_soft_tokens) + " tokens");
  }
  const int max_side = static_cast<int>(max_patches / (pool * pool)) * side;
  if (h == 0) {
    h = side;
    w = std::min(static_cast<int>(std::floor(static_cast<double>(width) / height)) * side, max_side);
  } else if (w == 0) {
    w = side;
    h = std::min(static_cast<int>(std::floor(static_cast<double>(height) / width)) * side, max_side);
  }
  return {h, w};
}

PixelTensor PreprocessGemma4(const Image& image, int max_soft_tokens, int patch, int pool) {
  CheckImage(image, "image preprocessing");
  const TargetSize size = Gemma4TargetSize(image.height, image.width, max_soft_tokens, patch, pool);
  return Rescale(ResizeImage(image, size.height, size.width, ResizeFilter::kBicubic));
}

}  // namespace kvshare::detail
