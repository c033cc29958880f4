// A prompt with one audio clip end to end against HF transformers 5.23
// (tests/tools/audio_e2e_fixtures.py): the tiny Gemma 4 E-style text model of
// tests/fixtures/vision/ with the gemma4e mmproj (its audio tower), HF's
// features of the hello clip:
// - the prompt's token ids from a chat message with the clip (chat template +
//   AudioSplicer) equal the ids HF's processor makes;
// - the logits of every prompt position and of 16 greedy steps with the
//   clip's soft tokens spliced in (a causal span): within 1e-5 relative,
//   argmax equal;
// - the same tokens through Generator with the span, and with a clip's
//   rows changed the logits change (the span is read).
// The same for Gemma 3n (tests/tools/audio_e2e_gemma3n_fixtures.py): the tiny
// Gemma 3n of tests/fixtures/vision/ with the gemma3ne mmproj, its 188 audio
// slots and the end marker's hard row in the span; the logits of the last 48
// prompt positions and of 16 greedy steps.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "audio_fixture.h"
#include "common_test_util.h"
#include "kvshare/audio/audio_encoder.h"
#include "kvshare/gguf/vocab.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/audio_prompt.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare {
namespace {

using testing::AudioDir;
using testing::MaxRelDiff;
using testing::ReadF32;

constexpr double kTol = 1e-5;

// HF's features of the hello clip (j["features"]) with the mask HF's
// `extractor` gave (tests/fixtures/audio/audio.json).
AudioFeatures HelloFeatures(const nlohmann::json& j, const char* extractor) {
  AudioFeatures f;
  f.values = ReadF32(AudioDir() + j["features"].get<std::string>());
  f.n_bins = 128;
  f.n_frames = static_cast<int>(f.values.size() / 128);
  for (const auto& clip : testing::AudioClips()) {
    if (clip["name"] == "hello_22050") {
      for (char c : clip[extractor]["mask"].get<std::string>()) f.mask.push_back(c == '1');
    }
  }
  return f;
}

// HF's greedy steps (j["step_logits"], j["tokens"]) from the prompt's last
// logits `row` on, one token at a time through `st`: each within kTol of
// HF's, argmax HF's token. Then the same tokens through Generator with
// `max_step`-token prompt steps (the causal span cut across steps).
void CheckSteps(const Model& model, const Tokenizer& tok, ModelState& st, std::vector<float> row,
                const nlohmann::json& j, const std::vector<std::int32_t>& prompt,
                const std::vector<EmbeddingSpan>& spans, int max_context, int max_step) {
  const std::vector<float> steps = ReadF32(AudioDir() + j["step_logits"]["file"].get<std::string>());
  const auto tokens = j["tokens"].get<std::vector<std::int32_t>>();
  const std::size_t V = static_cast<std::size_t>(model.config().n_vocab);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<float> want(steps.begin() + static_cast<std::ptrdiff_t>(i * V),
                                  steps.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
    EXPECT_LT(MaxRelDiff(row, want), kTol) << "step " << i;
    EXPECT_EQ(std::max_element(row.begin(), row.end()) - row.begin(), tokens[i]) << "step " << i;
    const auto next = model.Forward(st, std::span(&tokens[i], 1), nullptr);
    row.assign(next.begin(), next.end());
  }
  Generator gen(model, tok, nullptr, {.max_context = max_context, .max_step = max_step});
  std::vector<std::int32_t> out;
  GenerateOptions o;
  o.max_new_tokens = static_cast<int>(tokens.size());
  o.sampler.temperature = 0.0f;
  o.ignore_eos = true;
  o.prompt_embeddings = spans;
  o.on_token = [&](std::int32_t t, std::span<const float>) { out.push_back(t); };
  gen.Generate(prompt, o, [](std::string_view) {});
  EXPECT_EQ(out, tokens);
}

class AudioFixtures : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(AudioDir() + "gemma4e.json");
    ASSERT_TRUE(in) << "missing fixture gemma4e.json";
    j_ = nlohmann::json::parse(in);
    model_ = Model::Load(AudioDir() + j_["text_gguf"].get<std::string>());
    encoder_ = AudioEncoder::Load(AudioDir() + j_["mmproj"].get<std::string>());
    CheckAudioMmprojFitsText(encoder_->config(), model_->config().n_embd);
    AudioFeatures f = HelloFeatures(j_, "gemma4");
    PreparedAudio p;
    p.tokens = AudioSoftTokens(encoder_->config(), f);
    p.chunk_tokens = {p.tokens};
    p.chunks = {std::move(f)};
    p.key = 1;
    clip_ = EncodePromptAudio(*encoder_, p, nullptr);
  }
  nlohmann::json j_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<AudioEncoder> encoder_;
  PromptAudio clip_;
};

