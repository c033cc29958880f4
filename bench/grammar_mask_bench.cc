// Constrained decoding's per-token overhead (kvshare/grammar/grammar.h) with the
// default model's vocabulary (262144 tokens), against the same model's
// decode step in the same run:
//   kvshare_bench --benchmark_filter='GrammarMask|DecodeStep|TokenTrie'
// GrammarMask/<doc>: a fresh matcher per iteration (as a request has: its
// lazy DFA starts cold) walks a document token by token as the scheduler
// does: a copy of a logits row masked before each token (MaskLogits), then
// the token (AcceptToken), and the mask before the end token. per_token:
// seconds per token (one thread; the scheduler masks a step's rows in
// parallel).
// DecodeStep/threads: one greedy one-token Forward of the default model at
// a context of the prompt's tokens (about 70) up to 320, per_token likewise.
// GrammarMaskLazy: a reply under tool_choice "auto" with one strict tool, in
// the JSON convention (LazyToolCallGrammar): free text (the lazy trigger
// search), then the call (the body's mask), walked as GrammarMask walks.
// TokenTrie: building the trie once per vocabulary (the server's first
// constrained request).
// Environment: KVSHARE_MODEL, else the default model where the CLI finds it
// (tests/model_default_path.h).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvshare/common/thread_pool.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/tool_calls.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_default_path.h"

namespace kvshare {
namespace {

struct Vocab {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const TokenTrie> trie;
};

// The default model and its trie, loaded once (null model: not found).
Vocab& Default() {
  static Vocab v = [] {
    Vocab out;
    const std::string path = testing::DefaultModelPath();
    if (!std::filesystem::exists(path)) return out;
    out.model = Model::Load(path);
    out.tok = std::make_unique<Tokenizer>(ReadVocab(out.model->gguf()));
    out.trie = TokenTrie::FromTokenizer(*out.tok);
    return out;
  }();
  return v;
}

const std::string kLorem =
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore "
    "magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo "
    "consequat. Grüße aus Köln, 東京から こんにちは.";

struct Doc {
  const char* schema;  // null: json_object
  std::string text;
};

const std::vector<Doc>& Docs() {
  static const std::vector<Doc> d = {
      // 0: a typical record: keys, short strings, numbers, an array.
      {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
           "email": {"type": "string", "maxLength": 64}, "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}},
           "score": {"type": "number"}}, "required": ["name", "age", "email", "tags", "score"]})",
       "{\n  \"name\": \"Ann Smith\",\n  \"age\": 31,\n  \"email\": \"ann@example.com\",\n  \"tags\": [\"a\", \"c\"],\n"
       "  \"score\": 0.875\n}"},
      // 1: a long unbounded string (subtrees of plain content taken whole).
      {R"({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})",
       "{\"text\": \"" + kLorem + "\"}"},
      // 2: the same string under maxLength (a new DFA state per character).
      {R"({"type": "object", "properties": {"text": {"type": "string", "maxLength": 400}}, "required": ["text"]})",
       "{\"text\": \"" + kLorem + "\"}"},
      // 3: any JSON object, nested.
      {nullptr, R"({"a": [1, 2.5, {"b": null, "c": [true, false]}], "d": {"e": "f", "g": -3e2}})"},
  };
  return d;
}

