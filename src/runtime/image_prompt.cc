// Images in a prompt (kvshare/runtime/image_prompt.h).
#include "kvshare/runtime/image_prompt.h"

#include <string>

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare {

std::uint64_t ImageKey(std::span<const std::uint8_t> bytes, const PreprocessOptions& options) {
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (std::uint8_t b : bytes) {
    h ^= b;
    h *= 1099511628211ull;
  }
  mix(bytes.size());
  mix(static_cast<std::uint64_t>(options.max_soft_tokens));
  mix(options.pan_and_scan ? 1 : 0);
  return h;
}

PromptImage EncodePromptImage(const VisionEncoder& encoder, const Image& image, std::uint64_t key,
                              const PreprocessOptions& options, ThreadPool* pool) {
  PromptImage out;
  out.key = key;
  for (const PixelTensor& p : encoder.Preprocess(image, options)) {
    const std::vector<float> rows = encoder.Encode(p, pool);
    out.tokens.push_back(encoder.TokensFor(p));
    out.rows.insert(out.rows.end(), rows.begin(), rows.end());
  }
  return out;
}

namespace {
std::int32_t Need(const Tokenizer& tok, ProjectorType projector, const char* text) {
  if (auto id = tok.TokenId(text)) return *id;
  throw Error(detail::Str("the mmproj's encoder (", ProjectorTypeName(projector), ") writes images between \"", text,
                          "\" markers, but the model's vocabulary has no such token: the mmproj does not belong to "
                          "this model"));
}
}  // namespace

ImageSplicer::ImageSplicer(const Tokenizer& tokenizer, ProjectorType projector)
    : tokenizer_(&tokenizer), projector_(projector) {
  const bool gemma4 = projector == ProjectorType::kGemma4V || projector == ProjectorType::kGemma4UV;
  begin_ = Need(tokenizer, projector, gemma4 ? "<|image>" : "<start_of_image>");
  end_ = Need(tokenizer, projector, gemma4 ? "<image|>" : "<end_of_image>");
  // The soft token's id is a placeholder (its row is replaced); a vocabulary
  // without it gets the end marker's id there.
  soft_ = tokenizer.TokenId(gemma4 ? "<|image|>" : "<image_soft_token>").value_or(end_);
  if (!gemma4) padding_ = "\n\n";
}

std::vector<MediaInsert> ImageSplicer::Inserts(std::span<const std::size_t> slots,
                                               std::span<const PromptImage> images) const {
  if (slots.size() != images.size()) {
    throw Error(
        detail::Str("the prompt has ", slots.size(), " image place(s) but ", images.size(), " image(s) were given"));
  }
  const auto text = [&](std::vector<std::int32_t>& out, const std::string& s) {
    const auto t = tokenizer_->Encode(s, {.add_bos = false, .add_eos = false, .parse_special = false});
    out.insert(out.end(), t.begin(), t.end());
  };
  std::vector<MediaInsert> out;
  std::size_t from = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    if (slots[i] < from) throw Error(detail::Str("image slot ", slots[i], " is out of order"));
    from = slots[i];
    const PromptImage& im = images[i];
    if (im.tokens.empty()) throw Error(detail::Str("image ", i, " has no soft tokens"));
    MediaInsert m{.slot = slots[i]};
    std::int64_t n_soft = 0;
    for (int t : im.tokens) n_soft += t;
    const std::int64_t width = static_cast<std::int64_t>(im.rows.size()) / n_soft;  // n_embd_text
    const float* rows = im.rows.data();
    for (std::size_t c = 0; c < im.tokens.size(); ++c) {
      if (im.tokens.size() > 1) {
        // Pan-and-scan (HF Gemma3Processor): the crops' padding is written
        // here; the chat template wrote the padding around the whole image.
        text(m.tokens, c == 0   ? "Here is the original image " + padding_
                       : c == 1 ? padding_ + " and here are some crops to help you see better " + padding_
                                : padding_ + " " + padding_);
      }
      m.tokens.push_back(begin_);
      m.spans.push_back(EmbeddingSpan{.begin = static_cast<std::int64_t>(m.tokens.size()),
                                      .count = im.tokens[c],
                                      .rows = rows,
                                      .bidirectional = true});
      m.keys.push_back(im.key ^ (0x9e3779b97f4a7c15ull * (c + 1)));
      m.tokens.insert(m.tokens.end(), static_cast<std::size_t>(im.tokens[c]), soft_);
      m.tokens.push_back(end_);
      rows += im.tokens[c] * width;
    }
    out.push_back(std::move(m));
  }
  return out;
}

ImagePrompt ImageSplicer::Splice(std::span<const std::int32_t> ids, std::span<const std::size_t> slots,
                                 std::span<const PromptImage> images) const {
  return SpliceMedia(ids, Inserts(slots, images));
}

}  // namespace kvshare
