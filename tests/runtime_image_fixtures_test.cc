// Images end to end against HF transformers 5.23 on the tiny multimodal
// models of tests/fixtures/vision/ (README there: llama.cpp's converter wrote
// the text GGUF and the mmproj; HF computed the references):
// - the encoder's soft tokens from HF's pixel tensors: f32 within 1e-5 of HF;
// - the prompt's token ids from a chat message with images (chat template +
//   ImageSplicer) equal HF's processor's;
// - the logits of every prompt position and of 16 greedy steps with the
//   images spliced in: within 1e-5 relative, argmax equal (the unified model
//   under HF's generate-time mask rule only; see PromptAndLogitsMatchHf);
// - Gemma 3n (gemma3n.*: tests/tools/vision_gemma3n_fixture.py) with its end
//   marker through the mmproj's hard embedding, as HF embeds it;
// - Gemma 3's pan-and-scan prompt ids against HF's processor.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "common_source_path.h"
#include "common_test_util.h"
#include "kvshare/gguf/vocab.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/runtime/speculative.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "kvshare/vision/vision_encoder.h"
#include "model_test_util.h"

namespace kvshare {
namespace {

using testing::MaxRelDiff;

constexpr double kTol = 1e-5;

std::string Dir() { return testing::SourcePath("tests/fixtures/vision/"); }

template <typename T>
std::vector<T> ReadRaw(const nlohmann::json& ref) {
  std::ifstream in(Dir() + ref["file"].get<std::string>(), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> out(bytes.size() / sizeof(T));
  std::copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(out.size() * sizeof(T)),
            reinterpret_cast<char*>(out.data()));
  return out;
}

// HF's float32 pixel tensor from the stored levels (README: each step one
// float32 operation).
PixelTensor Pixels(const nlohmann::json& px, bool gemma3) {
  const std::vector<std::uint8_t> u = ReadRaw<std::uint8_t>(px);
  PixelTensor p{px["shape"][1].get<int>(), px["shape"][2].get<int>(), {}};
  for (std::uint8_t v : u) {
    const float x = static_cast<float>(v) / 255.0f;
    p.chw.push_back(gemma3 ? (x - 0.5f) / 0.5f : x);
  }
  return p;
}

std::int32_t Argmax(std::span<const float> v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

class ImageFixtures : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::ifstream in(Dir() + GetParam() + ".hf.json");
    ASSERT_TRUE(in) << "missing fixture " << GetParam();
    j_ = nlohmann::json::parse(in);
    gemma3_ = std::string(GetParam()) == "gemma3";
    gemma3n_ = std::string(GetParam()) == "gemma3n";
    model_ = Model::Load(Dir() + GetParam() + ".f32.gguf");
    encoder_ = VisionEncoder::Load(Dir() + GetParam() + ".mmproj.f32.gguf");
    CheckMmprojFitsText(encoder_->config(), model_->config().n_embd);
    for (const auto& e : j_["encoder"]) features_.push_back(encoder_->Encode(Pixels(e["pixels"], gemma3_), nullptr));
  }
  // The mask rule HF applied (the unified model's forward path: both layer kinds).
  ImageAttention Mode() const {
    if (gemma3_) return ImageAttention::kAllLayers;
    if (gemma3n_) return ImageAttention::kCausal;
    const std::string rule = j_["bidirectional_images"].get<std::string>();
    if (rule.rfind("none", 0) == 0) return ImageAttention::kCausal;
    if (rule.rfind("sliding", 0) == 0) return ImageAttention::kSlidingLayers;
    return ImageAttention::kAllLayers;
  }
  void ExpectLogitsMatch(const nlohmann::json& ref, const std::vector<std::int32_t>& ids,
                         const std::vector<EmbeddingSpan>& embeddings, std::optional<ImageAttention> mode);
  nlohmann::json j_;
  bool gemma3_ = false;
  bool gemma3n_ = false;  // Gemma 3's markers and template, Gemma 4's pixel values
  std::unique_ptr<Model> model_;
  std::unique_ptr<VisionEncoder> encoder_;
  std::vector<std::vector<float>> features_;
};

TEST_P(ImageFixtures, EncoderMatchesHf) {
  for (std::size_t i = 0; i < features_.size(); ++i) {
    const auto& e = j_["encoder"][i];
    EXPECT_EQ(encoder_->TokensFor(Pixels(e["pixels"], gemma3_)), e["tokens"].get<int>());
    EXPECT_EQ(encoder_->TokensForSize(e["pixels"]["shape"][1].get<int>(), e["pixels"]["shape"][2].get<int>()),
              e["tokens"].get<int>());
    EXPECT_LT(MaxRelDiff(features_[i], ReadRaw<float>(e["features"])), kTol) << "pixel tensor " << i;
  }
}

// The prefill logits of `ids` with the images spliced in, then 16 greedy
// steps, against ref's prefill_logits / tokens / step_logits (nullopt mode:
// the model's own image attention).
void ImageFixtures::ExpectLogitsMatch(const nlohmann::json& ref, const std::vector<std::int32_t>& ids,
                                      const std::vector<EmbeddingSpan>& embeddings,
                                      std::optional<ImageAttention> mode) {
  auto st = model_->NewState({.max_context = 128, .image_attention = mode});
  const auto n = static_cast<std::int64_t>(ids.size());
  const auto logits = model_->Forward(*st, ids, nullptr, {.num_logits = n, .embeddings = embeddings});
  const std::vector<float> pre = ReadRaw<float>(ref["prefill_logits"]);
  EXPECT_LT(MaxRelDiff(std::vector<float>(logits.begin(), logits.end()), pre), kTol);
  const std::vector<float> steps = ReadRaw<float>(ref["step_logits"]);
  const auto tokens = ref["tokens"].get<std::vector<std::int32_t>>();
  const std::size_t V = static_cast<std::size_t>(model_->config().n_vocab);
  std::vector<float> row(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<float> want(steps.begin() + static_cast<std::ptrdiff_t>(i * V),
                                  steps.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
    EXPECT_LT(MaxRelDiff(row, want), kTol) << "step " << i;
    EXPECT_EQ(Argmax(row), tokens[i]) << "step " << i;
    const auto next = model_->Forward(*st, std::span(&tokens[i], 1), nullptr);
    row.assign(next.begin(), next.end());
  }
}

TEST_P(ImageFixtures, PromptAndLogitsMatchHf) {
  const Tokenizer tok(ReadVocab(model_->gguf()));
  const ImageSplicer splicer(tok, *encoder_);
  const bool g3 = gemma3_ || gemma3n_;
  for (const char* name : {"one_image", "two_images"}) {
    SCOPED_TRACE(name);
    const auto& p = j_["prompts"][name];
    const auto want_ids = p["prompt_ids"].get<std::vector<std::int32_t>>();
    std::vector<PromptImage> images;
    for (int i : p["images"].get<std::vector<int>>()) {
      images.push_back(PromptImage{.rows = features_[static_cast<std::size_t>(i)],
                                   .tokens = {j_["encoder"][i]["tokens"].get<int>()},
                                   .key = static_cast<std::uint64_t>(i + 1)});
    }
    // The chat message the fixture's prompt came from: the images, then the text.
    const std::string text = p["text"].get<std::string>();
    const std::string user_text =
        g3 ? text.substr(text.rfind("\n\n") + 2, text.find("<end_of_turn>") - text.rfind("\n\n") - 2)
           : text.substr(text.rfind("<image|>") + 8, text.find("<turn|>") - text.rfind("<image|>") - 8);
    ChatMessage m{"user", user_text};
    m.image_at.assign(images.size(), 0);
    const ChatTemplate tmpl(g3 ? ChatFormat::kGemma : ChatFormat::kGemma4, tok);
    std::vector<std::size_t> slots;
    ChatTemplateOptions co;
    co.image_padding_text = splicer.padding_text();
    const std::vector<std::int32_t> ids = tmpl.Encode(std::span(&m, 1), co, &slots);
    const ImagePrompt ip = splicer.Splice(ids, slots, images);
    if (g3) {
      EXPECT_EQ(ip.tokens, want_ids);
    } else {
      // Gemma 4's HF template ends the generation prompt with an empty thought
      // channel; kvshare's gemma4 format writes the plain one.
      EXPECT_EQ(
          std::vector<std::int32_t>(ip.tokens.begin(), ip.tokens.begin() + std::min(ip.tokens.size(), want_ids.size())),
          std::vector<std::int32_t>(want_ids.begin(), want_ids.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                                             ip.tokens.size(), want_ids.size()))));
    }
    const auto spans = p["image_spans"];
    std::vector<EmbeddingSpan> image_spans, hard_spans;
    for (const EmbeddingSpan& e : ip.embeddings) (e.bidirectional ? image_spans : hard_spans).push_back(e);
    ASSERT_EQ(image_spans.size(), spans.size());
    for (std::size_t k = 0; k < spans.size(); ++k) EXPECT_EQ(image_spans[k].begin, spans[k][0].get<std::int64_t>());
    // Gemma 3n: every <end_of_image> (HF: the vision vocabulary) takes the
    // mmproj's hard-embedding row; the other families have none.
    EXPECT_EQ(hard_spans.size(), gemma3n_ ? spans.size() : 0u);
    for (const EmbeddingSpan& e : hard_spans) {
      EXPECT_EQ(ip.tokens[static_cast<std::size_t>(e.begin)], j_["marker_ids"]["<end_of_image>"].get<std::int32_t>());
    }

    // HF's own ids and spans through the model. The unified fixture's main
    // references follow HF's forward path, whose window does not bound an
    // image's own keys and which opens full layers too (docs/vision.md,
    // "Prompts and masks"); its generate_rule references follow the rule kvshare keeps
    // (the model's own mode), checked below.
    if (std::string(GetParam()) != "gemma4_unified") ExpectLogitsMatch(p, want_ids, ip.embeddings, Mode());
    if (p.contains("generate_rule")) ExpectLogitsMatch(p["generate_rule"], want_ids, ip.embeddings, std::nullopt);
  }
}

