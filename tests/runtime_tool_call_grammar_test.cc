// Lazy grammars (kvshare/grammar/grammar.h LazyGrammar) and the lazy grammar of
// strict tool calls under tool_choice "auto" (kvshare/runtime/tool_calls.h
// LazyToolCallGrammar): free text stays free, a trigger split across tokens
// is found, a token that would fire it with bytes the body refuses is
// masked, and once a call opens its arguments validate. The trigger is
// forced (a logit bias in the scheduler, forced ids in the matcher runs) and
// each test asserts GrammarMatcher::Triggered() or the call it produced, so
// none can pass on free text alone. Gemma 4: the tiny fixture
// (tests/fixtures/gemma4/e2b.f32.gguf, "<|tool_call>" one special token) run
// by the scheduler; Gemma 3: the default model's vocabulary (skipped without
// it) under random logits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common_source_path.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/runtime/tool_calls.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_default_path.h"
#include "runtime_scheduler_util.h"

namespace kvshare {
namespace {

using nlohmann::json;

// Arguments a random or unconstrained model does not write by chance.
constexpr const char* kLookupSchema =
    R"({"type": "object", "properties": {"k": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "integer"}},)"
    R"( "required": ["k", "n"], "additionalProperties": false})";

// kLookupSchema checked by hand (the test has no JSON Schema validator).
bool ValidLookup(const std::string& arguments) {
  const json a = json::parse(arguments, nullptr, false);
  if (!a.is_object() || a.size() != 2 || !a.contains("k") || !a.contains("n")) return false;
  return (a["k"] == "a" || a["k"] == "b") && a["n"].is_number_integer();
}

std::vector<OfferedTool> LookupTool(bool strict) {
  return {OfferedTool{{"lookup", "Look a key up", kLookupSchema}, strict}};
}

bool Bit(const std::vector<std::uint64_t>& m, std::int32_t id) {
  return (m[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
}

// ---- The mechanism, on a vocabulary small enough to list ----

// 0 "a", 1 "<", 2 "c>", 3 "<c>", 4 "x", 5 "}", 6 "c>y", 7 end (no bytes).
std::shared_ptr<const TokenTrie> SmallVocab() {
  const std::vector<std::string> bytes = {"a", "<", "c>", "<c>", "x", "}", "c>y", ""};
  return std::make_shared<const TokenTrie>(bytes);
}

std::shared_ptr<const Grammar> SmallLazy(bool repeat) {
  return LazyGrammar(LiteralGrammar("<c>x}"), {.trigger = LiteralGrammar("<c>"), .token_text = {}, .repeat = repeat});
}

TEST(LazyGrammar, FreeTextThenTheBodyFromTheTriggersFirstByte) {
  GrammarMatcher m(SmallLazy(false), SmallVocab(), {7});
  std::vector<std::uint64_t> mask(1);
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], 0xFFu) << "free text: every token, the end included";
  ASSERT_TRUE(m.AcceptToken(0));
  ASSERT_TRUE(m.AcceptToken(1));  // "<": a match in progress
  m.FillNextTokenMask(mask);
  EXPECT_TRUE(Bit(mask, 2)) << "\"c>\" completes the trigger, and the body takes \"<c>\"";
  EXPECT_FALSE(Bit(mask, 6)) << "\"c>y\" completes it with a 'y' the body refuses";
  EXPECT_EQ(m.Triggered(), 0);
  ASSERT_TRUE(m.AcceptToken(2));
  EXPECT_EQ(m.Triggered(), 1);
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], 1u << 4) << "inside the body: only 'x', no end";
  EXPECT_FALSE(m.CanEnd());
  ASSERT_TRUE(m.AcceptToken(4));
  ASSERT_TRUE(m.AcceptToken(5));
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], 1u << 7) << "closed, no repeat: only the end";
  EXPECT_TRUE(m.AcceptToken(7));
  EXPECT_TRUE(m.Terminated());
}

