// Generator stop rules on a tiny random gemma3 GGUF (model_tiny_gemma.h) with a
// synthetic 50-token vocabulary: GenerateOptions::stop_tokens (a chat format's
// end of turn) ends generation at that token, and only there.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kvshare/model/model.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_tiny_gemma.h"
#include "tokenizer_tiny_vocab.h"

namespace kvshare {
namespace {

using testing::TinyVocab;

TEST(Generator, StopTokensEndGeneration) {
  const testing::TinyGemmaSpec spec;
  const testing::TempGguf file(spec, "generator_stop");
  const std::unique_ptr<Model> model = Model::Load(file.path);
  const Tokenizer tok(TinyVocab(spec.n_vocab));
  Generator gen(*model, tok, nullptr, {.max_context = 64});
  const std::vector<int32_t> prompt = {2, 10, 20, 30};

  // Greedy without stop tokens; every id >= 4 is one character, so the text
  // gives the sequence.
  const int n = 6;
  GenerateOptions o;
  o.max_new_tokens = n;
  std::string text;
  GenerateStats s = gen.Generate(prompt, o, [&](std::string_view t) { text += t; });
  ASSERT_EQ(s.stop_reason, "max_tokens");
  ASSERT_EQ(text.size(), static_cast<std::size_t>(n));
  std::vector<int32_t> seq;
  for (char c : text) seq.push_back(c - '0');
  // Stop at the last token that is new where it occurs (the tiny model repeats
  // tokens: it may be the first one).
  std::size_t k = 0;
  for (std::size_t i = 1; i < seq.size(); ++i) {
    if (std::find(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(i), seq[i]) ==
        seq.begin() + static_cast<std::ptrdiff_t>(i)) {
      k = i;
    }
  }
  gen.Reset();
  o.stop_tokens = {seq[k]};
  text.clear();
  s = gen.Generate(prompt, o, [&](std::string_view t) { text += t; });
  EXPECT_EQ(s.stop_reason, "end_of_turn");
  EXPECT_EQ(s.generated_tokens, static_cast<std::int64_t>(k + 1));
  EXPECT_EQ(s.last_token, seq[k]);
  EXPECT_EQ(text, tok.Decode(std::vector<int32_t>(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(k))))
      << "the stop token is not printed";
  // A stop token that never comes changes nothing.
  gen.Reset();
  o.stop_tokens = {spec.n_vocab - 1 == seq[k] ? spec.n_vocab - 2 : spec.n_vocab - 1};
  if (std::find(seq.begin(), seq.end(), o.stop_tokens[0]) == seq.end()) {
    s = gen.Generate(prompt, o, nullptr);
    EXPECT_EQ(s.stop_reason, "max_tokens");
    EXPECT_EQ(s.generated_tokens, n);
  }
}

}  // namespace
}  // namespace kvshare
