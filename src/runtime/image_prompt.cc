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

ImageSplicer::ImageSplicer(const Tokenizer& tokenizer, const VisionEncoder& encoder, ThreadPool* pool)
    : ImageSplicer(tokenizer, encoder.config().projector) {
  hard_rows_ = encoder.HardTokenRows(pool);
  width_ = encoder.config().n_embd_text;
  if (hard_rows_.empty() || width_ <= 0) return;
  hard_vocab_ = static_cast<std::int32_t>(static_cast<std::int64_t>(hard_rows_.size()) / width_);
  const GgufTensor* audio = encoder.gguf().FindTensor("mm.a.embedding.weight");
  const std::int64_t n_audio = audio != nullptr && audio->n_dims == 2 ? audio->ne[1] : hard_vocab_;
  hard_offset_ = static_cast<std::int32_t>(tokenizer.vocab_size() - n_audio - hard_vocab_);
  if (end_ < hard_offset_ || end_ >= hard_offset_ + hard_vocab_) {
    throw Error(detail::Str("the mmproj's vision vocabulary (", hard_vocab_, " rows of mm.embedding) covers ids [",
                            hard_offset_, ", ", hard_offset_ + hard_vocab_, ") of this ", tokenizer.vocab_size(),
                            "-token vocabulary, but <end_of_image> is id ", end_,
                            ": the mmproj does not belong to this model"));
  }
}

void ImageSplicer::ReplaceTrailingPadding(std::vector<std::int32_t>& tokens, std::size_t floor,
                                          const std::string& lead) const {
  std::size_t from = tokens.size();
  while (from > floor && !tokenizer_->TokenBytes(tokens[from - 1]).empty()) --from;
  std::string run;
  for (std::size_t i = from; i < tokens.size(); ++i) run += tokenizer_->TokenBytes(tokens[i]);
  if (!padding_.empty() && run.ends_with(padding_)) run.resize(run.size() - padding_.size());
  run += lead;
  tokens.resize(from);
  const auto t = tokenizer_->Encode(run, {.add_bos = false, .add_eos = false, .parse_special = false});
  tokens.insert(tokens.end(), t.begin(), t.end());
}

ImagePrompt ImageSplicer::Splice(std::span<const std::int32_t> ids, std::span<const std::size_t> slots,
                                 std::span<const PromptImage> images) const {
  if (slots.size() != images.size()) {
    throw Error(
        detail::Str("the prompt has ", slots.size(), " image place(s) but ", images.size(), " image(s) were given"));
  }
  const auto text = [&](std::vector<std::int32_t>& out, const char* s) {
    const auto t = tokenizer_->Encode(s, {.add_bos = false, .add_eos = false, .parse_special = false});
    out.insert(out.end(), t.begin(), t.end());
  };
  ImagePrompt p;
  std::size_t from = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    if (slots[i] < from || slots[i] > ids.size()) {
      throw Error(
          detail::Str("image slot ", slots[i], " is out of order or past the prompt's ", ids.size(), " tokens"));
    }
    const PromptImage& im = images[i];
    if (im.tokens.empty()) throw Error(detail::Str("image ", i, " has no soft tokens"));
    const std::size_t floor = p.tokens.size();
    p.tokens.insert(p.tokens.end(), ids.begin() + static_cast<std::ptrdiff_t>(from),
                    ids.begin() + static_cast<std::ptrdiff_t>(slots[i]));
    from = slots[i];
    std::int64_t n_soft = 0;
    for (int t : im.tokens) n_soft += t;
    const std::int64_t width = static_cast<std::int64_t>(im.rows.size()) / n_soft;  // n_embd_text
    const float* rows = im.rows.data();
    for (std::size_t c = 0; c < im.tokens.size(); ++c) {
      if (im.tokens.size() > 1) {
        // Pan-and-scan (HF Gemma3Processor): "Here is the original image "
        // seq " and here are some crops to help you see better " seq " " seq
        // ..., each seq in padding_text(). The chat template wrote the padding
        // around the whole image: the lead text replaces the one before it.
        if (c == 0) {
          ReplaceTrailingPadding(p.tokens, floor, "Here is the original image " + padding_);
        } else {
          text(p.tokens, (c == 1 ? padding_ + " and here are some crops to help you see better " + padding_
                                 : padding_ + " " + padding_)
                             .c_str());
        }
      }
      p.tokens.push_back(begin_);
      p.embeddings.push_back(EmbeddingSpan{.begin = static_cast<std::int64_t>(p.tokens.size()),
                                           .count = im.tokens[c],
                                           .rows = rows,
                                           .bidirectional = true});
      p.keys.push_back(im.key ^ (0x9e3779b97f4a7c15ull * (c + 1)));
      p.tokens.insert(p.tokens.end(), static_cast<std::size_t>(im.tokens[c]), soft_);
      p.tokens.push_back(end_);
      rows += im.tokens[c] * width;
    }
  }
  p.tokens.insert(p.tokens.end(), ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
  if (hard_vocab_ > 0) AddHardSpans(p);
  return p;
}