// Speculative decoding keeps greedy decoding's tokens with images in the
// prompt (the drafts and verify rounds come after the image's prefill).
TEST_P(ImageFixtures, SpeculationKeepsTheGreedyTokens) {
  const Tokenizer tok(ReadVocab(model_->gguf()));
  const auto& p = j_["prompts"]["two_images"];
  const auto ids = p["prompt_ids"].get<std::vector<std::int32_t>>();
  std::vector<EmbeddingSpan> spans;
  for (std::size_t k = 0; k < p["images"].size(); ++k) {
    const std::size_t i = p["images"][k].get<std::size_t>();
    spans.push_back({.begin = p["image_spans"][k][0].get<std::int64_t>(),
                     .count = p["image_spans"][k][1].get<std::int64_t>(),
                     .rows = features_[i].data(),
                     .bidirectional = true});
  }
  const auto run = [&](Drafter* drafter) {
    Generator gen(*model_, tok, nullptr, {.max_context = 128, .image_attention = Mode()});
    std::vector<std::int32_t> out;
    GenerateOptions o;
    o.max_new_tokens = 12;
    o.sampler.temperature = 0.0f;
    o.ignore_eos = true;
    o.drafter = drafter;
    o.prompt_embeddings = spans;
    o.on_token = [&](std::int32_t t, std::span<const float>) { out.push_back(t); };
    gen.Generate(ids, o, [](std::string_view) {});
    return out;
  };
  const std::vector<std::int32_t> plain = run(nullptr);
  ASSERT_EQ(plain.size(), 12u);
  const std::unique_ptr<Drafter> ngram = MakeNgramDrafter({.ngram_min = 1, .ngram_max = 3});
  EXPECT_EQ(run(ngram.get()), plain);
}