TEST(LazyGrammar, RepeatGoesBackToFreeTextAndAWholeTriggerTokenFires) {
  GrammarMatcher m(SmallLazy(true), SmallVocab(), {7});
  std::vector<std::uint64_t> mask(1);
  for (int call = 1; call <= 2; ++call) {
    ASSERT_TRUE(m.AcceptToken(3));  // "<c>" in one token
    EXPECT_EQ(m.Triggered(), call);
    EXPECT_FALSE(m.AcceptToken(0)) << "the body refuses free text";
    ASSERT_TRUE(m.AcceptToken(4));
    ASSERT_TRUE(m.AcceptToken(5));
    m.FillNextTokenMask(mask);
    EXPECT_EQ(mask[0], 0xFFu) << "free again after call " << call;
    ASSERT_TRUE(m.AcceptToken(0));
  }
  EXPECT_TRUE(m.AcceptToken(7));
}

TEST(LazyGrammar, ControlTokensWithTextAndBadOptionsAreRefused) {
  // Token 7 (no bytes in the trie) stands for "<c>": it fires the trigger.
  const auto g = LazyGrammar(LiteralGrammar("<c>x}"), {.trigger = LiteralGrammar("<c>"), .token_text = {{7, "<c>"}}});
  GrammarMatcher m(g, SmallVocab(), {});
  ASSERT_TRUE(m.AcceptToken(7));
  EXPECT_EQ(m.Triggered(), 1);
  EXPECT_THROW(LazyGrammar(nullptr, {.trigger = LiteralGrammar("x")}), Error);
  EXPECT_THROW(LazyGrammar(LiteralGrammar("x"), {}), Error);
  EXPECT_THROW(LiteralGrammar(""), Error);
  EXPECT_THROW(
      GrammarMatcher(LazyGrammar(LiteralGrammar("x"), {.trigger = LiteralGrammar("x"), .token_text = {{99, "x"}}}),
                     SmallVocab(), {}),
      Error);
}

// The tokens that can begin a trigger are scanned once per vocabulary,
// trigger and token_text and kept between matchers: each of three matchers on
// one vocabulary must still see its own.
TEST(LazyGrammar, TriggerStartersAreKeptPerVocabularyTriggerAndTokenText) {
  // SmallVocab's tokens and 8 "xa".
  const auto vocab =
      std::make_shared<const TokenTrie>(std::vector<std::string>{"a", "<", "c>", "<c>", "x", "}", "c>y", "", "xa"});
  std::vector<std::uint64_t> mask(1);
  GrammarMatcher angle(SmallLazy(false), vocab, {7});
  angle.FillNextTokenMask(mask);
  EXPECT_TRUE(Bit(mask, 8)) << "\"xa\" is free text under the trigger \"<c>\"";
  GrammarMatcher ex(LazyGrammar(LiteralGrammar("x}"), {.trigger = LiteralGrammar("x")}), vocab, {7});
  ex.FillNextTokenMask(mask);
  EXPECT_FALSE(Bit(mask, 8)) << "\"xa\" fires the trigger \"x\" with an 'a' the body refuses";
  EXPECT_TRUE(Bit(mask, 4));
  GrammarMatcher text(
      LazyGrammar(LiteralGrammar("<c>x}"), {.trigger = LiteralGrammar("<c>"), .token_text = {{7, "<c>y"}}}), vocab, {});
  text.FillNextTokenMask(mask);
  EXPECT_FALSE(Bit(mask, 7)) << "token 7 stands for \"<c>y\": the trigger, then a 'y' the body refuses";
  EXPECT_TRUE(Bit(mask, 3));
}

// ---- Tool calls on the fixtures ----

std::string Fixture(const std::string& rel) { return testing::SourcePath("tests/fixtures/") + rel; }

using Markers = std::vector<std::pair<std::int32_t, std::string>>;

// The call markers the grammar is told the text of: those that are special
// tokens (all three in the fixture: two user-defined, one control), as
// ChatTemplate finds them.
Markers GrammarMarkers(const Tokenizer& tok) {
  Markers out;
  for (const char* m : {"<|tool_call>", "<tool_call|>", "<|\"|>"}) {
    if (auto id = tok.TokenId(m); id && IsSpecialToken(tok, *id)) out.emplace_back(*id, m);
  }
  return out;
}

// The call markers that decode to no text (control tokens), whose text the
// server writes into what its parser reads.
Markers DecodeMarkers(const Tokenizer& tok) {
  Markers out;
  for (const char* m : {"<|tool_call>", "<tool_call|>", "<|\"|>"}) {
    if (auto id = tok.TokenId(m); id && tok.TokenBytes(*id).empty()) out.emplace_back(*id, m);
  }
  return out;
}

