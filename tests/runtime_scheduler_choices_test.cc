// Scheduler features behind the server's n > 1 and echo (kvshare/runtime/scheduler.h):
// - RequestOptions::prefill_from: choices that copy the first one's row
//   (ModelState::CopyRow) instead of prefilling give bitwise what each gives
//   alone, and prefill only their last prompt token;
// - RequestOptions::prompt_logprobs: every prompt token's logprob, as a
//   plain double log-softmax of a single Forward's logits says, across
//   64-token chunks, with no prompt-cache reuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
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

Result Alone(TinySetup& t, const RequestOptions& r) {
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 64, .step_tokens = 8});
  return RunAll(s, {MustSubmit(s, r)})[0];
}

TEST(SchedulerChoices, CopiedPrefillEqualsEachChoiceAlone) {
  TinySetup t;
  ThreadPool pool(2);
  StepRecorder rec(t.V);
  // Window 5, rings of 5 + 8 - 1 positions: the 20-token prompt wraps them.
  Scheduler s(*t.model, t.tok, &pool, {.slots = 4, .max_context = 64, .step_tokens = 8, .on_step = rec.Hook()});
  RequestOptions a{.prompt = Prompt(20, t.V, 3), .max_tokens = 9, .top_logprobs = 2};
  a.sampler = {.temperature = 3.0f, .seed = 100};
  const auto [rs, hs] = testing::SubmitChoices(s, a, 3);
  const std::vector<Result> got = RunAll(s, hs);
  bool differ = false;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    testing::ExpectSame(got[i], Alone(t, rs[i]), "choice " + std::to_string(i));
    for (std::size_t k = 0; k < got[i].tokens.size() && k < got[0].tokens.size(); ++k) {
      differ = differ || got[i].tokens[k].token != got[0].tokens[k].token;
    }
  }
  EXPECT_TRUE(differ) << "the seeds should give different choices (else the test could not fail)";
  EXPECT_EQ(got[1].last.usage.cached_tokens, 19);
  const SchedulerStats st = s.Stats();
  EXPECT_EQ(st.prefill_tokens, 20u + 1u + 1u);
  EXPECT_EQ(st.cached_prompt_tokens, 2u * 19u);
  // The copies joined once the first choice's prompt was in: never a prompt chunk beside it.
  for (const auto& step : rec.steps) {
    for (const StepTrace::Entry& e : step) {
      if (e.request != hs[0]->id() && !e.decode) {
        EXPECT_EQ(e.tokens, 1);
      }
    }
  }
}

TEST(SchedulerChoices, WithoutTheFirstInASlotAChoicePrefillsItself) {
  TinySetup t;
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 2, .max_context = 64, .step_tokens = 8});
  RequestOptions a{.prompt = Prompt(12, t.V, 4), .max_tokens = 3};
  const auto ha = MustSubmit(s, a);
  RunAll(s, {ha});
  RequestOptions b = a;
  b.prefill_from = ha->id();  // finished: the prompt cache serves it instead
  b.sampler = {.temperature = 0.7f, .seed = 5};
  const Result got = RunAll(s, {MustSubmit(s, b)})[0];
  testing::ExpectSame(got, Alone(t, b), "after the first finished");
  EXPECT_EQ(got.last.usage.cached_tokens, 11);
}

TEST(SchedulerChoices, PromptLogprobsMatchAPlainLogSoftmax) {
  TinySetup t;
  ThreadPool pool(2);
  const int n = 150;  // three 64-token chunks
  RequestOptions r{.prompt = Prompt(n, t.V, 9), .max_tokens = 2, .prompt_logprobs = 3};
  Scheduler s(*t.model, t.tok, &pool, {.slots = 2, .max_context = 256, .step_tokens = 100});
  // The same prompt first: a prompt-logprobs request must not reuse it.
  RunAll(s, {MustSubmit(s, {.prompt = r.prompt, .max_tokens = 1})});
  const auto h = MustSubmit(s, r);
  std::vector<RequestEvent> events;
  for (int guard = 0; guard < 1000 && !s.Idle(); ++guard) s.Step();
  h->Wait(events, std::chrono::milliseconds(0));
  ASSERT_FALSE(events.empty());
  const std::vector<OutputToken>& got = events.front().prompt_logprobs;
  for (std::size_t i = 1; i < events.size(); ++i) EXPECT_TRUE(events[i].prompt_logprobs.empty());
  EXPECT_EQ(events.back().usage.cached_tokens, 0);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(n - 1));

  auto state = t.model->NewState({.max_context = 256, .max_step = 256});
  const std::span<const float> logits = t.model->Forward(*state, r.prompt, nullptr, {.num_logits = n});
  const std::size_t V = static_cast<std::size_t>(t.V);
  for (int j = 0; j + 1 < n; ++j) {
    const std::span<const float> row = logits.subspan(static_cast<std::size_t>(j) * V, V);
    double mx = -INFINITY, z = 0;
    for (float v : row) mx = std::max(mx, static_cast<double>(v));
    for (float v : row) z += std::exp(static_cast<double>(v) - mx);
    const double log_z = mx + std::log(z);
    const OutputToken& o = got[static_cast<std::size_t>(j)];
    ASSERT_EQ(o.token, r.prompt[static_cast<std::size_t>(j) + 1]);
    EXPECT_NEAR(o.logprob, row[static_cast<std::size_t>(o.token)] - log_z, 1e-5) << "prompt token " << j + 1;
    ASSERT_EQ(o.top.size(), 3u);
    for (std::size_t k = 0; k < o.top.size(); ++k) {
      const int above = static_cast<int>(std::count_if(
          row.begin(), row.end(), [&](float v) { return v > row[static_cast<std::size_t>(o.top[k].token)]; }));
      EXPECT_EQ(above, static_cast<int>(k)) << "prompt token " << j + 1 << " alternative " << k;
      EXPECT_NEAR(o.top[k].logprob, row[static_cast<std::size_t>(o.top[k].token)] - log_z, 1e-5);
    }
  }
  EXPECT_THROW(s.Submit({.prompt = r.prompt, .prompt_logprobs = 21}), Error);
}

}  // namespace
}  // namespace kvshare