// An mmproj of another model is refused before any image: markers missing
// from the vocabulary, or (Gemma 3n) an end marker outside the mmproj's
// vision vocabulary.
TEST(ImagePrompt, MismatchedMmprojIsRefused) {
  const std::unique_ptr<Model> g4 = Model::Load(Dir() + "gemma4.f32.gguf");
  const std::unique_ptr<Model> g3 = Model::Load(Dir() + "gemma3.f32.gguf");
  const Tokenizer tok4(ReadVocab(g4->gguf())), tok3(ReadVocab(g3->gguf()));
  const std::unique_ptr<VisionEncoder> siglip = VisionEncoder::Load(Dir() + "gemma3.mmproj.f32.gguf");
  const std::unique_ptr<VisionEncoder> mnv5 = VisionEncoder::Load(Dir() + "gemma3n.mmproj.f32.gguf");
  EXPECT_NE(testing::ErrorOf([&] { ImageSplicer(tok4, *siglip); }).find("no such token: the mmproj does not belong"),
            std::string::npos);
  EXPECT_NE(testing::ErrorOf([&] {
              ImageSplicer(tok3, *mnv5);
            }).find("covers ids [480, 496) of this 512-token vocabulary, but <end_of_image> is id"),
            std::string::npos);
  EXPECT_NO_THROW(ImageSplicer(tok3, *siglip));
}

