// Constrained decoding in the scheduler (RequestOptions::grammar): greedy and
// sampled requests on the tiny model give documents of the grammar and end
// with the end token, alongside unconstrained requests and with a drafter
// (constrained rows are never speculated); ignore_eos is refused.
#include <gtest/gtest.h>

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/runtime/speculative.h"
#include "runtime_scheduler_util.h"

namespace kvshare {
namespace {

using testing::MustSubmit;
using testing::RunAll;
using testing::StepRecorder;
using testing::TinySetup;

// The tiny vocabulary has '4'..'9', '[' and ']' (no '-', ',', '"' or space).
constexpr const char* kSchema =
    R"({"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 1}]})";

TEST(SchedulerGrammar, ConstrainedRequestsGiveDocumentsOfTheGrammar) {
  TinySetup t;
  std::unique_ptr<Drafter> ngram = MakeNgramDrafter({.ngram_min = 1, .ngram_max = 3});
  StepRecorder rec(t.V);
  SchedulerOptions o{.slots = 3,
                     .max_context = 96,
                     .step_tokens = 16,
                     .drafter = ngram.get(),
                     .speculative = {.draft_max = 4, .adaptive = false}};
  o.on_step = rec.Hook();
  Scheduler s(*t.model, t.tok, nullptr, o);
  const auto grammar = CompileJsonSchema(kSchema);
  std::vector<std::shared_ptr<RequestHandle>> constrained, all;
  for (int i = 0; i < 6; ++i) {
    RequestOptions r;
    r.prompt = {2, 10, 11, 12, 10, 11, 12, static_cast<std::int32_t>(13 + i)};
    r.max_tokens = 24;
    r.grammar = grammar;
    if (i > 0) r.sampler = {.temperature = 1.5f, .seed = static_cast<std::uint64_t>(i)};
    constrained.push_back(MustSubmit(s, r));
    all.push_back(constrained.back());
    RequestOptions free = r;  // an unconstrained neighbour, speculated
    free.grammar = nullptr;
    free.ignore_eos = true;
    all.push_back(MustSubmit(s, free));
  }
  const std::vector<testing::Result> res = RunAll(s, all);
  const std::regex doc(R"([4-9][0-9]{0,15}|\[([4-9][0-9]{0,15})?\])");
  for (std::size_t i = 0; i < res.size(); i += 2) {
    EXPECT_TRUE(std::regex_match(res[i].text, doc)) << "request " << i / 2 << ": " << res[i].text;
    EXPECT_EQ(res[i].last.reason, FinishReason::kStop) << res[i].text;
    EXPECT_EQ(res[i].last.detail, "eos") << res[i].text;
  }
  int verified = 0;
  for (const auto& step : rec.steps) {
    for (const StepTrace::Entry& e : step) {
      for (const auto& h : constrained) {
        if (e.request == h->id()) {
          EXPECT_EQ(e.logits_rows, 1) << "a constrained row was speculated";
        }
      }
      if (e.logits_rows > 1) ++verified;
    }
  }
  EXPECT_GT(verified, 0) << "the unconstrained requests draft";
}

TEST(SchedulerGrammar, LengthWhenTheDocumentIsCutShort) {
  TinySetup t;
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 64, .step_tokens = 8});
  RequestOptions r;
  r.prompt = {2, 10, 11};
  r.max_tokens = 1;
  r.grammar = CompileJsonSchema(R"({"type": "array", "items": {"type": "integer"}, "maxItems": 1})");
  const auto res = RunAll(s, {MustSubmit(s, r)});
  EXPECT_EQ(res[0].text, "[");
  EXPECT_EQ(res[0].last.reason, FinishReason::kLength);
}

TEST(SchedulerGrammar, IgnoreEosIsRefused) {
  TinySetup t;
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 64, .step_tokens = 8});
  RequestOptions r;
  r.prompt = {2, 10};
  r.grammar = AnyJsonObjectGrammar();
  r.ignore_eos = true;
  EXPECT_THROW(s.Submit(r), Error);
}

}  // namespace
}  // namespace kvshare
