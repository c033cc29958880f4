// What the Scheduler (kvshare/runtime/scheduler.h) puts in each step, seen through
// SchedulerOptions::on_step on a tiny float-weight Gemma 3:
// - every decoding row's token comes first, then prompt chunks in admission
//   order, exactly as the header's step rule says (an explicit step table);
// - a step never holds more than step_tokens tokens, and while rows decode
//   each of them gets its token in every step (a long prompt never starves
//   them), whatever the mix of prompts, slots and budget;
// - each entry's logits in the trace are the ones its token is sampled from.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kvshare/common/thread_pool.h"
#include "kvshare/runtime/scheduler.h"
#include "runtime_scheduler_util.h"

namespace kvshare {
namespace {

using testing::MustSubmit;
using testing::Prompt;
using testing::Result;
using testing::RunAll;
using testing::StepRecorder;
using testing::TinySetup;

// slot, tokens, decode, sampled
using Planned = std::vector<std::tuple<int, int, bool, bool>>;

Planned Plan(const std::vector<StepTrace::Entry>& step) {
  Planned p;
  for (const StepTrace::Entry& e : step) p.emplace_back(e.slot, e.tokens, e.decode, e.sampled);
  return p;
}

// Three requests (prompts of 3, 10, 12 tokens) in 3 slots with 8 tokens a
// step. Taking prompt chunks before decode tokens, or in another order,
// changes this table.
TEST(SchedulerSteps, DecodeTokensFirstThenPromptChunksInAdmissionOrder) {
  TinySetup t;
  StepRecorder rec(t.V);
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 3, .max_context = 64, .step_tokens = 8, .on_step = rec.Hook()});
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int len : {3, 10, 12}) {
    hs.push_back(
        MustSubmit(s, {.prompt = Prompt(len, t.V, static_cast<unsigned>(len)), .max_tokens = 6, .ignore_eos = true}));
  }
  for (int i = 0; i < 5; ++i) s.Step();
  const std::vector<Planned> want = {
      {{0, 3, false, true}, {1, 5, false, false}},                      // no decode rows yet: 3 + 5
      {{0, 1, true, true}, {1, 5, false, true}, {2, 2, false, false}},  // 1 decode, then 5 + 2
      {{0, 1, true, true}, {1, 1, true, true}, {2, 6, false, false}},   // 2 decode, then 6
      {{0, 1, true, true}, {1, 1, true, true}, {2, 4, false, true}},    // the last 4 of 12
      {{0, 1, true, true}, {1, 1, true, true}, {2, 1, true, true}},
  };
  ASSERT_EQ(rec.steps.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(Plan(rec.steps[i]), want[i]) << "step " << i;
  // Slots were taken in arrival order.
  EXPECT_EQ(rec.steps[0][0].request, hs[0]->id());
  EXPECT_EQ(rec.steps[0][1].request, hs[1]->id());
  EXPECT_EQ(rec.steps[1][2].request, hs[2]->id());
  const SchedulerStats st = s.Stats();
  EXPECT_EQ(st.prefill_tokens, 3u + 10u + 12u);
  EXPECT_EQ(st.generated_tokens, 1u + 2u + 2u + 3u + 3u);
  RunAll(s, hs);
}