// The output as the server feeds its parser: marker tokens as their text.
std::string MarkedText(const std::vector<OutputToken>& tokens, const Markers& markers) {
  std::string out;
  for (const OutputToken& t : tokens) {
    for (const auto& [id, text] : markers) {
      if (id == t.token) out += text;
    }
    out += t.text;
  }
  return out;
}

std::vector<ToolCall> Calls(const std::string& text, ToolCallSyntax syntax, std::string* content = nullptr) {
  ToolCallParser p({.syntax = syntax, .names = {"lookup"}});
  ToolCallDelta d = p.Feed(text);
  ToolCallDelta rest = p.Finish();
  for (ToolCall& c : rest.calls) d.calls.push_back(std::move(c));
  if (content != nullptr) *content = d.content + rest.content;
  return d.calls;
}

class Gemma4ToolGrammar : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Fixture("gemma4/e2b.f32.gguf"))) GTEST_SKIP() << "no gemma4 fixture";
    model_ = Model::Load(Fixture("gemma4/e2b.f32.gguf"));
    tok_ = std::make_unique<Tokenizer>(ReadVocab(model_->gguf()));
    chat_ = std::make_unique<ChatTemplate>(ChatFormat::kGemma4, *tok_);
    call_open_ = *tok_->TokenId("<|tool_call>");
  }
  RequestOptions Request(std::shared_ptr<const Grammar> grammar, float temperature, std::uint64_t seed) const {
    ChatTemplateOptions co;
    co.tools = {{"lookup", "Look a key up", kLookupSchema}};
    RequestOptions r;
    r.prompt = chat_->Encode(std::vector<ChatMessage>{{"user", "Look up a."}}, co);
    r.max_tokens = 64;
    r.stop_tokens = chat_->StopTokens();
    for (std::int32_t t : chat_->ToolStopTokens()) r.stop_tokens.push_back(t);
    r.sampler = {.temperature = temperature, .seed = seed};
    r.grammar = std::move(grammar);
    r.logit_bias = {{call_open_, 100.0f}};  // the random model would never open a call
    return r;
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> chat_;
  std::int32_t call_open_ = -1;
};

TEST_F(Gemma4ToolGrammar, ForcedMarkerGivesOneCallWhoseArgumentsValidate) {
  Scheduler s(*model_, *tok_, nullptr, {.slots = 3, .max_context = 512, .step_tokens = 64});
  const auto grammar =
      LazyToolCallGrammar(LookupTool(true), ToolCallSyntax::kGemma4, /*parallel=*/false, GrammarMarkers(*tok_));
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (std::uint64_t seed = 0; seed < 3; ++seed) {
    handles.push_back(testing::MustSubmit(s, Request(grammar, seed == 0 ? 0.0f : 1.5f, seed)));
  }
  const std::vector<testing::Result> res = testing::RunAll(s, handles);
  for (const testing::Result& r : res) {
    const std::string text = MarkedText(r.tokens, DecodeMarkers(*tok_));
    ASSERT_FALSE(r.tokens.empty());
    EXPECT_EQ(r.tokens[0].token, call_open_) << "the bias opened a call: the constrained branch ran";
    const std::vector<ToolCall> calls = Calls(text, ToolCallSyntax::kGemma4);
    ASSERT_EQ(calls.size(), 1u) << text;
    EXPECT_EQ(calls[0].name, "lookup");
    EXPECT_TRUE(ValidLookup(calls[0].arguments)) << calls[0].arguments;
    EXPECT_EQ(r.last.reason, FinishReason::kStop) << text << " (" << r.last.detail << ")";
  }
}

TEST_F(Gemma4ToolGrammar, WithoutTheGrammarTheForcedCallIsNotValid) {
  // The same forced opening, unconstrained: the fixture writes no valid call,
  // so the test above does not pass by the model's own doing.
  Scheduler s(*model_, *tok_, nullptr, {.slots = 1, .max_context = 512, .step_tokens = 64});
  const std::vector<testing::Result> res = testing::RunAll(s, {testing::MustSubmit(s, Request(nullptr, 0.0f, 0))});
  ASSERT_FALSE(res[0].tokens.empty());
  EXPECT_EQ(res[0].tokens[0].token, call_open_);
  for (const ToolCall& c : Calls(MarkedText(res[0].tokens, DecodeMarkers(*tok_)), ToolCallSyntax::kGemma4)) {
    EXPECT_FALSE(ValidLookup(c.arguments)) << c.arguments;
  }
}

