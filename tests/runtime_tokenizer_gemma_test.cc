// The tokenizer on the real Gemma 3 vocabulary, read from the default model's GGUF
// metadata by a minimal reader in this file (the tokenizer arrays only). Skipped
// when the model is absent: set KVSHARE_MODEL, or place the file at
// $KVSHARE_SOURCE_DIR/models/gemma-3-270m-q4_k_m.gguf.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "kvshare/tokenizer.h"
#include "runtime_bpe_twin.h"

namespace kvshare {
namespace {

std::string ModelPath() {
  if (const char* p = std::getenv("KVSHARE_MODEL")) return p;
  if (const char* src = std::getenv("KVSHARE_SOURCE_DIR")) {
    return std::string(src) + "/models/gemma-3-270m-q4_k_m.gguf";
  }
  return "models/gemma-3-270m-q4_k_m.gguf";
}

// Reads the tokenizer.* metadata of a GGUF v2/v3 file (little-endian).
class GgufVocabReader {
 public:
  explicit GgufVocabReader(const std::string& path) : in_(path, std::ios::binary) {}

  VocabData Read() {
    VocabData v;
    if (U32() != 0x46554747u) throw std::runtime_error("not a GGUF file");
    const uint32_t version = U32();
    if (version < 2 || version > 3) throw std::runtime_error("unsupported GGUF version");
    U64();  // tensor count
    const uint64_t n_kv = U64();
    for (uint64_t i = 0; i < n_kv; ++i) {
      const std::string key = Str();
      const uint32_t type = U32();
      if (key == "tokenizer.ggml.tokens") {
        Expect(type == 9 && U32() == 8, key);
        v.tokens.resize(U64());
        for (auto& t : v.tokens) t = Str();
      } else if (key == "tokenizer.ggml.scores") {
        Expect(type == 9 && U32() == 6, key);
        v.scores.resize(U64());
        for (auto& s : v.scores) s = Raw<float>();
      } else if (key == "tokenizer.ggml.token_type") {
        Expect(type == 9 && U32() == 5, key);
        v.token_types.resize(U64());
        for (auto& t : v.token_types) t = Raw<int32_t>();
      } else if (key == "tokenizer.ggml.bos_token_id" && type == 4) {
        v.bos = static_cast<int32_t>(U32());
      } else if (key == "tokenizer.ggml.eos_token_id" && type == 4) {
        v.eos = static_cast<int32_t>(U32());
      } else if (key == "tokenizer.ggml.unknown_token_id" && type == 4) {
        v.unk = static_cast<int32_t>(U32());
      } else if (key == "tokenizer.ggml.padding_token_id" && type == 4) {
        v.pad = static_cast<int32_t>(U32());
      } else if (key == "tokenizer.ggml.add_bos_token" && type == 7) {
        v.add_bos = Raw<uint8_t>() != 0;
      } else if (key == "tokenizer.ggml.add_eos_token" && type == 7) {
        v.add_eos = Raw<uint8_t>() != 0;
      } else if (key == "tokenizer.ggml.add_space_prefix" && type == 7) {
        v.add_space_prefix = Raw<uint8_t>() != 0;
      } else {
        Skip(type);
      }
      if (!in_) throw std::runtime_error("truncated GGUF metadata at key " + key);
    }
    return v;
  }

 private:
  template <typename T>
  T Raw() {
    T x{};
    in_.read(reinterpret_cast<char*>(&x), sizeof x);
    return x;
  }
  uint32_t U32() { return Raw<uint32_t>(); }
  uint64_t U64() { return Raw<uint64_t>(); }
  std::string Str() {
    const uint64_t n = U64();
    if (n > (1u << 20)) throw std::runtime_error("implausible string length");
    std::string s(n, '\0');
    in_.read(s.data(), static_cast<std::streamsize>(n));
    return s;
  }
  static void Expect(bool ok, const std::string& key) {
    if (!ok) throw std::runtime_error("unexpected type for " + key);
  }
  void Skip(uint32_t type) {
    static const int kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type > 12) throw std::runtime_error("bad GGUF value type");
    if (type == 8) {
      Str();
    } else if (type == 9) {
      const uint32_t elem = U32();
      const uint64_t n = U64();
      for (uint64_t i = 0; i < n && in_; ++i) Skip(elem);
    } else {
      in_.seekg(kSize[type], std::ios::cur);
    }
  }
  std::ifstream in_;
};

class GemmaTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = ModelPath();
    if (!std::filesystem::exists(path)) return;
    vocab_ = new VocabData(GgufVocabReader(path).Read());
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
  std::printf("tokenizer build from 262144 pieces: %.1f ms\n", load_ms_);
}

TEST_F(GemmaTokenizer, KnownIds) {
  // HF's Gemma 3 tokenizer gives [2, 9259, 1902] ("<bos>", "Hello", "▁world").
  EXPECT_EQ(tok_->Encode("Hello world"), (std::vector<int32_t>{2, 9259, 1902}));
  EXPECT_EQ(tok_->Encode("<start_of_turn>", {.add_bos = false, .parse_special = true}),
            (std::vector<int32_t>{105}));
  EXPECT_EQ(tok_->Encode("\n\n", {.add_bos = false}), (std::vector<int32_t>{108}));
}

TEST_F(GemmaTokenizer, ChatPrompt) {
  const std::vector<ChatMessage> msgs = {{"user", "Hello!"}};
  const auto ids = EncodeGemmaChat(*tok_, msgs);
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ((std::vector<int32_t>(ids.begin(), ids.begin() + 2)), (std::vector<int32_t>{2, 105}));
  // ... <end_of_turn> "\n" <start_of_turn> "model" "\n"
  EXPECT_EQ(ids[ids.size() - 5], 106);
  EXPECT_EQ(ids[ids.size() - 4], 107);
  EXPECT_EQ(ids[ids.size() - 3], 105);
  EXPECT_EQ(tok_->TokenText(ids[ids.size() - 2]), "model");
  EXPECT_EQ(ids.back(), 107);
  EXPECT_EQ(tok_->Decode(ids, {.render_special = true}), "<bos>" + FormatGemmaChat(msgs));
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

}  // namespace
}  // namespace kvshare
