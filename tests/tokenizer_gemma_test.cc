// The tokenizer on the real Gemma 3 vocabulary, read from the default model's GGUF
// metadata by a minimal reader in this file (the tokenizer arrays only). Skipped
// when the model is absent (model_default_path.h says where it is looked for).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "common_record_measured.h"
#include "common_source_path.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_default_path.h"
#include "tokenizer_bpe_twin.h"

namespace kvshare {
namespace {

std::string ModelPath() { return testing::DefaultModelPath(); }

class GemmaTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = ModelPath();
    if (!std::filesystem::exists(path)) return;
    vocab_ = new VocabData(ReadVocab(GgufFile::Open(path)));
    const auto t0 = std::chrono::steady_clock::now();
    tok_ = new Tokenizer(*vocab_);
    load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete vocab_;
    tok_ = nullptr;
    vocab_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << "model not found at " << ModelPath();
  }
  static inline VocabData* vocab_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
  static inline double load_ms_ = 0;
};

TEST_F(GemmaTokenizer, MetadataAndSpecialIds) {
  EXPECT_EQ(tok_->vocab_size(), 262144);
  EXPECT_EQ(tok_->bos_id(), 2);
  EXPECT_EQ(tok_->eos_id(), 1);
  EXPECT_EQ(tok_->unk_id(), 3);
  EXPECT_EQ(tok_->pad_id(), 0);
  EXPECT_EQ(tok_->start_of_turn_id(), 105);
  EXPECT_EQ(tok_->end_of_turn_id(), 106);
  EXPECT_TRUE(tok_->IsEndOfGeneration(106));
  EXPECT_FALSE(tok_->add_space_prefix());
  testing::RecordMeasured("tokenizer build from 262144 pieces: %.1f ms\n", load_ms_);
}

TEST_F(GemmaTokenizer, KnownIds) {
  // HF's Gemma 3 tokenizer gives [2, 9259, 1902] ("<bos>", "Hello", "▁world").
  EXPECT_EQ(tok_->Encode("Hello world"), (std::vector<int32_t>{2, 9259, 1902}));
  EXPECT_EQ(tok_->Encode("<start_of_turn>", {.add_bos = false, .parse_special = true}), (std::vector<int32_t>{105}));
  EXPECT_EQ(tok_->Encode("\n\n", {.add_bos = false}), (std::vector<int32_t>{108}));
}

TEST_F(GemmaTokenizer, ChatPrompt) {
  const ChatTemplate tmpl(ChatFormat::kGemma, *tok_);
  EXPECT_EQ(tmpl.end_of_turn_id(), 106);
  const std::vector<ChatMessage> msgs = {{"user", "Hello!"}};
  const auto ids = tmpl.Encode(msgs);
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ((std::vector<int32_t>(ids.begin(), ids.begin() + 2)), (std::vector<int32_t>{2, 105}));
  // ... <end_of_turn> "\n" <start_of_turn> "model" "\n"
  EXPECT_EQ(ids[ids.size() - 5], 106);
  EXPECT_EQ(ids[ids.size() - 4], 107);
  EXPECT_EQ(ids[ids.size() - 3], 105);
  EXPECT_EQ(tok_->TokenText(ids[ids.size() - 2]), "model");
  EXPECT_EQ(ids.back(), 107);
  EXPECT_EQ(tok_->Decode(ids, {.render_special = true}), "<bos>" + FormatChat(ChatFormat::kGemma, msgs));
  // Gemma 3's vocabulary has no Gemma 4 turn markers.
  EXPECT_THROW(ChatTemplate(ChatFormat::kGemma4, *tok_), Error);
}

// The default model is the base model: its file has no chat template, so the
// prompt is used as is (plain completion).
TEST_F(GemmaTokenizer, DefaultModelHasNoChatTemplate) {
  const ChatFormatChoice c = ChooseChatFormat(GgufFile::Open(ModelPath()));
  EXPECT_EQ(c.format, ChatFormat::kNone);
  EXPECT_EQ(c.source, ChatFormatSource::kFileHasNone);
}

TEST_F(GemmaTokenizer, MatchesPlainTwinAndRoundTrips) {
  const testing::BpeTwin twin(*vocab_);
  std::vector<std::string> texts = {
      "Hello world",
      "The quick brown fox jumps over the lazy dog.",
      "  leading spaces and\ttabs\t\tand\n\nnewlines\n",
      "日本語のテキストと中文文本",
      "emoji 😀🎉👍🏽 and symbols ∑∫√ — “quotes”",
      "int main() { return 0; }\n",
      "Straße, naïve café, Ωμέγα, Привет мир",
      "<b>bold</b> <div class=\"x\">",
  };
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> cp(0x20, 0x2FFF);
  for (int i = 0; i < 30; ++i) {
    std::string s;
    for (int k = 0; k < 12; ++k) {
      const int c = cp(rng);
      if (c < 0x80) {
        s += static_cast<char>(c);
      } else if (c < 0x800) {
        s += static_cast<char>(0xC0 | (c >> 6));
        s += static_cast<char>(0x80 | (c & 0x3F));
      } else {
        s += static_cast<char>(0xE0 | (c >> 12));
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
      }
    }
    texts.push_back(s);
  }
  for (const auto& text : texts) {
    if (text.find("\xE2\x96\x81") != std::string::npos) continue;  // literal ▁
    const auto ids = tok_->Encode(text, {.add_bos = false});
    EXPECT_EQ(ids, twin.Encode(text)) << "[" << text << "]";
    EXPECT_EQ(tok_->Decode(ids), text);
  }
}

// llama.cpp's ids for 362 strings (whitespace runs, digits, code, scripts, emoji
// sequences, combining marks, rare code points, special-token text, random mixes;
// tests/tools/llamacpp_gemma3_tokenizer_cases.py), special parsing off and on,
// and its decoding of the plain ids.
TEST_F(GemmaTokenizer, MatchesLlamaCppCases) {
  const std::string path = testing::SourcePath("tests/fixtures/llamacpp_gemma3_tokenizer.json");
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  const auto fixture = nlohmann::json::parse(in);
  size_t n = 0;
  for (const auto& c : fixture.at("cases")) {
    const std::string text = c.at("text");
    const auto plain = tok_->Encode(text, {.add_bos = false});
    EXPECT_EQ(plain, c.at("plain").get<std::vector<int32_t>>()) << "[" << text << "]";
    EXPECT_EQ(tok_->Encode(text, {.add_bos = false, .parse_special = true}),
              c.at("special").get<std::vector<int32_t>>())
        << "[" << text << "] parse_special";
    EXPECT_EQ(tok_->Decode(plain), c.at("decoded").get<std::string>()) << "[" << text << "]";
    ++n;
  }
  EXPECT_EQ(n, 362u);
}

}  // namespace
}  // namespace kvshare