// Gemma 3's prompt with pan-and-scan on and off equals HF Gemma3Processor's
// ids (tests/tools/vision_pan_and_scan_prompt.py): the crops' text, and
// "Here is the original image " joined with the text before the image in
// place of the "\n\n" padding (re-tokenized as one run).
TEST(ImagePrompt, PanAndScanMatchesHfProcessor) {
  std::ifstream in(Dir() + "gemma3.pan_and_scan.json");
  ASSERT_TRUE(in);
  const nlohmann::json j = nlohmann::json::parse(in);
  const std::unique_ptr<Model> model = Model::Load(Dir() + "gemma3.f32.gguf");
  const std::unique_ptr<VisionEncoder> encoder = VisionEncoder::Load(Dir() + "gemma3.mmproj.f32.gguf");
  const Tokenizer tok(ReadVocab(model->gguf()));
  const ImageSplicer splicer(tok, *encoder);
  const ChatTemplate tmpl(ChatFormat::kGemma, tok);
  const int width = encoder->config().n_embd_text;
  ASSERT_EQ(j["cases"].size(), 3u);
  for (const auto& c : j["cases"]) {
    ChatMessage m{"user", ""};
    std::vector<std::pair<int, int>> sizes;
    for (const auto& part : c["parts"]) {
      if (part.is_string()) {
        m.content += part.get<std::string>();
      } else {
        m.image_at.push_back(m.content.size());
        sizes.emplace_back(part[0].get<int>(), part[1].get<int>());
      }
    }
    for (const bool pas : {false, true}) {
      SCOPED_TRACE(m.content + (pas ? " (pan-and-scan)" : ""));
      const auto& want = c[pas ? "pan_and_scan" : "plain"];
      std::vector<PromptImage> images;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        // The crop count from kvshare's preprocessing of an image of that size.
        Image img{.width = sizes[i].second, .height = sizes[i].first};
        img.rgb.assign(static_cast<std::size_t>(img.width) * img.height * 3, 128);
        const std::size_t n = encoder->Preprocess(img, {.pan_and_scan = pas}).size();
        EXPECT_EQ(n, 1 + want["crops"][i].get<std::size_t>());
        PromptImage& pi = images.emplace_back();
        pi.tokens.assign(n, 16);
        pi.rows.assign(n * 16 * static_cast<std::size_t>(width), 0.0f);
      }
      std::vector<std::size_t> slots;
      ChatTemplateOptions co;
      co.image_padding_text = splicer.padding_text();
      const std::vector<std::int32_t> ids = tmpl.Encode(std::span(&m, 1), co, &slots);
      EXPECT_EQ(splicer.Splice(ids, slots, images).tokens, want["ids"].get<std::vector<std::int32_t>>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ImageFixtures,
                         ::testing::Values("gemma3", "gemma3n", "gemma4", "gemma4_large", "gemma4_unified"));

}  // namespace
}  // namespace kvshare
