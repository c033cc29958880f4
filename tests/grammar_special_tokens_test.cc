// Special tokens (IsSpecialToken) never inside constrained text, on the
// Gemma 4 and Gemma 3n fixtures' vocabularies (tests/fixtures/) and the
// default model's Gemma 3 one (skipped without it): Gemma 4's call and
// channel markers are USER_DEFINED tokens with printable text, which a trie
// of every token's text lets into JSON strings (checked first, so the tests
// below cannot pass on a vocabulary that never had the problem); then with
// every special token's logit raised far above the rest, the masked argmax
// under JSON grammars never picks one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common_source_path.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_default_path.h"

namespace kvshare {
namespace {

std::string Fixture(const std::string& rel) { return testing::SourcePath("tests/fixtures/") + rel; }

std::unique_ptr<Tokenizer> Load(const std::string& path) {
  if (!std::filesystem::exists(path)) return nullptr;
  return std::make_unique<Tokenizer>(ReadVocab(GgufFile::Open(path)));
}

bool Bit(const std::vector<std::uint64_t>& m, std::int32_t id) {
  return (m[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
}

std::int32_t Id(const Tokenizer& tok, std::string_view text) {
  const auto id = tok.TokenId(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(0);
}

// Strings of every kind the compiler has: unbounded, bounded, pattern,
// format, enum; and numbers, arrays, a nested object.
constexpr const char* kSchema = R"({"type": "object", "properties": {
    "note": {"type": "string"}, "name": {"type": "string", "maxLength": 12},
    "code": {"type": "string", "pattern": "^[A-Z<>|_]{2,6}$"}, "day": {"type": "string", "format": "date"},
    "kind": {"enum": ["a", "<b>"]}, "n": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "sub": {"type": "object", "properties": {"x": {"type": "string"}}}},
  "required": ["note", "name", "code", "day", "kind", "n", "tags", "sub"]})";

TEST(SpecialTokens, Gemma4MarkersAreSpecialAndOnlyWhitespaceRunsAreNot) {
  const auto tok = Load(Fixture("gemma4/e2b.f32.gguf"));
  if (!tok) GTEST_SKIP() << "no gemma4 fixture";
  const auto trie = TokenTrie::FromTokenizer(*tok);
  for (const char* m : {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|\"|>", "<|tool_response>",
                        "<|turn>", "<eos>", "<bos>", "<pad>"}) {
    EXPECT_TRUE(IsSpecialToken(*tok, Id(*tok, m))) << m;
    EXPECT_TRUE(trie->token_bytes(Id(*tok, m)).empty()) << m;
  }
  EXPECT_EQ(tok->Type(Id(*tok, "<|channel>")), TokenType::kUserDefined) << "the case this is about";
  int plain = 0;
  for (std::int32_t id = 0; id < tok->vocab_size(); ++id) {
    const TokenType t = tok->Type(id);
    if (t == TokenType::kNormal || t == TokenType::kByte) {
      EXPECT_FALSE(IsSpecialToken(*tok, id)) << id;
      EXPECT_EQ(trie->token_bytes(id), tok->TokenBytes(id)) << id;
      ++plain;
    }
  }
  EXPECT_GT(plain, 400);
  EXPECT_THROW(IsSpecialToken(*tok, tok->vocab_size()), Error);
}

TEST(SpecialTokens, Gemma3AddedTokensAreSpecialButWhitespaceRunsAreNot) {
  const auto tok = Load(testing::DefaultModelPath());
  if (!tok) GTEST_SKIP() << "model not found at " << testing::DefaultModelPath();
  for (const char* m :
       {"<start_of_image>", "<end_of_image>", "[multimodal]", "<table>", "<start_of_turn>", "<unused0>"})
    EXPECT_TRUE(IsSpecialToken(*tok, Id(*tok, m))) << m;
  for (const char* w : {"\n", "\n\n", "  ", "\t\t"}) {
    EXPECT_EQ(tok->Type(Id(*tok, w)), TokenType::kUserDefined);
    EXPECT_FALSE(IsSpecialToken(*tok, Id(*tok, w))) << "whitespace run of " << std::string(w).size();
  }
}

// The cause: a trie of every token's decoded text (CONTROL aside, as the
// trie was built before) takes Gemma 4's user-defined markers as string
// content.
TEST(SpecialTokens, ATrieOfEveryTokensTextLetsMarkersIntoStrings) {
  const auto tok = Load(Fixture("gemma4/e2b.f32.gguf"));
  if (!tok) GTEST_SKIP() << "no gemma4 fixture";
  std::vector<std::string> bytes(static_cast<std::size_t>(tok->vocab_size()));
  for (std::int32_t id = 0; id < tok->vocab_size(); ++id) bytes[static_cast<std::size_t>(id)] = tok->TokenBytes(id);
  const auto loose = std::make_shared<const TokenTrie>(bytes);
  const auto grammar = CompileJsonSchema(kSchema);
  std::vector<std::uint64_t> mask((static_cast<std::size_t>(tok->vocab_size()) + 63) / 64);
  for (const auto& trie : {loose, TokenTrie::FromTokenizer(*tok)}) {
    GrammarMatcher m(grammar, trie, {tok->eos_id()});
    ASSERT_TRUE(m.AcceptBytes(R"({"note": "x)"));
    m.FillNextTokenMask(mask);
    for (const char* marker : {"<|tool_call>", "<channel|>", "<|channel>"}) {
      EXPECT_EQ(Bit(mask, Id(*tok, marker)), trie == loose) << marker;
    }
  }
}

// Masked argmax of random logits with every special token but the end ones
// raised by 1e4, for `steps` tokens or until the end: no special token is
// ever picked, and the matcher takes each one.
void RunBiased(const Tokenizer& tok, const std::shared_ptr<const TokenTrie>& trie,
               const std::shared_ptr<const Grammar>& grammar, std::uint64_t seed, int steps) {
  const std::vector<std::int32_t> ends = {tok.eos_id()};
  GrammarMatcher m(grammar, trie, ends);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::int32_t> special;
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (id != tok.eos_id() && IsSpecialToken(tok, id)) special.push_back(id);
  }
  ASSERT_FALSE(special.empty());
  std::vector<float> logits(static_cast<std::size_t>(tok.vocab_size()));
  std::string text;
  for (int i = 0; i < steps && !m.Terminated(); ++i) {
    for (float& x : logits) x = normal(rng);
    for (std::int32_t id : special) logits[static_cast<std::size_t>(id)] += 1e4f;
    m.MaskLogits(logits);
    const auto best = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_FALSE(IsSpecialToken(tok, best) && best != tok.eos_id())
        << "seed " << seed << " step " << i << ": " << tok.TokenText(best) << " after " << text;
    ASSERT_TRUE(m.AcceptToken(best)) << text;
    text += tok.TokenBytes(best);
  }
  EXPECT_FALSE(text.empty());
}

void RunVocabulary(const Tokenizer& tok, int seeds, int steps) {
  const auto trie = TokenTrie::FromTokenizer(tok);
  for (const auto& grammar : {CompileJsonSchema(kSchema), AnyJsonObjectGrammar()}) {
    for (int seed = 0; seed < seeds; ++seed) RunBiased(tok, trie, grammar, static_cast<std::uint64_t>(seed), steps);
  }
}

TEST(SpecialTokens, BiasedTowardSpecialTokensJsonNeverHoldsOneGemma4) {
  const auto tok = Load(Fixture("gemma4/e2b.f32.gguf"));
  if (!tok) GTEST_SKIP() << "no gemma4 fixture";
  RunVocabulary(*tok, 12, 300);
}

TEST(SpecialTokens, BiasedTowardSpecialTokensJsonNeverHoldsOneGemma3n) {
  const auto tok = Load(Fixture("gemma3n/e2b.f32.gguf"));
  if (!tok) GTEST_SKIP() << "no gemma3n fixture";
  RunVocabulary(*tok, 12, 300);
}

TEST(SpecialTokens, BiasedTowardSpecialTokensJsonNeverHoldsOneGemma3) {
  const auto tok = Load(testing::DefaultModelPath());
  if (!tok) GTEST_SKIP() << "model not found at " << testing::DefaultModelPath();
  RunVocabulary(*tok, 1, 40);
}

}  // namespace
}  // namespace kvshare
