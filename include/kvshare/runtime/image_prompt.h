// kvshare/runtime/image_prompt.h — images in a prompt: encoded by the mmproj's
// encoder (kvshare/vision/vision_encoder.h) and spliced where the chat template
// put them (ChatTemplate::Encode's image_slots), in each family's markers as
// its HF processor writes them:
//   gemma3    "\n\n" <start_of_image> N x <image_soft_token> <end_of_image> "\n\n"
//             (the "\n\n" is padding_text(): ChatTemplate::Encode writes it
//             with the neighbouring text, so it tokenizes as in HF's whole
//             prompt string; Splice writes the markers and soft tokens)
//             (pan-and-scan: "Here is the original image " seq " and here are
//             some crops to help you see better " seq " " seq ...)
//   gemma3nv  the same markers, no pan-and-scan
//   gemma4v,  <|image> N x <|image|> <image|>
//   gemma4uv
// The soft tokens' rows go to the model as EmbeddingSpans (model.h), one per
// pixel tensor, bidirectional (the model applies that where its variant does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvshare/model/model.h"
#include "kvshare/runtime/media_prompt.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare {

class ThreadPool;

// One image, encoded.
struct PromptImage {
  std::vector<float> rows;  // [sum of tokens, n_embd_text]: every pixel tensor's soft tokens, in order
  std::vector<int> tokens;  // soft tokens per pixel tensor (one; Gemma 3 pan-and-scan: the image, then its crops)
  std::uint64_t key = 0;    // identity for the prompt cache (ImageKey)
};

// A 64-bit FNV-1a digest of an image file's bytes and the preprocessing
// options: equal keys mean the same soft tokens.
std::uint64_t ImageKey(std::span<const std::uint8_t> bytes, const PreprocessOptions& options);

// Preprocesses and encodes `image` (VisionEncoder::Preprocess, Encode).
// Throws what they throw.
PromptImage EncodePromptImage(const VisionEncoder& encoder, const Image& image, std::uint64_t key,
                              const PreprocessOptions& options, ThreadPool* pool);

// A prompt with its images (and audio clips: kvshare/runtime/media_prompt.h);
// one span per pixel tensor, keyed by the image key mixed with the crop index.
using ImagePrompt = MediaPrompt;

class ImageSplicer {
 public:
  // Looks up the markers of `projector`'s family in the vocabulary. Throws
  // kvshare::Error naming the first one it lacks (the mmproj does not belong
  // to this text model).
  ImageSplicer(const Tokenizer& tokenizer, ProjectorType projector);

  // `ids` with image i's markers and soft tokens inserted at slots[i]
  // (non-decreasing indices into ids, one per image). Throws kvshare::Error
  // when slots and images differ in number or a slot is out of order or past
  // the end, or an image has no tokens.
  ImagePrompt Splice(std::span<const std::int32_t> ids, std::span<const std::size_t> slots,
                     std::span<const PromptImage> images) const;
  // Splice's pieces, for SpliceMedia with audio clips beside the images.
  // Throws as Splice does.
  std::vector<MediaInsert> Inserts(std::span<const std::size_t> slots, std::span<const PromptImage> images) const;
  // Text around each image (ChatTemplateOptions::image_padding_text):
  // "\n\n" for Gemma 3 / 3n, "" for Gemma 4.
  const std::string& padding_text() const { return padding_; }

 private:
  const Tokenizer* tokenizer_;
  ProjectorType projector_;
  std::int32_t begin_ = -1, soft_ = -1, end_ = -1;
  std::string padding_;
};

}  // namespace kvshare