TEST_F(AudioFixtures, PromptAndLogitsMatchHf) {
  ASSERT_EQ(clip_.tokens, j_["audio_tokens"].get<int>());
  const Tokenizer tok(ReadVocab(model_->gguf()));
  const AudioSplicer splicer(tok, encoder_->config().projector);
  const auto want_ids = j_["prompt_ids"].get<std::vector<std::int32_t>>();
  // The chat message the prompt came from: the clip, then the text.
  const std::string text = j_["text"].get<std::string>();
  ChatMessage m{"user", text.substr(text.rfind("<audio|>") + 8, text.find("<turn|>") - text.rfind("<audio|>") - 8)};
  m.audio_at = {0};
  const ChatTemplate tmpl(ChatFormat::kGemma4, tok);
  std::vector<std::size_t> slots;
  const std::vector<std::int32_t> ids = tmpl.Encode(std::span(&m, 1), {}, nullptr, &slots);
  const MediaPrompt mp = splicer.Splice(ids, slots, std::span(&clip_, 1));
  // Gemma 4's HF template ends the generation prompt with an empty thought
  // channel; kvshare's gemma4 format writes the plain one (as for images).
  const std::size_t n = std::min(mp.tokens.size(), want_ids.size());
  EXPECT_EQ(std::vector<std::int32_t>(mp.tokens.begin(), mp.tokens.begin() + static_cast<std::ptrdiff_t>(n)),
            std::vector<std::int32_t>(want_ids.begin(), want_ids.begin() + static_cast<std::ptrdiff_t>(n)));
  ASSERT_EQ(mp.embeddings.size(), 1u);
  EXPECT_FALSE(mp.embeddings[0].bidirectional);
  const std::int64_t begin = mp.embeddings[0].begin;
  ASSERT_LT(begin + clip_.tokens, static_cast<std::int64_t>(want_ids.size()));

  // HF's ids with the span at the same place through the model.
  const std::vector<EmbeddingSpan> spans = mp.embeddings;
  auto st = model_->NewState({.max_context = 128});
  const auto all = static_cast<std::int64_t>(want_ids.size());
  const auto logits = model_->Forward(*st, want_ids, nullptr, {.num_logits = all, .embeddings = spans});
  const std::vector<float> pre = ReadF32(AudioDir() + j_["prefill_logits"]["file"].get<std::string>());
  EXPECT_LT(MaxRelDiff(std::vector<float>(logits.begin(), logits.end()), pre), kTol);
  const std::size_t V = static_cast<std::size_t>(model_->config().n_vocab);
  CheckSteps(*model_, tok, *st, std::vector<float>(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end()), j_,
             want_ids, spans, 128, 8);

  // Other rows, other logits: the span is what the model reads.
  std::vector<float> other(clip_.rows.size(), 0.0f);
  std::vector<EmbeddingSpan> zeroed = spans;
  zeroed[0].rows = other.data();
  auto st2 = model_->NewState({.max_context = 128});
  const auto z = model_->Forward(*st2, want_ids, nullptr, {.num_logits = 1, .embeddings = zeroed});
  EXPECT_GT(MaxRelDiff(std::vector<float>(z.begin(), z.end()),
                       std::vector<float>(pre.end() - static_cast<std::ptrdiff_t>(V), pre.end())),
            1e-3);
}

