// The grammar mask on the default model's real vocabulary (262144 tokens,
// SentencePiece pieces with "▁", byte-fallback tokens <0xNN>, control tokens):
// documents tokenized by the tokenizer itself are allowed token by token and
// end with EOS, the trie walk equals a scan of every token at a few states,
// and special tokens are never allowed. Skipped without the model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvshare/gguf/gguf.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/model/model.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_default_path.h"

namespace kvshare {
namespace {

std::string ModelPath() { return testing::DefaultModelPath(); }

class GemmaGrammar : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(ModelPath())) return;
    tok_ = new Tokenizer(ReadVocab(GgufFile::Open(ModelPath())));
    trie_ = new std::shared_ptr<const TokenTrie>(TokenTrie::FromTokenizer(*tok_));
  }
  static void TearDownTestSuite() {
    delete trie_;
    delete tok_;
    trie_ = nullptr;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << "model not found at " << ModelPath();
  }
  static bool Bit(const std::vector<std::uint64_t>& m, std::int32_t id) {
    return (m[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
  }
  static inline Tokenizer* tok_ = nullptr;
  static inline std::shared_ptr<const TokenTrie>* trie_ = nullptr;
};

constexpr const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "note": {"type": "string"}, "n": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}}, "required": ["name", "n"]})";

TEST_F(GemmaGrammar, TokenizedDocumentsAreAllowedStepByStepAndEndWithEos) {
  const auto grammar = CompileJsonSchema(kSchema);
  const std::vector<std::string> docs = {
      R"({"name": "Grüße aus Köln", "note": "東京 \"quoted\"\n😀 \u00e9", "n": -12.5e3, "tags": ["a", "b c"]})",
      "{\n  \"name\": \"Ann\",\n  \"n\": 0\n}",
      R"( {"name":"","n":1})",
  };
  std::vector<std::uint64_t> mask((static_cast<std::size_t>(tok_->vocab_size()) + 63) / 64);
  for (const std::string& doc : docs) {
    const std::vector<std::int32_t> ids = tok_->Encode(doc, {.add_bos = false});
    ASSERT_EQ(tok_->Decode(ids), doc);
    GrammarMatcher m(grammar, *trie_, {tok_->eos_id(), tok_->end_of_turn_id()});
    for (std::size_t i = 0; i < ids.size(); ++i) {
      m.FillNextTokenMask(mask);
      ASSERT_TRUE(Bit(mask, ids[i])) << doc << "\ntoken " << i << " '" << tok_->TokenText(ids[i]) << "'";
      EXPECT_FALSE(Bit(mask, tok_->eos_id())) << doc << " token " << i;
      ASSERT_TRUE(m.AcceptToken(ids[i]));
    }
    m.FillNextTokenMask(mask);
    EXPECT_TRUE(Bit(mask, tok_->eos_id())) << doc;
    EXPECT_TRUE(Bit(mask, tok_->end_of_turn_id())) << doc;
    EXPECT_FALSE(Bit(mask, tok_->bos_id())) << doc;
  }
}

TEST_F(GemmaGrammar, TrieWalkEqualsAScanOfTheWholeVocabulary) {
  const auto grammar = CompileJsonSchema(kSchema);
  // States: the start, inside an unbounded string, inside a bounded one
  // after a cut character (the first byte of "ü"), before a number.
  for (const std::string& prefix : {std::string(), std::string(R"({"name": "a", "note": "x)"),
                                    std::string("{\"name\": \"Gr\xC3"), std::string(R"({"name": "a", "n": )")}) {
    GrammarMatcher m(grammar, *trie_, {tok_->eos_id()});
    ASSERT_TRUE(m.AcceptBytes(prefix)) << prefix;
    std::vector<std::uint64_t> mask((static_cast<std::size_t>(tok_->vocab_size()) + 63) / 64);
    m.FillNextTokenMask(mask);
    int allowed = 0;
    for (std::int32_t id = 0; id < tok_->vocab_size(); ++id) {
      const bool special = IsSpecialToken(*tok_, id);
      const std::string_view bytes = tok_->TokenBytes(id);
      const bool want = id == tok_->eos_id() ? m.CanEnd() : !special && !bytes.empty() && m.CanAcceptBytes(bytes);
      ASSERT_EQ(Bit(mask, id), want) << "prefix '" << prefix << "' token " << id << " '" << tok_->TokenText(id) << "'";
      allowed += want;
    }
    EXPECT_GT(allowed, 0) << prefix;
  }
}

}  // namespace
}  // namespace kvshare
