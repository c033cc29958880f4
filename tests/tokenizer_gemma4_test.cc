// The `gemma4` tokenizer (BPE by merge rank) on hand-made vocabularies: one rule
// per test, the plain quadratic twin (tokenizer_merge_bpe_twin.h) on random merge
// lists, the validation errors, and ReadVocab on small GGUFs. The same tokenizer
// against HF `tokenizers` is tokenizer_gemma4_fixture_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "gguf_writer.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/model/model.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "tokenizer_merge_bpe_twin.h"

namespace kvshare {
namespace {

using testing::GgufKv;

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

constexpr int kControl = 3, kUserDefined = 4, kByte = 6, kNormal = 1;

// <pad> <eos> <bos> <unk> <|turn>, "<|\"|>" (user-defined), the 256 byte tokens,
// then `pieces` (NORMAL) and `merges`.
VocabData MakeVocab(const std::vector<std::string>& pieces, const std::vector<std::string>& merges) {
  VocabData v;
  auto add = [&v](std::string piece, int type) {
    v.tokens.push_back(std::move(piece));
    v.scores.push_back(-1000.0f);
    v.token_types.push_back(type);
  };
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>", "<|turn>"}) add(s, kControl);
  add("<|\"|>", kUserDefined);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, kByte);
  }
  for (const auto& p : pieces) add(p, kNormal);
  v.pad = 0;
  v.eos = 1;
  v.bos = 2;
  v.unk = 3;
  v.model = "gemma4";
  v.merges = merges;
  return v;
}

constexpr int32_t ByteId(int b) { return 6 + b; }

std::vector<std::string> Pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.emplace_back(tok.TokenText(id));
  return out;
}

using Strings = std::vector<std::string>;

TEST(Gemma4Tokenizer, MergesByRankNotByLength) {
  const Strings pieces = {"a", "b", "c", "d", "ab", "bc", "abc", "cd", "bcd"};
  auto encode = [&](const Strings& merges, const std::string& text) {
    Tokenizer tok(MakeVocab(pieces, merges));
    return Pieces(tok, tok.Encode(text, {.add_bos = false}));
  };
  EXPECT_EQ(encode({"a b", "b c", "ab c"}, "abc"), (Strings{"abc"}));
  EXPECT_EQ(encode({"b c", "a b", "ab c"}, "abc"), (Strings{"a", "bc"}));  // a+bc is not listed
  EXPECT_EQ(encode({"c d", "b c", "bc d"}, "abcd"), (Strings{"a", "b", "cd"}));
  EXPECT_EQ(encode({"b c", "c d", "bc d"}, "abcd"), (Strings{"a", "bcd"}));
  // "abc" is a token, but with no merge to build it the word stays split.
  EXPECT_EQ(encode({"a b"}, "abc"), (Strings{"ab", "c"}));
}