// Masked argmax of seeded random logits; `force` ids are raised far above the
// rest, in order, each while its step comes (the way a logit bias forces;
// -1: that step is free).
std::vector<std::int32_t> RandomRun(GrammarMatcher& m, std::int32_t vocab, const std::vector<std::int32_t>& force,
                                    std::uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  std::vector<std::int32_t> out;
  for (int i = 0; i < steps && !m.Terminated(); ++i) {
    for (float& x : logits) x = normal(rng);
    if (static_cast<std::size_t>(i) < force.size() && force[static_cast<std::size_t>(i)] >= 0) {
      logits[static_cast<std::size_t>(force[static_cast<std::size_t>(i)])] = 1e4f;
    }
    m.MaskLogits(logits);
    const auto best = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_TRUE(m.AcceptToken(best));
    out.push_back(best);
  }
  return out;
}

TEST_F(Gemma4ToolGrammar, ParallelCallsUnderRandomLogitsAllValidate) {
  const Markers markers = GrammarMarkers(*tok_), decoded = DecodeMarkers(*tok_);
  const auto trie = TokenTrie::FromTokenizer(*tok_);
  const std::int32_t end = *tok_->TokenId("<|tool_response>");
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    GrammarMatcher m(LazyToolCallGrammar(LookupTool(true), ToolCallSyntax::kGemma4, true, markers), trie, {end});
    // Free text, then a call opened twice; between and after, random tokens.
    const std::vector<std::int32_t> force = {-1, -1, call_open_};
    const std::vector<std::int32_t> ids = RandomRun(m, tok_->vocab_size(), force, seed, 200);
    std::string text;
    for (std::int32_t id : ids) {
      text += tok_->TokenBytes(id);
      for (const auto& [mid, mt] : decoded) {
        if (mid == id) text += mt;
      }
    }
    EXPECT_GE(m.Triggered(), 1) << text;
    std::string content;
    const std::vector<ToolCall> calls = Calls(text, ToolCallSyntax::kGemma4, &content);
    // Every opened call that was closed is a valid one; an unclosed last one
    // (the run's length) is dropped, and no markup is left in the content.
    const int closed = m.Triggered() - (m.Terminated() || m.CanEnd() ? 0 : 1);
    EXPECT_EQ(static_cast<int>(calls.size()), closed) << text;
    for (const ToolCall& c : calls) EXPECT_TRUE(ValidLookup(c.arguments)) << c.arguments;
    EXPECT_EQ(content.find("<|tool_call>"), std::string::npos) << content;
  }
}

// With every special token raised far above the rest once the call is open:
// inside the call only the markers the grammar is told about are taken
// (where the notation has them), never another special token.
TEST_F(Gemma4ToolGrammar, InsideACallNoOtherSpecialTokenIsTaken) {
  const Markers markers = GrammarMarkers(*tok_);
  ASSERT_EQ(markers.size(), 3u);
  const auto trie = TokenTrie::FromTokenizer(*tok_);
  const std::int32_t end = *tok_->TokenId("<|tool_response>");
  std::vector<std::int32_t> special;
  for (std::int32_t id = 0; id < tok_->vocab_size(); ++id) {
    if (IsSpecialToken(*tok_, id) && id != end) special.push_back(id);
  }
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<std::size_t>(tok_->vocab_size()));
  int closed = 0, quotes = 0;
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    GrammarMatcher m(LazyToolCallGrammar(LookupTool(true), ToolCallSyntax::kGemma4, false, markers), trie, {end});
    ASSERT_TRUE(m.AcceptToken(call_open_));
    std::string text = "<|tool_call>";
    for (int i = 0; i < 120 && !m.CanEnd(); ++i) {
      for (float& x : logits) x = normal(rng);
      for (std::int32_t id : special) logits[static_cast<std::size_t>(id)] += 1e4f;
      m.MaskLogits(logits);
      const auto best = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      const bool marker = std::any_of(markers.begin(), markers.end(), [&](const auto& mk) { return mk.first == best; });
      ASSERT_TRUE(marker || !IsSpecialToken(*tok_, best)) << tok_->TokenText(best) << " after " << text;
      quotes += best == *tok_->TokenId("<|\"|>");
      ASSERT_TRUE(m.AcceptToken(best));
      text += tok_->TokenBytes(best);
    }
    if (!m.CanEnd()) continue;
    ++closed;
    const std::vector<ToolCall> calls = Calls(text, ToolCallSyntax::kGemma4);
    ASSERT_EQ(calls.size(), 1u) << text;
    EXPECT_TRUE(ValidLookup(calls[0].arguments)) << text;
  }
  EXPECT_GT(closed, 0);
  EXPECT_GT(quotes, 0) << "the biased quote marker is taken where a string opens";
}

