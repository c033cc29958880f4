// The image flags of `kvshare generate` (--mmproj, --image, ...) and the
// encoding of the images they name (kvshare/runtime/image_prompt.h).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvshare/model/model.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/vision/image.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare {
class ThreadPool;
}

namespace kvshare::cli {

struct ImageFlags {
  std::string mmproj;               // --mmproj PATH
  std::vector<std::string> images;  // --image PATH (repeatable, in order)
  int max_soft_tokens = 280;        // --image-max-soft-tokens (Gemma 4)
  bool pan_and_scan = false;        // --pan-and-scan (Gemma 3)
  std::int64_t max_pixels = ImageLimits{}.max_pixels;  // --image-max-pixels
  std::string image_attention;      // --image-attention causal|all|sliding; empty: the model's
  std::string vision_precision = "auto";  // --vision-precision auto|f32|bf16
};

void AddImageFlags(CLI::App& cmd, ImageFlags& flags);
// --vision-precision (also on `kvshare bench-image`).
void AddVisionPrecisionFlag(CLI::App& cmd, std::string& precision);

// The encoder and the encoded images of `flags` (none, and no encoder, without
// --image).
struct EncodedImages {
  std::unique_ptr<VisionEncoder> encoder;
  std::vector<PromptImage> images;               // tokens and keys; rows once encoded
  std::vector<std::vector<PixelTensor>> pixels;  // per image, until EncodeImages
  std::vector<std::string> paths;                // per image: the --image file, for EncodeImages' errors
  double seconds = 0;                            // preprocessing and encoding, all images
};

// Loads --mmproj (checking it fits `model`), decodes and preprocesses every
// --image: images[i] has its tokens and key but no rows yet, so the prompt's
// length is known before any encoding. Throws kvshare::Error naming the flag
// and file at fault: --image without --mmproj, an unreadable or bad image
// (over --image-max-pixels included), an mmproj of another model.
EncodedImages PrepareImageFlags(const ImageFlags& flags, const Model& model);
// Encodes the prepared pixel tensors into images[i].rows. Throws what the
// encoder throws, naming the --image file.
void EncodeImages(EncodedImages& images, ThreadPool* pool);
// PrepareImageFlags, then EncodeImages.
EncodedImages EncodeImageFlags(const ImageFlags& flags, const Model& model, ThreadPool* pool);

// --image-attention as ModelStateOptions::image_attention (nullopt: the model's).
std::optional<ImageAttention> ImageAttentionFlag(const ImageFlags& flags);

}  // namespace kvshare::cli
