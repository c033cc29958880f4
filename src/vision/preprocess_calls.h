// The one call from the encoders to image preprocessing: the pixel tensors
// the model's HF processor would hand the encoder `config` describes.
// preprocess_image.cc: the HF-exact processors of preprocess.h.
// Internal to src/vision.
#pragma once

#include <vector>

#include "kvshare/vision/image.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare::detail {

// Gemma 3 / 3n (image_size > 0): the image resized to image_size^2 (aspect
// not kept; Gemma 3 with options.pan_and_scan: then its crops). Gemma 4
// (image_size == 0): resized, aspect kept, to the largest multiple of
// cell = patch_size * pool per side within options.max_soft_tokens cells.
// Values rescaled by 1/255 and normalized by config.image_mean / image_std.
// Throws kvshare::Error on an empty image, and for Gemma 4 on a budget other
// than 70, 140, 280, 560, 1120.
std::vector<PixelTensor> PreprocessImage(const Image& image, const VisionConfig& config,
                                         const PreprocessOptions& options);

}  // namespace kvshare::detail