// Many requests, ragged prompts (longer than the budget too), fewer slots
// than requests, several budgets: every step holds at most step_tokens
// tokens, decode entries come before prompt chunks, a decoding request gets
// exactly one token in every step from its first sampled token to its end,
// and a prompt is fed whole, once (less its cached prefix).
TEST(SchedulerSteps, TokenBudgetHoldsAndDecodeRowsNeverStarve) {
  TinySetup t;
  ThreadPool pool(2);
  for (const auto& [slots, budget] : std::vector<std::pair<int, int>>{{2, 3}, {3, 7}, {4, 5}, {4, 16}}) {
    const std::string what = "slots " + std::to_string(slots) + ", step_tokens " + std::to_string(budget);
    StepRecorder rec(t.V);
    Scheduler s(*t.model, t.tok, &pool,
                {.slots = slots, .max_context = 64, .step_tokens = budget, .max_queue = 16, .on_step = rec.Hook()});
    std::map<std::uint64_t, RequestOptions> reqs;
    std::vector<std::shared_ptr<RequestHandle>> hs;
    const int lens[] = {1, 23, 4, 40, 9, 2, 17};
    for (int i = 0; i < 7; ++i) {
      RequestOptions r{
          .prompt = Prompt(lens[i], t.V, 60 + static_cast<unsigned>(i)), .max_tokens = 3 + 2 * i, .ignore_eos = true};
      hs.push_back(MustSubmit(s, r));
      reqs[hs.back()->id()] = r;
    }
    const std::vector<Result> got = RunAll(s, hs);
    std::map<std::uint64_t, int> sampled, first_sample_step, last_step;
    std::map<std::uint64_t, std::vector<StepTrace::Entry>> chunks;  // prompt chunks per request
    for (std::size_t i = 0; i < rec.steps.size(); ++i) {
      const std::vector<StepTrace::Entry>& step = rec.steps[i];
      int total = 0;
      bool seen_prefill = false;
      std::set<int> slot_set;
      for (const StepTrace::Entry& e : step) {
        total += e.tokens;
        EXPECT_TRUE(slot_set.insert(e.slot).second) << what << ": slot twice in step " << i;
        if (e.decode) {
          EXPECT_FALSE(seen_prefill) << what << ": a decode token after a prompt chunk in step " << i;
          EXPECT_EQ(e.tokens, 1);
        } else {
          seen_prefill = true;
          chunks[e.request].push_back(e);
        }
        if (e.sampled && sampled[e.request]++ == 0) first_sample_step[e.request] = static_cast<int>(i);
        last_step[e.request] = static_cast<int>(i);
      }
      EXPECT_LE(total, budget) << what << ", step " << i;
      EXPECT_LE(static_cast<int>(step.size()), slots) << what;
    }
    for (std::size_t k = 0; k < hs.size(); ++k) {
      const std::uint64_t id = hs[k]->id();
      const RequestOptions& r = reqs[id];
      // The prompt's chunks and its cached prefix (the <bos> every prompt
      // here starts with, once a slot has held one) make the whole prompt;
      // only the last chunk is sampled from.
      int fed = static_cast<int>(got[k].last.usage.cached_tokens);
      for (std::size_t c = 0; c < chunks[id].size(); ++c) {
        fed += chunks[id][c].tokens;
        EXPECT_EQ(chunks[id][c].sampled, c + 1 == chunks[id].size()) << what << ", request " << k;
      }
      EXPECT_EQ(fed, static_cast<int>(r.prompt.size())) << what << ", request " << k;
      EXPECT_EQ(sampled[id], r.max_tokens) << what << ", request " << k;
      EXPECT_EQ(got[k].tokens.size(), static_cast<std::size_t>(r.max_tokens)) << what;
      // One sampled token per step from the first to the last: never skipped.
      EXPECT_EQ(last_step[id] - first_sample_step[id] + 1, r.max_tokens) << what << ", request " << k;
    }
  }
}

// A step is full whenever prompts wait in slots: budget minus decode rows
// goes to prompt chunks (chunked prefill uses the whole budget).
TEST(SchedulerSteps, PromptChunksFillTheBudget) {
  TinySetup t;
  StepRecorder rec(t.V);
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 2, .max_context = 64, .step_tokens = 5, .on_step = rec.Hook()});
  auto a = MustSubmit(s, {.prompt = Prompt(2, t.V, 1), .max_tokens = 12, .ignore_eos = true});
  s.Step();  // a: 2 prompt tokens, sampled: decoding from now on
  auto b = MustSubmit(s, {.prompt = Prompt(30, t.V, 2), .max_tokens = 2, .ignore_eos = true});
  int prompt_steps = 0;
  while (rec.steps.empty() || rec.steps.back().size() < 2 || !rec.steps.back()[1].sampled) {
    s.Step();
    const std::vector<StepTrace::Entry>& step = rec.steps.back();
    ASSERT_EQ(step.size(), 2u);
    EXPECT_EQ(step[0].request, a->id());
    EXPECT_TRUE(step[0].decode);
    EXPECT_EQ(step[1].request, b->id());
    EXPECT_EQ(step[1].tokens, prompt_steps < 7 ? 4 : 2) << "step " << prompt_steps;  // 30 = 7 x 4 + 2
    ++prompt_steps;
    ASSERT_LE(prompt_steps, 8);
  }
  EXPECT_EQ(prompt_steps, 8);
  RunAll(s, {a, b});
}

}  // namespace
}  // namespace kvshare
