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
//   gemma3nv  the same markers, no pan-and-scan; ids of the vision vocabulary
//             (<end_of_image>) get the mmproj's hard-embedding row
//             (VisionEncoder::HardTokenRows), as HF Gemma3nModel embeds them
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

// A prompt with its images (and audio clips: kvshare/runtime/media_prompt.h):
// token ids (an image's soft tokens hold the family's soft-token id, a
// placeholder) and the sorted spans whose rows replace them: one per pixel
// tensor (bidirectional), and for Gemma 3n one per vision-vocabulary id (its
// hard-embedding row, count 1, causal); keys: each span's image key mixed with
// the crop index (a hard-embedding span: a constant of its id).
using ImagePrompt = MediaPrompt;

class ImageSplicer {
 public:
  // Looks up the markers of `projector`'s family in the vocabulary. Throws
  // kvshare::Error naming the first one it lacks (the mmproj does not belong
  // to this text model). This form leaves Gemma 3n's end marker to the model
  // (its hard-token rows when installed, Model::SetHardTokenRows; else the
  // text table, llama.cpp's way).
  ImageSplicer(const Tokenizer& tokenizer, ProjectorType projector);
  // The same for `encoder`'s family, and for Gemma 3n the hard-embedding rows
  // of the vision vocabulary: HF's ids [offset, offset + V), V = the rows of
  // mm.embedding, offset = vocab_size - A - V with A = the rows of
  // mm.a.embedding (V when the file has no audio part; HF: 262144 = 262400 -
  // 128 - 128). Throws kvshare::Error when <end_of_image> lies outside that
  // range (the mmproj does not belong to this vocabulary).
  ImageSplicer(const Tokenizer& tokenizer, const VisionEncoder& encoder, ThreadPool* pool = nullptr);

  // `ids` with image i's markers and soft tokens inserted at slots[i]
  // (non-decreasing indices into ids, one per image). With pan-and-scan the
  // text before an image ends in "Here is the original image " instead of
  // padding_text(): the text run before the slot is re-tokenized with it, as
  // HF tokenizes its whole prompt string. Throws kvshare::Error when slots
  // and images differ in number or a slot is out of order or past the end,
  // or an image has no tokens. The spans point into `images` and this
  // splicer's hard-embedding rows: both must outlive the result.
  ImagePrompt Splice(std::span<const std::int32_t> ids, std::span<const std::size_t> slots,
                     std::span<const PromptImage> images) const;
  // Gemma 3n: the first id of the vision vocabulary and its size (0: none).
  std::int32_t hard_offset() const { return hard_offset_; }
  std::int32_t hard_vocab() const { return hard_vocab_; }
  // Images beside other media (audio clips' inserts, `extra`): the images'
  // inserts and `extra` spliced by SpliceMedia, then Gemma 3n's hard rows.
  // Throws as Splice does, and for a pan-and-scan image (several crops) when
  // `extra` is not empty (only Gemma 3 pans and scans, and it takes no audio).
  ImagePrompt SpliceWith(std::span<const std::int32_t> ids, std::span<const std::size_t> slots,
                         std::span<const PromptImage> images, std::vector<MediaInsert> extra) const;
  // Text around each image (ChatTemplateOptions::image_padding_text):
  // "\n\n" for Gemma 3 / 3n, "" for Gemma 4.
  const std::string& padding_text() const { return padding_; }

 private:
  // SpliceWith's image inserts (one crop per image).
  std::vector<MediaInsert> Inserts(std::span<const std::size_t> slots, std::span<const PromptImage> images) const;

  const Tokenizer* tokenizer_;
  ProjectorType projector_;
  // Gemma 3n: a span of one hard-embedding row at every vision-vocabulary id
  // outside the image spans.
  void AddHardSpans(ImagePrompt& p) const;
  // The text run at the end of `tokens` (back to `floor` or a token without
  // text) re-tokenized with its trailing padding_text() replaced by `lead`.
  void ReplaceTrailingPadding(std::vector<std::int32_t>& tokens, std::size_t floor, const std::string& lead) const;

  std::int32_t begin_ = -1, soft_ = -1, end_ = -1;
  std::string padding_;
  std::int32_t hard_offset_ = 0, hard_vocab_ = 0;
  std::vector<float> hard_rows_;  // [hard_vocab_, n_embd_text]
  std::int64_t width_ = 0;        // n_embd_text
};

}  // namespace kvshare
