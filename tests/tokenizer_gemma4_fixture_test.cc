// The `gemma4` tokenizer against HF `tokenizers` on the committed fixture
// tests/fixtures/gemma4_tokenizer.json (a Gemma-4-shaped vocabulary as a
// converted GGUF holds it, with HF's encodings and decodings; written by
// tests/tools/gemma4_tokenizer_cases.py): every case id for id and byte for byte,
// read through a GGUF and ReadVocab; plus the plain twin
// (tokenizer_merge_bpe_twin.h) on random strings over the same vocabulary, round
// trips, and a 1 MiB single run that must take n log n time.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "common_record_measured.h"
#include "common_source_path.h"
#include "gguf_writer.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/model/model.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "tokenizer_merge_bpe_twin.h"

namespace kvshare {
namespace {

using nlohmann::json;
using testing::GgufKv;

using testing::SourcePath;

// A GGUF holding the fixture's "gguf" object, keys typed as the converter writes them.
std::vector<std::uint8_t> GgufOf(const json& fields) {
  testing::GgufSpec spec;
  spec.kvs.push_back(GgufKv::Str("general.architecture", "gemma4"));
  for (const auto& [key, value] : fields.items()) {
    if (value.is_string()) {
      spec.kvs.push_back(GgufKv::Str(key, value.get<std::string>()));
    } else if (value.is_boolean()) {
      spec.kvs.push_back(GgufKv::Bool(key, value.get<bool>()));
    } else if (value.is_number_integer()) {
      spec.kvs.push_back(GgufKv::U32(key, value.get<std::uint32_t>()));
    } else if (key == "tokenizer.ggml.scores") {
      spec.kvs.push_back(GgufKv::F32Array(key, value.get<std::vector<float>>()));
    } else if (key == "tokenizer.ggml.token_type") {
      spec.kvs.push_back(GgufKv::I32Array(key, value.get<std::vector<std::int32_t>>()));
    } else {
      spec.kvs.push_back(GgufKv::StrArray(key, value.get<std::vector<std::string>>()));
    }
  }
  return spec.Build();
}

class Gemma4Fixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = SourcePath("tests/fixtures/gemma4_tokenizer.json");
    std::ifstream in(path);
    if (!in) return;  // SetUp fails every test
    fixture_ = new json(json::parse(in));
    const auto bytes = GgufOf((*fixture_)["gguf"]);
    vocab_ = new VocabData(ReadVocab(GgufFile::Parse(bytes.data(), bytes.size(), "gemma4 fixture")));
    tok_ = new Tokenizer(*vocab_);
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete vocab_;
    delete fixture_;
  }
  void SetUp() override {
    ASSERT_NE(tok_, nullptr) << "cannot open " << SourcePath("tests/fixtures/gemma4_tokenizer.json");
  }
  static inline json* fixture_ = nullptr;
  static inline VocabData* vocab_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

std::string Show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return "\"" + out + "\"";
}

TEST_F(Gemma4Fixture, ReadsTheConvertedVocabulary) {
  const json& g = (*fixture_)["gguf"];
  EXPECT_EQ(vocab_->model, "gemma4");
  EXPECT_EQ(vocab_->tokens.size(), g["tokenizer.ggml.tokens"].size());
  EXPECT_EQ(vocab_->merges.size(), g["tokenizer.ggml.merges"].size());
  EXPECT_GE(vocab_->merges.size(), 100u);
  EXPECT_EQ(tok_->bos_id(), 2);
  EXPECT_EQ(tok_->eos_id(), 1);
  EXPECT_EQ(tok_->unk_id(), 3);
  EXPECT_EQ(tok_->pad_id(), 0);
  EXPECT_TRUE(vocab_->add_bos);
  EXPECT_FALSE(vocab_->add_space_prefix);
  EXPECT_EQ(tok_->Type(*tok_->TokenId("<|turn>")), TokenType::kControl);
  EXPECT_EQ(tok_->Type(*tok_->TokenId("<|channel>")), TokenType::kUserDefined);
  EXPECT_EQ(tok_->Type(*tok_->TokenId("<|\"|>")), TokenType::kUserDefined);
  // USER_DEFINED in the file, CONTROL once loaded (llama.cpp's end-of-generation rule).
  EXPECT_EQ(g["tokenizer.ggml.token_type"][*tok_->TokenId("<|tool_response>")], 4);
  EXPECT_EQ(tok_->Type(*tok_->TokenId("<|tool_response>")), TokenType::kControl);
  EXPECT_EQ(tok_->Type(*tok_->TokenId("<0x41>")), TokenType::kByte);
}