void ImageSplicer::AddHardSpans(ImagePrompt& p) const {
  // HF Gemma3nModel.forward embeds every id of the vision vocabulary outside
  // the soft tokens (the end marker) through the multimodal embedder.
  std::vector<EmbeddingSpan> spans;
  std::vector<std::uint64_t> keys;
  std::size_t k = 0;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(p.tokens.size()); ++i) {
    if (k < p.embeddings.size() && p.embeddings[k].begin == i) {
      spans.push_back(p.embeddings[k]);
      keys.push_back(p.keys[k]);
      i += p.embeddings[k].count - 1;
      ++k;
      continue;
    }
    const std::int32_t id = p.tokens[static_cast<std::size_t>(i)];
    if (id < hard_offset_ || id >= hard_offset_ + hard_vocab_) continue;
    spans.push_back(EmbeddingSpan{.begin = i,
                                  .count = 1,
                                  .rows = hard_rows_.data() + static_cast<std::ptrdiff_t>(id - hard_offset_) * width_,
                                  .bidirectional = false});
    keys.push_back(0x6a09e667f3bcc908ull ^ static_cast<std::uint64_t>(id));
  }
  p.embeddings = std::move(spans);
  p.keys = std::move(keys);
}

std::vector<MediaInsert> ImageSplicer::Inserts(std::span<const std::size_t> slots,
                                               std::span<const PromptImage> images) const {
  if (slots.size() != images.size()) {
    throw Error(
        detail::Str("the prompt has ", slots.size(), " image place(s) but ", images.size(), " image(s) were given"));
  }
  std::vector<MediaInsert> out;
  std::size_t from = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    if (slots[i] < from) throw Error(detail::Str("image slot ", slots[i], " is out of order"));
    from = slots[i];
    const PromptImage& im = images[i];
    if (im.tokens.empty()) throw Error(detail::Str("image ", i, " has no soft tokens"));
    if (im.tokens.size() != 1) {
      throw Error("a pan-and-scan image (several crops) cannot share a prompt with audio clips");
    }
    MediaInsert m{.slot = slots[i]};
    m.tokens.push_back(begin_);
    m.spans.push_back(EmbeddingSpan{.begin = 1, .count = im.tokens[0], .rows = im.rows.data(), .bidirectional = true});
    m.keys.push_back(im.key ^ 0x9e3779b97f4a7c15ull);  // Splice's key of crop 0
    m.tokens.insert(m.tokens.end(), static_cast<std::size_t>(im.tokens[0]), soft_);
    m.tokens.push_back(end_);
    out.push_back(std::move(m));
  }
  return out;
}

ImagePrompt ImageSplicer::SpliceWith(std::span<const std::int32_t> ids, std::span<const std::size_t> slots,
                                     std::span<const PromptImage> images, std::vector<MediaInsert> extra) const {
  if (extra.empty()) return Splice(ids, slots, images);
  std::vector<MediaInsert> inserts = Inserts(slots, images);
  for (MediaInsert& m : extra) inserts.push_back(std::move(m));
  ImagePrompt p = SpliceMedia(ids, inserts);
  if (hard_vocab_ > 0) AddHardSpans(p);
  return p;
}

}  // namespace kvshare