// One matcher per iteration walks `text` token by token (mask, then accept),
// then masks once more; per_token as in GrammarMask.
void WalkDocument(benchmark::State& state, const Vocab& v, const std::shared_ptr<const Grammar>& grammar,
                  const std::string& text) {
  const std::vector<std::int32_t> tokens = v.tok->Encode(text, {.add_bos = false});
  std::vector<float> logits(static_cast<std::size_t>(v.tok->vocab_size()), 1.0f), masked;
  for (auto _ : state) {
    GrammarMatcher m(grammar, v.trie, {v.tok->eos_id()});
    for (std::int32_t t : tokens) {
      masked.assign(logits.begin(), logits.end());  // as the scheduler copies the row
      m.MaskLogits(masked);
      if (masked[static_cast<std::size_t>(t)] != 1.0f || !m.AcceptToken(t)) {
        state.SkipWithError("the document's tokens leave the grammar");
        return;
      }
    }
    masked.assign(logits.begin(), logits.end());
    m.MaskLogits(masked);
    benchmark::DoNotOptimize(masked.data());
  }
  const double steps = static_cast<double>(tokens.size() + 1);
  state.counters["tokens"] = steps;
  state.counters["per_token"] =
      benchmark::Counter(steps, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_GrammarMask(benchmark::State& state) {
  Vocab& v = Default();
  if (!v.model) {
    state.SkipWithError("no default model (KVSHARE_MODEL, or the model directory of tests/model_default_path.h)");
    return;
  }
  const Doc& doc = Docs()[static_cast<std::size_t>(state.range(0))];
  WalkDocument(state, v, doc.schema != nullptr ? CompileJsonSchema(doc.schema) : AnyJsonObjectGrammar(), doc.text);
}

void BM_GrammarMaskLazy(benchmark::State& state) {
  Vocab& v = Default();
  if (!v.model) {
    state.SkipWithError("no default model (KVSHARE_MODEL, or the model directory of tests/model_default_path.h)");
    return;
  }
  const OfferedTool tool{.function = {.name = "get_weather",
                                      .description = "Current weather in a city",
                                      .parameters = R"({"type": "object", "properties": {"city": {"type": "string"},
                                       "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]})"},
                         .strict = true};
  WalkDocument(state, v, LazyToolCallGrammar(std::span<const OfferedTool>(&tool, 1), ToolCallSyntax::kJson, false),
               kLorem +
                   "\n{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                   "\"unit\": \"celsius\"}}}");
}

// A request's matcher construction alone, for the lazy tool-call grammar
// (the free-text watch scans the vocabulary for trigger starters).
void BM_GrammarMatcherStartLazy(benchmark::State& state) {
  Vocab& v = Default();
  if (!v.model) {
    state.SkipWithError("no default model (KVSHARE_MODEL, or the model directory of tests/model_default_path.h)");
    return;
  }
  const OfferedTool tool{.function = {.name = "get_weather", .parameters = R"({"type": "object"})"}, .strict = true};
  const auto grammar = LazyToolCallGrammar(std::span<const OfferedTool>(&tool, 1), ToolCallSyntax::kJson, false);
  for (auto _ : state) {
    GrammarMatcher m(grammar, v.trie, {v.tok->eos_id()});
    benchmark::DoNotOptimize(&m);
  }
}

void BM_DecodeStep(benchmark::State& state) {
  Vocab& v = Default();
  if (!v.model) {
    state.SkipWithError("no default model (KVSHARE_MODEL, or the model directory of tests/model_default_path.h)");
    return;
  }
  ThreadPool pool(static_cast<int>(state.range(0)));
  const std::unique_ptr<ModelState> s = v.model->NewState({.max_context = 512});
  const std::vector<std::int32_t> prompt = v.tok->Encode("{\"text\": \"" + kLorem + "\"}");
  std::int32_t next = 0;
  auto restart = [&] {
    s->Reset();
    const std::span<const float> l = v.model->Forward(*s, prompt, &pool);
    next = static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  };
  restart();
  for (auto _ : state) {
    if (s->length() >= 320) {
      state.PauseTiming();
      restart();
      state.ResumeTiming();
    }
    const std::span<const float> l = v.model->Forward(*s, std::span<const std::int32_t>(&next, 1), &pool);
    next = static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  }
  state.counters["per_token"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_TokenTrieBuild(benchmark::State& state) {
  Vocab& v = Default();
  if (!v.model) {
    state.SkipWithError("no default model (KVSHARE_MODEL, or the model directory of tests/model_default_path.h)");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(TokenTrie::FromTokenizer(*v.tok));
  state.counters["nodes"] = static_cast<double>(v.trie->num_nodes());
}

BENCHMARK(BM_GrammarMask)->Name("GrammarMask")->ArgName("doc")->DenseRange(0, 3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GrammarMaskLazy)->Name("GrammarMaskLazy")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GrammarMatcherStartLazy)->Name("GrammarMatcherStartLazy")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeStep)
    ->Name("DecodeStep")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenTrieBuild)->Name("TokenTrie")->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace kvshare