TEST_F(Gemma4Fixture, EncodeMatchesHfTokenizers) {
  int checked = 0, with_bos = 0, plain_special = 0;
  for (const json& c : (*fixture_)["encode"]) {
    const std::string text = c["text"];
    const bool parse_special = c["parse_special"], add_bos = c["add_bos"];
    const auto ids = tok_->Encode(text, {.add_bos = add_bos, .parse_special = parse_special});
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>())
        << "text " << Show(text) << " parse_special " << parse_special << " add_bos " << add_bos;
    ++checked;
    with_bos += add_bos;
    plain_special += !parse_special;
  }
  testing::RecordMeasured("encode cases: %d (%d with BOS, %d without special-token parsing)\n", checked, with_bos,
                          plain_special);
  EXPECT_GE(checked, 300);
}

TEST_F(Gemma4Fixture, DecodeMatchesHfTokenizers) {
  int checked = 0;
  for (const json& c : (*fixture_)["decode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const bool render = c["render_special"];
    const std::string want = c["text"];
    EXPECT_EQ(tok_->Decode(ids, {.render_special = render}), want) << "case " << c.dump();
    TokenStreamDecoder stream(*tok_, {.render_special = render});
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Feed(id);
    EXPECT_EQ(streamed + stream.Flush(), want) << "case " << c.dump();
    ++checked;
  }
  testing::RecordMeasured("decode cases: %d\n", checked);
  EXPECT_GE(checked, 100);
}

TEST_F(Gemma4Fixture, EncodeDecodeRoundTrips) {
  int checked = 0;
  for (const json& c : (*fixture_)["encode"]) {
    const std::string text = c["text"];
    if (text.find("\xE2\x96\x81") != std::string::npos) continue;  // a literal ▁ decodes as ' '
    auto ids = c["ids"].get<std::vector<int32_t>>();
    if (c["add_bos"]) ids.erase(ids.begin());
    EXPECT_EQ(tok_->Decode(ids, {.render_special = true}), text) << Show(text);
    ++checked;
  }
  EXPECT_GE(checked, 300);
}

// Random strings from pieces of every kind the fixture covers.
std::string RandomText(std::mt19937& rng, int max_units) {
  static const std::vector<std::string> units = {"a",           "b",
                                                 "e",           "h",
                                                 "l",           "o",
                                                 "t",           "s",
                                                 "n",           " ",
                                                 " ",           "  ",
                                                 "   ",         "\n",
                                                 "\n\n",        "\n\n\n",
                                                 "\n\n\n\n\n",  "\t",
                                                 "\r\n",        "the",
                                                 " the",        "token",
                                                 "izer",        "hello",
                                                 "world",       ".",
                                                 ",",           "!",
                                                 "'",           "\"",
                                                 "(",           ")",
                                                 "{",           "}",
                                                 "<",           ">",
                                                 "|",           "=",
                                                 "_",           "0",
                                                 "1",           "42",
                                                 "é",           "ü",
                                                 "ß",           "ñ",
                                                 "e\u0301",     "Ω",
                                                 "π",           "αβγ",
                                                 "Привет",      "мир",
                                                 "你好",        "天天",
                                                 "日本語",      "です",
                                                 "한국어",      "입니다",
                                                 "مرحبا",       "ال",
                                                 "שלום",        "नमस्ते",
                                                 "ไทย",         "😀",
                                                 "👍🏽",    "👨‍👩‍👧",
                                                 "🇫🇷",          "\u200d",
                                                 "\u00a0",      "—",
                                                 "<|channel>",  "<|\"|>",
                                                 "<|turn>",     "<bos>",
                                                 "<0x41>",      "\xE2\x96\x81",
                                                 "fibonacci(n", "return ",
                                                 "<stdio.h>",   "class=\"main\">Text "};
  std::uniform_int_distribution<int> n_units(0, max_units);
  std::uniform_int_distribution<size_t> pick(0, units.size() - 1);
  std::string s;
  for (int i = n_units(rng); i > 0; --i) s += units[pick(rng)];
  return s;
}

TEST_F(Gemma4Fixture, MatchesPlainTwin) {
  const testing::MergeBpeTwin twin(*vocab_);
  int checked = 0;
  for (const json& c : (*fixture_)["encode"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok_->Encode(text, {.add_bos = false}), twin.Encode(text)) << Show(text);
    ++checked;
  }
  std::mt19937 rng(4321);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string text = RandomText(rng, trial % 3 == 0 ? 60 : 12);
    ASSERT_EQ(tok_->Encode(text, {.add_bos = false}), twin.Encode(text)) << Show(text);
    ++checked;
  }
  testing::RecordMeasured("fast vs twin: %d strings\n", checked);
}