// The issue's case: sampled json_schema output at temperature 1 with the
// special tokens biased up holds none of them (unconstrained, the same
// requests do, so the bias reaches them).
TEST_F(Gemma4ToolGrammar, JsonSchemaOutputNeverHoldsSpecialTokens) {
  Scheduler s(*model_, *tok_, nullptr, {.slots = 4, .max_context = 512, .step_tokens = 64});
  const auto grammar = CompileJsonSchema(
      R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "string"}}}})");
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (std::uint64_t seed = 0; seed < 12; ++seed) {
    RequestOptions r = Request(seed < 10 ? grammar : nullptr, 1.0f, seed);
    r.max_tokens = 40;
    r.logit_bias.clear();
    for (std::int32_t id = 0; id < tok_->vocab_size(); ++id) {
      const bool ends = std::find(r.stop_tokens.begin(), r.stop_tokens.end(), id) != r.stop_tokens.end();
      if (IsSpecialToken(*tok_, id) && !ends && id != tok_->eos_id()) r.logit_bias.emplace_back(id, 8.0f);
    }
    handles.push_back(testing::MustSubmit(s, r));
  }
  const std::vector<testing::Result> res = testing::RunAll(s, handles);
  for (std::size_t i = 0; i < res.size(); ++i) {
    int special = 0;
    for (const OutputToken& t : res[i].tokens) special += IsSpecialToken(*tok_, t.token);
    if (i < 10) {
      EXPECT_EQ(special, 0) << "seed " << i << ": " << res[i].text;
    } else {
      EXPECT_GT(special, 0) << "unconstrained seed " << i << ": " << res[i].text;
    }
  }
}

// Gemma 3: the JSON convention on the default model's vocabulary.
TEST(GemmaJsonToolGrammar, ForcedOpeningGivesAValidCallUnderRandomLogits) {
  const std::string path = testing::DefaultModelPath();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found at " << path;
  const Tokenizer tok(ReadVocab(GgufFile::Open(path)));
  const auto trie = TokenTrie::FromTokenizer(tok);
  int valid = 0;
  for (const char* opening : {"{\"tool_call", "Sure. { \"tool_call"}) {
    for (bool parallel : {false, true}) {
      for (std::uint64_t seed = 0; seed < 3; ++seed) {
        GrammarMatcher m(LazyToolCallGrammar(LookupTool(true), ToolCallSyntax::kJson, parallel), trie, {tok.eos_id()});
        const std::vector<std::int32_t> force = tok.Encode(opening);
        const std::vector<std::int32_t> ids = RandomRun(m, tok.vocab_size(), force, seed, 400);
        const std::string text = tok.Decode(ids);
        ASSERT_EQ(m.Triggered(), 1) << text;
        if (!m.Terminated()) continue;  // random logits may fill the run with whitespace-free strings
        const std::vector<ToolCall> calls = Calls(text, ToolCallSyntax::kJson);
        ASSERT_FALSE(calls.empty()) << text;
        for (const ToolCall& c : calls) EXPECT_TRUE(ValidLookup(c.arguments)) << c.arguments;
        ++valid;
      }
    }
  }
  EXPECT_GT(valid, 0) << "no run closed its call";
}

TEST(ToolCallGrammar, GemmaNotationRefusesKeysItCannotWrite) {
  const std::vector<OfferedTool> bad = {
      OfferedTool{{"f", "", R"({"type": "object", "properties": {"a:b": {}}})"}, true}};
  EXPECT_THROW(LazyToolCallGrammar(bad, ToolCallSyntax::kGemma4, true), Error);
  EXPECT_NO_THROW(LazyToolCallGrammar(bad, ToolCallSyntax::kJson, true));
  EXPECT_THROW(LazyToolCallGrammar({}, ToolCallSyntax::kJson, true), Error);
}

}  // namespace
}  // namespace kvshare
