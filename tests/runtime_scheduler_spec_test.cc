// Speculative decoding inside the scheduler (SchedulerOptions::drafter): each
// row drafts on its own and one step verifies every row's drafts. Greedy
// requests give bitwise the tokens and logprobs of a scheduler without
// speculation (alone and among other requests, sampling ones included), the
// per-request opt-out keeps a row at one token per step, and the counters
// add up.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/runtime/speculative.h"
#include "runtime_scheduler_util.h"

namespace kvshare {
namespace {

using testing::MustSubmit;
using testing::Result;
using testing::RunAll;
using testing::StepRecorder;
using testing::TinySetup;

// Requests with repeats in their prompts (n-gram drafts find matches), greedy
// with logprobs, and one sampling request.
std::vector<RequestOptions> Requests(int V) {
  std::vector<RequestOptions> out;
  const std::vector<std::vector<std::int32_t>> prompts = {
      {2, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11},
      {2, 20, 21, 22, 20, 21, 22, 20},
      {2, 30, 5, 31, 6, 32, 7},
      {2, 40, 41, 40, 41, 40, 41, 40, 41, 40},
  };
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    RequestOptions r;
    r.prompt = prompts[i];
    for (std::int32_t& t : r.prompt) t %= V;
    r.max_tokens = 24 + 3 * static_cast<int>(i);
    r.top_logprobs = 3;
    r.ignore_eos = i % 2 == 0;
    out.push_back(r);
  }
  RequestOptions sampled = out[0];
  sampled.sampler = {.temperature = 0.9f, .top_k = 6, .seed = 17};
  out.push_back(sampled);
  return out;
}

// The logits every token of every request was chosen from, in order: the
// prompt's last row, then the rows of each decode entry that its accepted
// tokens used (an entry's next one starts where they end; the last entry
// used what is left of the request's tokens).
struct TokenLogits {
  struct Fed {
    std::int64_t position = 0;
    std::vector<std::vector<float>> rows;
  };
  std::map<std::uint64_t, std::vector<Fed>> fed;  // per request, its sampled entries in step order
  int V = 0;
  std::function<void(const StepTrace&)> Hook() {
    return [this](const StepTrace& t) {
      std::size_t at = 0;
      for (const StepTrace::Entry& e : t.entries) {
        if (e.sampled) {
          Fed f{.position = e.position + e.tokens - (e.decode ? e.logits_rows : 1)};
          for (int i = 0; i < e.logits_rows; ++i) {
            const auto row = t.logits.subspan((at + static_cast<std::size_t>(i)) * static_cast<std::size_t>(V),
                                              static_cast<std::size_t>(V));
            f.rows.emplace_back(row.begin(), row.end());
          }
          fed[e.request].push_back(std::move(f));
        }
        at += static_cast<std::size_t>(e.logits_rows);
      }
    };
  }
  std::vector<std::vector<float>> For(std::uint64_t request, std::size_t tokens) const {
    std::vector<std::vector<float>> out;
    const std::vector<Fed>& f = fed.at(request);
    for (std::size_t j = 0; j < f.size(); ++j) {
      const std::size_t used =
          j + 1 < f.size() ? static_cast<std::size_t>(f[j + 1].position - f[j].position) : tokens - out.size();
      for (std::size_t i = 0; i < used && i < f[j].rows.size(); ++i) out.push_back(f[j].rows[i]);
    }
    return out;
  }
};

std::vector<Result> Serve(const TinySetup& t, SchedulerOptions o, const std::vector<RequestOptions>& reqs,
                          SchedulerStats* stats = nullptr,
                          std::vector<std::vector<std::vector<float>>>* logits = nullptr) {
  TokenLogits rec{.V = t.V};
  if (logits != nullptr) o.on_step = rec.Hook();
  Scheduler s(*t.model, t.tok, nullptr, o);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const RequestOptions& r : reqs) handles.push_back(MustSubmit(s, r));
  std::vector<Result> out = RunAll(s, handles);
  if (stats != nullptr) *stats = s.Stats();
  if (logits != nullptr) {
    for (std::size_t i = 0; i < handles.size(); ++i) {
      logits->push_back(rec.For(handles[i]->id(), static_cast<std::size_t>(out[i].last.usage.completion_tokens)));
    }
  }
  return out;
}