TEST_F(Gemma4Fixture, RandomTextRoundTrips) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 1000; ++trial) {
    const std::string text = RandomText(rng, 30);
    if (text.find("\xE2\x96\x81") != std::string::npos) continue;
    const auto ids = tok_->Encode(text, {.add_bos = false, .parse_special = trial % 2 == 0});
    ASSERT_EQ(tok_->Decode(ids, {.render_special = true}), text) << Show(text);
  }
}

// A long single line (no newline: one BPE run) must encode in n log n, not n².
TEST_F(Gemma4Fixture, LongRunIsFast) {
  std::mt19937 rng(5);
  std::string text;
  while (text.size() < (1u << 20)) {
    std::string piece = RandomText(rng, 40);
    // No user-defined token (it would cut the run), no literal ▁ (decodes as ' ').
    if (piece.find("<|") != std::string::npos || piece.find("\xE2\x96\x81") != std::string::npos) continue;
    for (char ch : piece) text += ch == '\n' ? ' ' : ch;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok_->Encode(text, {.add_bos = false});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  testing::RecordMeasured("1 MiB in one run: %zu tokens in %.3f s\n", ids.size(), s);
  EXPECT_LT(s, 10.0);
  EXPECT_EQ(tok_->Decode(ids, {.render_special = true}), text);
}

// The tiny Gemma 4 models' own vocabulary (tests/fixtures/gemma4/, written by
// tests/tools/gemma4_fixtures.py with HF tokenizers and llama.cpp's converter):
// its GGUF read with our reader, and its tokenizer_cases.json, which holds HF's
// and llama.cpp's ids for each string and both decoders' text. Skipped where
// those files are absent. KVSHARE_GEMMA4_FIXTURE_DIR overrides the folder.
class Gemma4TinyModelCases : public ::testing::Test {
 protected:
  static std::string Dir() {
    if (const char* d = std::getenv("KVSHARE_GEMMA4_FIXTURE_DIR")) return d;
    return SourcePath("tests/fixtures/gemma4");
  }
  static void SetUpTestSuite() {
    std::ifstream in(Dir() + "/tokenizer_cases.json");
    if (!in) return;
    cases_ = new json(json::parse(in));
    tok_ = new Tokenizer(ReadVocab(GgufFile::Open(Dir() + "/" + (*cases_)["gguf"].get<std::string>())));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete cases_;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << "no " << Dir() << "/tokenizer_cases.json";
  }
  static inline json* cases_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

TEST_F(Gemma4TinyModelCases, EncodeMatchesHfAndLlamaCpp) {
  int checked = 0;
  for (const json& c : (*cases_)["cases"]) {
    const std::string text = c["text"];
    const auto ids = [&](bool bos, bool special) {
      return tok_->Encode(text, {.add_bos = bos, .parse_special = special});
    };
    EXPECT_EQ(ids(false, true), c["hf"].get<std::vector<int32_t>>()) << Show(text);
    EXPECT_EQ(ids(false, true), c["llama"].get<std::vector<int32_t>>()) << Show(text);
    EXPECT_EQ(ids(true, true), c["hf_bos"].get<std::vector<int32_t>>()) << Show(text);
    EXPECT_EQ(ids(true, true), c["llama_bos"].get<std::vector<int32_t>>()) << Show(text);
    EXPECT_EQ(ids(false, false), c["llama_nospecial"].get<std::vector<int32_t>>()) << Show(text);
    ++checked;
  }
  testing::RecordMeasured("tiny-model tokenizer cases: %d strings x 5 modes\n", checked);
  EXPECT_GT(checked, 0);
}

TEST_F(Gemma4TinyModelCases, DecodeMatchesLlamaCpp) {
  int checked = 0;
  for (const json& c : (*cases_)["decode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok_->Decode(ids), c["llama"].get<std::string>()) << c.dump();
    EXPECT_EQ(tok_->Decode(ids, {.render_special = true}), c["llama_special"].get<std::string>()) << c.dump();
    ++checked;
  }
  testing::RecordMeasured("tiny-model decode cases: %d\n", checked);
}

}  // namespace
}  // namespace kvshare