TEST(Gemma4Tokenizer, EqualRanksMergeLeftmostFirst) {
  Tokenizer tok(MakeVocab({"a", "aa", "aaa"}, {"a a", "aa a"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("aaa", {.add_bos = false})), (Strings{"aaa"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("aaaa", {.add_bos = false})), (Strings{"aa", "aa"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("aaaaa", {.add_bos = false})), (Strings{"aa", "aaa"}));
  Tokenizer right(MakeVocab({"a", "aa", "aaa"}, {"a a", "a aa"}));
  EXPECT_EQ(Pieces(right, right.Encode("aaa", {.add_bos = false})), (Strings{"aa", "a"}));
}

TEST(Gemma4Tokenizer, SpacesBecomeU2581AndMerge) {
  Tokenizer tok(MakeVocab({"▁", "a", "b", "▁a", "▁▁"}, {"▁ a", "▁ ▁"}));
  EXPECT_EQ(Pieces(tok, tok.Encode(" a  b ", {.add_bos = false})), (Strings{"▁a", "▁▁", "b", "▁"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("▁a", {.add_bos = false})), (Strings{"▁a"}));  // literal ▁
  EXPECT_EQ(tok.Decode(tok.Encode(" a  b ")), " a  b ");
}

TEST(Gemma4Tokenizer, NewlineRunsAreSplitOff) {
  // Merges across a newline exist but never apply: runs are encoded apart.
  Tokenizer tok(MakeVocab({"a", "\n", "a\n", "\na", "\n\n"}, {"a \n", "\n a", "\n \n"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("a\na", {.add_bos = false})), (Strings{"a", "\n", "a"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("\n\n\na", {.add_bos = false})), (Strings{"\n\n", "\n", "a"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("\r\n", {.add_bos = false})), (Strings{"<0x0D>", "\n"}));
}

TEST(Gemma4Tokenizer, NewlineRunThatIsATokenIsWhole) {
  // Merges alone give "\n\n" + "\n" (the pair "\n\n" "\n" is not listed);
  // llama.cpp's Gemma 4 rule emits a newline run that is a token whole.
  Tokenizer tok(MakeVocab({"a", "\n", "\n\n", "\n\n\n", "aa", "aaa"}, {"\n \n", "\n \n\n", "a a", "a aa"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("x\n\n\ny", {.add_bos = false})), (Strings{"<0x78>", "\n\n\n", "<0x79>"}));
  EXPECT_EQ(Pieces(tok, tok.Encode("\n\n\n\n\n", {.add_bos = false})), (Strings{"\n\n", "\n\n", "\n"}));
  // Not for other runs: "aaa" is a token, merges give "aa" + "a".
  EXPECT_EQ(Pieces(tok, tok.Encode("aaa", {.add_bos = false})), (Strings{"aa", "a"}));
}

TEST(Gemma4Tokenizer, ByteFallbackAndUnk) {
  Tokenizer tok(MakeVocab({"a", "é", "aé"}, {"a é"}));
  EXPECT_EQ(tok.Encode("你", {.add_bos = false}), (std::vector<int32_t>{ByteId(0xE4), ByteId(0xBD), ByteId(0xA0)}));
  EXPECT_EQ(Pieces(tok, tok.Encode("aé", {.add_bos = false})), (Strings{"aé"}));
  EXPECT_EQ(tok.Decode(tok.Encode("a你é😀")), "a你é😀");
  // Ill-formed input becomes U+FFFD (here spelled as bytes).
  EXPECT_EQ(tok.Encode("a\xFF", {.add_bos = false}),
            (std::vector<int32_t>{*tok.TokenId("a"), ByteId(0xEF), ByteId(0xBF), ByteId(0xBD)}));
  // A character whose byte tokens are missing becomes <unk>.
  VocabData v = MakeVocab({"a", "aa"}, {"a a"});
  v.tokens[ByteId(0xBD)] = "<0xbd>";
  v.token_types[ByteId(0xBD)] = kNormal;
  Tokenizer no_bd(v);
  EXPECT_EQ(no_bd.Encode("a你a", {.add_bos = false}), (std::vector<int32_t>{6 + 256, 3, 6 + 256}));
}

TEST(Gemma4Tokenizer, SpecialTokensAndBos) {
  Tokenizer tok(MakeVocab({"a", "aa", "<", "|", "t", "u", "r", "n", ">", "\""}, {"a a"}));
  const int32_t turn = 4, quote = 5;
  EXPECT_EQ(tok.Encode("a<|turn>a", {.parse_special = true}),
            (std::vector<int32_t>{2, *tok.TokenId("a"), turn, *tok.TokenId("a")}));
  const auto plain = tok.Encode("<|turn><|\"|>", {.add_bos = false});
  EXPECT_EQ(plain.size(), 8u);  // "<|turn>" as 7 characters, then the user-defined token
  EXPECT_EQ(plain.back(), quote);
  EXPECT_EQ(tok.Decode(plain), "<|turn><|\"|>");
  EXPECT_EQ(tok.Encode(""), (std::vector<int32_t>{2}));
}

TEST(Gemma4Tokenizer, RandomVocabMatchesTwin) {
  // Random merge lists over a small alphabet: every listed pair is a token.
  std::mt19937 rng(11);
  const Strings alphabet = {"a", "b", "c", "▁", "\n", "é"};
  for (int round = 0; round < 20; ++round) {
    Strings pieces = alphabet, merges;
    for (int k = 0; k < 40; ++k) {
      std::uniform_int_distribution<size_t> any(0, pieces.size() - 1);
      const std::string l = pieces[any(rng)], r = pieces[any(rng)];
      if (std::find(merges.begin(), merges.end(), l + " " + r) != merges.end()) continue;
      merges.push_back(l + " " + r);
      if (std::find(pieces.begin(), pieces.end(), l + r) == pieces.end()) pieces.push_back(l + r);
    }
    const VocabData v = MakeVocab(pieces, merges);
    Tokenizer tok(v);
    const testing::MergeBpeTwin twin(v);
    std::uniform_int_distribution<size_t> unit(0, alphabet.size());
    for (int trial = 0; trial < 200; ++trial) {
      std::string text;
      for (int i = trial % 30; i > 0; --i) {
        const size_t u = unit(rng);
        text += u == alphabet.size() ? " " : alphabet[u];
      }
      ASSERT_EQ(tok.Encode(text, {.add_bos = false}), twin.Encode(text)) << "round " << round << " text " << Show(text);
    }
  }
}

TEST(Gemma4Tokenizer, RejectsBadVocab) {
  auto expect_error = [](VocabData v, const std::string& needle) {
    try {
      Tokenizer tok(v);
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const VocabData v = MakeVocab({"a", "b", "ab"}, {"a b"});
  EXPECT_NO_THROW(Tokenizer{v});
  {
    auto b = v;
    b.model = "gpt2";
    expect_error(b, "VocabData.model must be \"llama\" or \"gemma4\", got \"gpt2\"");
  }
  {
    auto b = v;
    b.merges.clear();
    expect_error(b, "VocabData.merges must not be empty for model \"gemma4\"");
  }
  {
    auto b = v;
    b.merges = {"ab"};
    expect_error(b, "VocabData.merges[0] = \"ab\" must be two tokens separated by a space");
  }
  {
    auto b = v;
    b.merges = {"a b", "a "};
    expect_error(b, "VocabData.merges[1] = \"a \" must be two tokens");
  }
  {
    auto b = v;
    b.merges = {"a x"};
    expect_error(b, "VocabData.merges[0] = \"a x\": right part \"x\" is not a token");
  }
  {
    auto b = v;
    b.merges = {"b a"};
    expect_error(b, "the merged piece \"ba\" is not a token");
  }
  {
    auto b = v;
    b.merges = {"a b", "a b"};
    expect_error(b, "VocabData.merges[1] = \"a b\" repeats merges[0]");
  }
  // "llama" ignores merges.
  {
    auto b = v;
    b.model = "llama";
    b.merges = {"junk"};
    EXPECT_NO_THROW(Tokenizer{b});
  }
}

// ---- ReadVocab on small GGUFs ----

testing::GgufSpec VocabSpec(const char* model, bool with_merges) {
  testing::GgufSpec s;
  s.kvs.push_back(GgufKv::Str("general.architecture", "gemma4"));
  if (model != nullptr) s.kvs.push_back(GgufKv::Str("tokenizer.ggml.model", model));
  s.kvs.push_back(GgufKv::StrArray("tokenizer.ggml.tokens",
                                   {"<pad>", "<eos>", "<bos>", "<unk>", "a", "b", "ab", "<|tool_response>"}));
  s.kvs.push_back(GgufKv::F32Array("tokenizer.ggml.scores", std::vector<float>(8, -1000.0f)));
  s.kvs.push_back(GgufKv::I32Array("tokenizer.ggml.token_type", {3, 3, 3, 3, 1, 1, 1, 4}));
  if (with_merges) s.kvs.push_back(GgufKv::StrArray("tokenizer.ggml.merges", {"a b"}));
  s.kvs.push_back(GgufKv::U32("tokenizer.ggml.bos_token_id", 2));
  s.kvs.push_back(GgufKv::U32("tokenizer.ggml.unknown_token_id", 3));
  s.kvs.push_back(GgufKv::Bool("tokenizer.ggml.add_bos_token", false));
  s.kvs.push_back(GgufKv::Bool("tokenizer.ggml.add_space_prefix", true));
  return s;
}

std::string ReadVocabError(const testing::GgufSpec& spec) {
  const auto bytes = spec.Build();
  try {
    ReadVocab(GgufFile::Parse(bytes.data(), bytes.size()));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Gemma4ReadVocab, ReadsModelAndMerges) {
  const auto bytes = VocabSpec("gemma4", true).Build();
  const VocabData v = ReadVocab(GgufFile::Parse(bytes.data(), bytes.size()));
  EXPECT_EQ(v.model, "gemma4");
  EXPECT_EQ(v.merges, (Strings{"a b"}));
  EXPECT_TRUE(v.add_bos);                 // forced, as llama.cpp does for gemma4
  EXPECT_FALSE(v.add_space_prefix);       // BPE: never a space prefix
  EXPECT_EQ(v.token_types[7], kControl);  // end of generation in llama.cpp: CONTROL
  Tokenizer tok(v);
  EXPECT_EQ(tok.Encode("ab"), (std::vector<int32_t>{2, 6}));
}

TEST(Gemma4ReadVocab, LlamaAndAbsentModel) {
  for (const char* model : {"llama", static_cast<const char*>(nullptr)}) {
    const auto bytes = VocabSpec(model, false).Build();
    const VocabData v = ReadVocab(GgufFile::Parse(bytes.data(), bytes.size()));
    EXPECT_EQ(v.model, "llama");
    EXPECT_TRUE(v.merges.empty());
    EXPECT_FALSE(v.add_bos);  // as stored
    EXPECT_TRUE(v.add_space_prefix);
    EXPECT_EQ(v.token_types[7], kControl);  // end of generation in llama.cpp, for any model
  }
}

// llama.cpp makes <end_of_turn> CONTROL whatever type the file gives it (the
// EmbeddingGemma converter writes it NORMAL): its text is then a token only with
// parse_special, and decoding hides it. Before, kvshare kept it NORMAL and
// tokenized "<end_of_turn>" as characters even with parse_special.
TEST(Gemma4ReadVocab, EndOfTurnIsControlInALlamaVocab) {
  testing::GgufSpec s;
  s.kvs.push_back(GgufKv::Str("general.architecture", "gemma-embedding"));
  s.kvs.push_back(GgufKv::Str("tokenizer.ggml.model", "llama"));
  s.kvs.push_back(GgufKv::StrArray("tokenizer.ggml.tokens", {"<pad>", "<eos>", "<bos>", "<unk>", "<end_of_turn>", "<",
                                                             "e", "n", "d", "_", "o", "f", "t", "u", "r", ">"}));
  s.kvs.push_back(GgufKv::F32Array("tokenizer.ggml.scores", std::vector<float>(16, 0.0f)));
  s.kvs.push_back(GgufKv::I32Array("tokenizer.ggml.token_type", {3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  s.kvs.push_back(GgufKv::U32("tokenizer.ggml.unknown_token_id", 3));
  const auto bytes = s.Build();
  const VocabData v = ReadVocab(GgufFile::Parse(bytes.data(), bytes.size()));
  EXPECT_EQ(v.token_types[4], kControl);
  const Tokenizer tok(v);
  EXPECT_EQ(tok.Encode("<end_of_turn>", {.add_bos = false, .parse_special = true}), (std::vector<int32_t>{4}));
  EXPECT_EQ(tok.Encode("<end_of_turn>", {.add_bos = false}).size(), 13u);
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{4}), "");
  EXPECT_TRUE(tok.IsEndOfGeneration(4));
}

TEST(Gemma4ReadVocab, RefusesUnknownModelAndMissingMerges) {
  EXPECT_EQ(ReadVocabError(VocabSpec("gpt2", true)),
            "tokenizer.ggml.model = \"gpt2\" is not supported (supported: \"llama\", \"gemma4\")");
  EXPECT_EQ(ReadVocabError(VocabSpec("gemma4", false)),
            "tokenizer.ggml.merges is missing; it is required for tokenizer.ggml.model = \"gemma4\"");
}

}  // namespace
}  // namespace kvshare