TEST(SchedulerSpeculative, GreedyRequestsAreBitwiseThoseWithoutSpeculation) {
  TinySetup t;
  const std::vector<RequestOptions> reqs = Requests(t.V);
  const SchedulerOptions base{.slots = 3, .max_context = 96, .step_tokens = 12};
  std::vector<std::vector<std::vector<float>>> plain_logits;
  const std::vector<Result> plain = Serve(t, base, reqs, nullptr, &plain_logits);
  std::unique_ptr<Drafter> ngram = MakeNgramDrafter({.ngram_min = 1, .ngram_max = 3});
  std::unique_ptr<Drafter> self = MakeDraftModelDrafter(*t.model, *t.model, {.max_batch = 3, .max_context = 96});
  for (Drafter* d : {ngram.get(), self.get()}) {
    for (const bool adaptive : {false, true}) {
      SchedulerOptions o = base;
      o.drafter = d;
      o.speculative = {.draft_max = 5, .adaptive = adaptive};
      SchedulerStats st;
      std::vector<std::vector<std::vector<float>>> spec_logits;
      const std::vector<Result> spec = Serve(t, o, reqs, &st, &spec_logits);
      const std::string what = d->name() + (adaptive ? " adaptive" : " k = 5");
      for (std::size_t i = 0; i + 1 < reqs.size(); ++i) {  // the last one samples
        testing::ExpectSame(plain[i], spec[i], what + ", request " + std::to_string(i));
        testing::ExpectSameLogits(spec_logits[i], plain_logits[i], what + ", request " + std::to_string(i));
        EXPECT_EQ(spec_logits[i].size(), spec[i].tokens.size() + (spec[i].last.reason == FinishReason::kStop));
      }
      EXPECT_EQ(spec.back().tokens.size(), static_cast<std::size_t>(spec.back().last.usage.completion_tokens));
      EXPECT_GT(st.spec_drafted_tokens, 0u) << what;
      EXPECT_GT(st.spec_accepted_tokens, 0u) << what;
      EXPECT_LE(st.spec_accepted_tokens, st.spec_drafted_tokens) << what;
      EXPECT_LE(st.spec_verify_rows, st.steps * 3) << what;
      if (d == self.get() && !adaptive) {
        EXPECT_LT(st.steps, plain.size() * 24) << what;
      }
    }
  }
}

// One request alone with speculation against the same request among others
// with speculation: bitwise the same (a row's drafts and acceptance do not
// depend on the other rows).
TEST(SchedulerSpeculative, AloneAndAmongOthersAgree) {
  TinySetup t;
  const std::vector<RequestOptions> reqs = Requests(t.V);
  std::unique_ptr<Drafter> ngram = MakeNgramDrafter({.ngram_min = 1, .ngram_max = 3});
  SchedulerOptions o{.slots = 4,
                     .max_context = 96,
                     .step_tokens = 16,
                     .drafter = ngram.get(),
                     .speculative = {.draft_max = 4, .adaptive = false}};
  const std::vector<Result> together = Serve(t, o, reqs);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<Result> alone = Serve(t, o, {reqs[i]});
    testing::ExpectSame(together[i], alone[0], "request " + std::to_string(i));
  }
}

// RequestOptions::speculative = false: the row never verifies drafts.
TEST(SchedulerSpeculative, PerRequestOptOut) {
  TinySetup t;
  std::vector<RequestOptions> reqs = Requests(t.V);
  reqs.resize(2);
  reqs[1].speculative = false;
  std::unique_ptr<Drafter> ngram = MakeNgramDrafter({.ngram_min = 1, .ngram_max = 3});
  StepRecorder rec(t.V);
  SchedulerOptions o{.slots = 2,
                     .max_context = 96,
                     .step_tokens = 12,
                     .drafter = ngram.get(),
                     .speculative = {.draft_max = 4, .adaptive = false}};
  o.on_step = rec.Hook();
  Scheduler s(*t.model, t.tok, nullptr, o);
  auto h0 = MustSubmit(s, reqs[0]);
  auto h1 = MustSubmit(s, reqs[1]);
  RunAll(s, {h0, h1});
  int verify0 = 0;
  for (const auto& step : rec.steps) {
    for (const StepTrace::Entry& e : step) {
      if (e.request == h1->id()) {
        EXPECT_EQ(e.logits_rows, 1);
      }
      if (e.request == h0->id() && e.logits_rows > 1) ++verify0;
      EXPECT_EQ(e.logits_rows > 1 ? e.tokens : 1, e.decode ? e.logits_rows : 1);
    }
  }
  EXPECT_GT(verify0, 0) << "the other request drafts";
}

TEST(SchedulerSpeculative, BadOptions) {
  TinySetup t;
  std::unique_ptr<Drafter> ngram = MakeNgramDrafter();
  EXPECT_THROW(
      Scheduler(
          *t.model, t.tok, nullptr,
          {.slots = 2, .max_context = 32, .step_tokens = 8, .drafter = ngram.get(), .speculative = {.draft_max = 0}}),
      Error);
}

}  // namespace
}  // namespace kvshare