TEST(AudioFixturesGemma3n, PromptAndLogitsMatchHf) {
  std::ifstream in(AudioDir() + "gemma3ne.json");
  ASSERT_TRUE(in) << "missing fixture gemma3ne.json";
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto model = Model::Load(AudioDir() + j["text_gguf"].get<std::string>());
  const auto encoder = AudioEncoder::Load(AudioDir() + j["mmproj"].get<std::string>());
  CheckAudioMmprojFitsText(encoder->config(), model->config().n_embd);
  const AudioFeatures f = HelloFeatures(j, "gemma3n");
  ASSERT_EQ(AudioSoftTokens(encoder->config(), f), j["clip_soft_tokens"].get<int>());
  PreparedAudio p{.chunks = {f}, .chunk_tokens = {188}, .tokens = 188, .key = 1};
  const PromptAudio clip = EncodePromptAudio(*encoder, p, nullptr);
  ASSERT_EQ(clip.tokens, j["audio_slots"].get<int>());

  // The chat message with the clip, then the text: HF's ids exactly.
  const Tokenizer tok(ReadVocab(model->gguf()));
  const AudioSplicer splicer(tok, AudioProjectorType::kGemma3nA);
  ChatMessage m{"user", "Transcribe this clip."};
  m.audio_at = {0};
  std::vector<std::size_t> slots;
  const std::vector<std::int32_t> ids =
      ChatTemplate(ChatFormat::kGemma, tok)
          .Encode(std::span(&m, 1), {.audio_padding_text = splicer.padding_text()}, nullptr, &slots);
  const MediaPrompt mp = splicer.Splice(ids, slots, std::span(&clip, 1));
  const auto want_ids = j["prompt_ids"].get<std::vector<std::int32_t>>();
  ASSERT_EQ(mp.tokens, want_ids);
  ASSERT_EQ(mp.embeddings.size(), 1u);
  EXPECT_EQ(mp.embeddings[0].count, 189);  // 188 slots and <end_of_audio>'s hard row

  const std::vector<EmbeddingSpan> spans = mp.embeddings;
  auto st = model->NewState({.max_context = 256});
  const auto all = static_cast<std::int64_t>(want_ids.size());
  const auto logits = model->Forward(*st, want_ids, nullptr, {.num_logits = all, .embeddings = spans});
  const std::size_t V = static_cast<std::size_t>(model->config().n_vocab);
  const std::vector<float> pre = ReadF32(AudioDir() + j["prefill_logits"]["file"].get<std::string>());
  const auto first = static_cast<std::size_t>(j["prefill_first_position"].get<int>());
  ASSERT_EQ(pre.size(), (want_ids.size() - first) * V);
  EXPECT_LT(MaxRelDiff(std::vector<float>(logits.begin() + static_cast<std::ptrdiff_t>(first * V), logits.end()), pre),
            kTol);
  CheckSteps(*model, tok, *st, std::vector<float>(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end()), j,
             want_ids, spans, 256, 16);

  // The span is what the model reads: the clip's soft rows, and the end
  // marker's hard row on its own, each change the last logits when zeroed.
  const std::vector<float> last(pre.end() - static_cast<std::ptrdiff_t>(V), pre.end());
  const std::size_t W = static_cast<std::size_t>(model->config().n_embd);
  for (const std::size_t zero_from : {std::size_t{0}, std::size_t{188}}) {
    std::vector<float> rows = clip.rows;
    std::fill(rows.begin() + static_cast<std::ptrdiff_t>(zero_from * W), rows.end(), 0.0f);
    std::vector<EmbeddingSpan> changed = spans;
    changed[0].rows = rows.data();
    auto st2 = model->NewState({.max_context = 256});
    const auto z = model->Forward(*st2, want_ids, nullptr, {.num_logits = 1, .embeddings = changed});
    EXPECT_GT(MaxRelDiff(std::vector<float>(z.begin(), z.end()), last), 1e-3) << "zeroed from row " << zero_from;
  }
}

}  // namespace
}  // namespace kvshare
