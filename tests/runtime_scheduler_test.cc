// Scheduler (kvshare/runtime/scheduler.h) on tiny random models written by the tests
// (model_tiny_gemma.h, model_tiny_gemma4.h) and on the default model:
// - requests run together (ragged prompts past the window, chunked prefill
//   mixed with decode rows, more requests than slots) give bitwise the same
//   tokens and logprobs as each run alone, and the same tokens as Generator;
// - prompt caching: a hit reuses the common prefix and gives the cold result;
//   a prefix the sliding rings no longer hold falls back to a full prefill,
//   logged and counted; exact_rewind (--swa-full) turns it into a hit;
// - cancellation frees the slot at the next step; the queue is bounded;
// - stop strings, stop tokens, max_tokens; Submit's checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_default_path.h"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma4.h"
#include "runtime_scheduler_util.h"
#include "tokenizer_tiny_vocab.h"

namespace kvshare {
namespace {

using testing::Collect;
using testing::ExpectSame;
using testing::ExpectSameLogits;
using testing::MustSubmit;
using testing::Prompt;
using testing::Result;
using testing::RunAll;
using testing::StepRecorder;
using testing::TempGguf;
using testing::TinySetup;
using testing::TinyVocab;

std::vector<RequestOptions> MixedRequests(int V) {
  std::vector<RequestOptions> rs;
  const int lens[] = {3, 17, 9, 30, 1, 12};
  for (int i = 0; i < 6; ++i) {
    RequestOptions r;
    r.prompt = Prompt(lens[i], V, 100 + static_cast<unsigned>(i));
    r.max_tokens = 5 + 3 * i;
    r.top_logprobs = i % 3 == 0 ? 3 : (i % 3 == 1 ? 0 : -1);
    if (i % 2 == 1)
      r.sampler = {.temperature = 0.9f, .top_k = 20, .top_p = 0.95f, .seed = 7u + static_cast<unsigned>(i)};
    rs.push_back(r);
  }
  return rs;
}

Result Alone(TinySetup& t, const RequestOptions& r, SchedulerOptions o) {
  o.slots = 1;
  o.step_tokens = std::max(o.step_tokens, 2);
  Scheduler s(*t.model, t.tok, nullptr, o);
  auto h = MustSubmit(s, r);
  return RunAll(s, {h})[0];
}

TEST(Scheduler, ConcurrentRequestsEqualEachAlone) {
  TinySetup t;
  ThreadPool pool(2);
  // 3 slots for 6 requests (queueing); 7 tokens per step: prompts are
  // prefilled in chunks next to decoding rows.
  const SchedulerOptions o{.slots = 3, .max_context = 64, .step_tokens = 7};
  Scheduler s(*t.model, t.tok, &pool, o);
  const std::vector<RequestOptions> rs = MixedRequests(t.V);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const RequestOptions& r : rs) hs.push_back(MustSubmit(s, r));
  const std::vector<Result> together = RunAll(s, hs);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    ExpectSame(together[i], Alone(t, rs[i], {.max_context = 64, .step_tokens = 64}), "request " + std::to_string(i));
    // The same tokens as the single-sequence Generator (one char per token).
    Generator gen(*t.model, t.tok, nullptr, {.max_context = 64});
    GenerateOptions go{.max_new_tokens = rs[i].max_tokens, .sampler = rs[i].sampler};
    std::string text;
    gen.Generate(rs[i].prompt, go, [&](std::string_view p) { text += p; });
    EXPECT_EQ(together[i].text, text) << "request " << i;
    EXPECT_EQ(together[i].last.usage.prompt_tokens, static_cast<std::int64_t>(rs[i].prompt.size()));
  }
  const SchedulerStats st = s.Stats();
  EXPECT_EQ(st.requests_finished, rs.size());
  EXPECT_EQ(st.active_slots, 0);
  EXPECT_EQ(st.queue_depth, 0);
}

TEST(Scheduler, ThreadedSubmitEqualsAlone) {
  TinySetup t;
  ThreadPool pool(2);
  Scheduler s(*t.model, t.tok, &pool, {.slots = 4, .max_context = 64, .step_tokens = 9});
  s.Start();
  const std::vector<RequestOptions> rs = MixedRequests(t.V);
  std::vector<Result> got(rs.size());
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    clients.emplace_back([&, i] {
      auto h = MustSubmit(s, rs[i]);
      std::vector<RequestEvent> ev;
      for (int n = 0; n < 2000 && (ev.empty() || !ev.back().finished); ++n) h->Wait(ev, std::chrono::milliseconds(10));
      got[i] = Collect(*h, ev);
    });
  }
  for (std::thread& c : clients) c.join();
  s.Stop();
  for (std::size_t i = 0; i < rs.size(); ++i) {
    ExpectSame(got[i], Alone(t, rs[i], {.max_context = 64, .step_tokens = 64}), "request " + std::to_string(i));
  }
}

// A cache hit (rewind into a wrapped sliding ring that still holds the
// window) samples from logits bitwise equal to a cold prefill's, every
// vocabulary entry of every step.
TEST(Scheduler, PromptCacheHitIsExact) {
  TinySetup t;
  // Rings of window 5 + step 8 - 1 = 12 positions.
  const SchedulerOptions o{.slots = 2, .max_context = 64, .step_tokens = 8};
  StepRecorder rec(t.V), cold(t.V);
  SchedulerOptions traced = o, cold_o = o;
  traced.on_step = rec.Hook();
  cold_o.on_step = cold.Hook();  // Alone: a new scheduler, its request is id 1
  Scheduler s(*t.model, t.tok, nullptr, traced);
  const std::vector<std::int32_t> p = Prompt(20, t.V, 1);
  RequestOptions a{.prompt = p, .max_tokens = 4, .top_logprobs = 2};
  RunAll(s, {MustSubmit(s, a)});
  // b shares 18 tokens with a (a's slot holds 23): rewind to 18 keeps the ring's window.
  RequestOptions b = a;
  b.prompt.resize(18);
  for (int i = 0; i < 5; ++i) b.prompt.push_back(10 + i);
  const auto hb = MustSubmit(s, b);
  const Result hit = RunAll(s, {hb})[0];
  EXPECT_EQ(hit.last.usage.cached_tokens, 18);
  ExpectSame(hit, Alone(t, b, cold_o), "cache hit vs cold");
  ExpectSameLogits(rec.logits[hb->id()], cold.logits[1], "cache hit vs cold");
  EXPECT_EQ(rec.logits[hb->id()].size(), 4u);
  // The logits do differ between requests (the comparison can fail).
  EXPECT_NE(rec.logits[hb->id()][0], rec.logits[1][0]);
  // The same prompt again: all but its last token come from the cache.
  const auto ha = MustSubmit(s, b);
  const Result again = RunAll(s, {ha})[0];
  EXPECT_EQ(again.last.usage.cached_tokens, static_cast<std::int64_t>(b.prompt.size()) - 1);
  ExpectSame(again, hit, "repeat");
  ExpectSameLogits(rec.logits[ha->id()], cold.logits[1], "repeat vs cold");
  const SchedulerStats st = s.Stats();
  EXPECT_EQ(st.prompt_cache_hits, 2u);
  EXPECT_EQ(st.prompt_cache_misses, 1u);
  EXPECT_EQ(st.prompt_cache_fallbacks, 0u);
  EXPECT_EQ(st.cached_prompt_tokens, 18u + 22u);
  EXPECT_EQ(st.prefill_tokens, 20u + 5u + 1u);
}

// A prefix the rings no longer hold: the slot is reset and the whole prompt
// prefilled again (logged, counted), with the cold logits; exact_rewind
// (--swa-full) reuses the prefix instead, with the same logits.
TEST(Scheduler, RingFallbackIsLoggedAndExact_SwaFullHits) {
  TinySetup t;
  const std::vector<std::int32_t> p = Prompt(20, t.V, 2);
  RequestOptions a{.prompt = p, .max_tokens = 20};
  RequestOptions b{.prompt = std::vector<std::int32_t>(p.begin(), p.begin() + 15), .max_tokens = 6, .top_logprobs = 1};
  b.prompt.push_back(7);
  StepRecorder cold(t.V);
  const Result want = Alone(t, b, {.max_context = 64, .step_tokens = 8, .on_step = cold.Hook()});
  for (bool exact : {false, true}) {
    std::vector<std::string> log;
    StepRecorder rec(t.V);
    SchedulerOptions o{.slots = 1, .max_context = 64, .step_tokens = 8, .exact_rewind = exact};
    o.log = [&](std::string_view l) { log.emplace_back(l); };
    o.on_step = rec.Hook();
    Scheduler s(*t.model, t.tok, nullptr, o);
    RunAll(s, {MustSubmit(s, a)});
    // a's slot holds 39 tokens; its rings the last 12: resuming at 15 needs 11..14.
    const auto hb = MustSubmit(s, b);
    const Result r = RunAll(s, {hb})[0];
    ExpectSame(r, want, exact ? "swa-full hit" : "fallback");
    ExpectSameLogits(rec.logits[hb->id()], cold.logits[1], exact ? "swa-full hit" : "fallback");
    const SchedulerStats st = s.Stats();
    // b's first step: the prefill of what the cache lacks, one chunk of <= 8.
    const auto it = std::find_if(rec.steps.begin(), rec.steps.end(),
                                 [&](const std::vector<StepTrace::Entry>& e) { return e[0].request == hb->id(); });
    ASSERT_NE(it, rec.steps.end());
    const std::vector<StepTrace::Entry>& first = *it;
    ASSERT_EQ(first.size(), 1u);
    if (exact) {
      EXPECT_EQ(r.last.usage.cached_tokens, 15);
      EXPECT_EQ(first[0].tokens, 1);
      EXPECT_EQ(st.prompt_cache_fallbacks, 0u);
      EXPECT_TRUE(log.empty());
    } else {
      EXPECT_EQ(r.last.usage.cached_tokens, 0);
      EXPECT_EQ(first[0].tokens, 8);  // 16 prompt tokens from 0: two chunks of 8
      EXPECT_EQ(st.prompt_cache_fallbacks, 1u);
      ASSERT_EQ(log.size(), 1u);
      EXPECT_NE(log[0].find("shares 15 prompt tokens with slot 0 (39 cached)"), std::string::npos) << log[0];
      EXPECT_NE(log[0].find("--swa-full"), std::string::npos) << log[0];
    }
  }
}

TEST(Scheduler, CancelFreesTheSlotAtTheNextStep) {
  TinySetup t;
  StepRecorder rec(t.V);
  Scheduler s(*t.model, t.tok, nullptr,
              {.slots = 1, .max_context = 64, .step_tokens = 8, .max_queue = 4, .on_step = rec.Hook()});
  auto a = MustSubmit(s, {.prompt = Prompt(5, t.V, 3), .max_tokens = 50});
  auto b = MustSubmit(s, {.prompt = Prompt(4, t.V, 4), .max_tokens = 3});
  for (int i = 0; i < 4; ++i) s.Step();
  EXPECT_EQ(s.Stats().active_slots, 1);
  EXPECT_EQ(s.Stats().queue_depth, 1);
  ASSERT_EQ(rec.steps.back().size(), 1u);
  EXPECT_EQ(rec.steps.back()[0].request, a->id());  // a decodes in slot 0
  EXPECT_TRUE(rec.steps.back()[0].decode);
  a->Cancel();
  s.Step();  // a leaves before the step runs; b takes the slot in the same step
  ASSERT_EQ(rec.steps.size(), 5u);
  ASSERT_EQ(rec.steps.back().size(), 1u);
  EXPECT_EQ(rec.steps.back()[0].request, b->id());
  EXPECT_EQ(rec.steps.back()[0].slot, 0);
  EXPECT_EQ(rec.steps.back()[0].tokens, 3);  // b's prompt less the <bos> that a left in the slot
  EXPECT_FALSE(rec.steps.back()[0].decode);
  std::vector<RequestEvent> ev;
  a->Wait(ev, std::chrono::milliseconds(0));
  ASSERT_FALSE(ev.empty());
  EXPECT_TRUE(ev.back().finished);
  EXPECT_EQ(ev.back().reason, FinishReason::kAbort);
  EXPECT_EQ(ev.back().usage.completion_tokens, 4);  // one per step, nothing after the cancel
  EXPECT_EQ(s.Stats().queue_depth, 0);
  EXPECT_EQ(s.Stats().active_slots, 1);
  const Result rb = RunAll(s, {b})[0];
  EXPECT_EQ(rb.last.reason, FinishReason::kLength);
  EXPECT_EQ(s.Stats().requests_cancelled, 1u);
  // Cancelling a queued request.
  auto c = MustSubmit(s, {.prompt = Prompt(4, t.V, 5), .max_tokens = 30});
  auto d = MustSubmit(s, {.prompt = Prompt(4, t.V, 6), .max_tokens = 3});
  s.Step();
  d->Cancel();
  s.CancelAll();
  s.Step();
  EXPECT_TRUE(s.Idle());
  for (auto& h : {c, d}) {
    std::vector<RequestEvent> e;
    h->Wait(e, std::chrono::milliseconds(0));
    ASSERT_FALSE(e.empty());
    EXPECT_EQ(e.back().reason, FinishReason::kAbort);
  }
}

// Requests waiting upstream (an HTTP server's queued connections) count
// toward max_queue: with the slot free and max_queue 2, two waiting
// connections leave room for one more request, three for none.
TEST(Scheduler, WaitingUpstreamCountsTowardTheQueue) {
  TinySetup t;
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 64, .step_tokens = 8, .max_queue = 2});
  const RequestOptions r{.prompt = Prompt(4, t.V, 7), .max_tokens = 2, .ignore_eos = true};
  EXPECT_EQ(s.Submit(r, 3).status, SubmitStatus::kQueueFull);
  EXPECT_EQ(s.Stats().requests_rejected, 1u);
  std::vector<std::shared_ptr<RequestHandle>> accepted;
  SubmitResult ok = s.Submit(r, 2);
  ASSERT_EQ(ok.status, SubmitStatus::kAccepted);
  accepted.push_back(ok.handle);
  EXPECT_EQ(s.Submit(r, 2).status, SubmitStatus::kQueueFull);  // 1 queued + 2 upstream = 3 = 2 + 1 free slot
  SubmitResult neg = s.Submit(r, -5);                          // a negative count is none
  ASSERT_EQ(neg.status, SubmitStatus::kAccepted);
  accepted.push_back(neg.handle);
  EXPECT_EQ(RunAll(s, accepted).size(), 2u);
}

// Beyond max_queue waiting requests Submit refuses (kQueueFull, no handle:
// the server's 503 + Retry-After); what was accepted is never dropped: each
// accepted request runs to its end. Once the queue has room, Submit takes
// requests again; after Drain it refuses them all.
TEST(Scheduler, QueueIsBoundedAndDrainRefuses) {
  TinySetup t;
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 64, .step_tokens = 8, .max_queue = 1});
  const RequestOptions r{.prompt = Prompt(4, t.V, 7), .max_tokens = 2, .ignore_eos = true};
  std::vector<std::shared_ptr<RequestHandle>> accepted;
  accepted.push_back(MustSubmit(s, r));  // takes the slot
  accepted.push_back(MustSubmit(s, r));  // waits
  SubmitResult full = s.Submit(r);
  EXPECT_EQ(full.status, SubmitStatus::kQueueFull);
  EXPECT_EQ(full.handle, nullptr);
  EXPECT_EQ(s.Stats().queue_depth, 2);  // both wait until the first step admits one
  s.Step();                             // the first is running, one waits: still full
  EXPECT_EQ(s.Stats().active_slots, 1);
  EXPECT_EQ(s.Stats().queue_depth, 1);
  EXPECT_EQ(s.Submit(r).status, SubmitStatus::kQueueFull);
  s.Step();  // the first finishes (2 tokens); the second takes the slot at the next step
  s.Step();
  EXPECT_EQ(s.Stats().queue_depth, 0);
  accepted.push_back(MustSubmit(s, r));  // room again
  s.Drain();
  EXPECT_EQ(s.Submit(r).status, SubmitStatus::kDraining);
  EXPECT_FALSE(s.WaitIdle(std::chrono::milliseconds(0)));
  const std::vector<Result> done = RunAll(s, accepted);
  for (const Result& d : done) {
    EXPECT_EQ(d.last.reason, FinishReason::kLength);
    EXPECT_EQ(d.tokens.size(), 2u);
  }
  const SchedulerStats st = s.Stats();
  EXPECT_EQ(st.requests_accepted, 3u);
  EXPECT_EQ(st.requests_rejected, 3u);
  EXPECT_EQ(st.requests_finished, 3u);
  EXPECT_EQ(st.requests_cancelled, 0u);
}

TEST(Scheduler, StopStringsTokensAndLength) {
  TinySetup t;
  const SchedulerOptions o{.slots = 2, .max_context = 64, .step_tokens = 8};
  const RequestOptions base{.prompt = Prompt(6, t.V, 8), .max_tokens = 12};
  const Result full = Alone(t, base, o);
  ASSERT_EQ(full.text.size(), 12u);  // one character per token
  EXPECT_EQ(full.last.reason, FinishReason::kLength);
  EXPECT_EQ(full.last.detail, "max_tokens");
  // A stop string of two characters from the middle: the text ends before it,
  // and no event ever showed part of it.
  const std::string stop = full.text.substr(5, 2);
  const std::size_t first = full.text.find(stop);
  RequestOptions r = base;
  r.stop = {"never", stop};
  Scheduler s(*t.model, t.tok, nullptr, o);
  auto h = MustSubmit(s, r);
  std::vector<RequestEvent> ev;
  std::string streamed;
  while (!s.Idle()) {
    s.Step();
    h->Wait(ev, std::chrono::milliseconds(0));
  }
  const Result got = Collect(*h, ev);
  EXPECT_EQ(got.text, full.text.substr(0, first));
  EXPECT_EQ(got.last.reason, FinishReason::kStop);
  EXPECT_EQ(got.last.detail, "stop string");
  EXPECT_EQ(got.last.usage.completion_tokens, static_cast<std::int64_t>(first + 2));
  // A stop token ends generation at it (the token adds no text).
  r = base;
  r.stop_tokens = {full.tokens[3].token};
  const std::size_t at =
      static_cast<std::size_t>(std::find_if(full.tokens.begin(), full.tokens.end(),
                                            [&](const OutputToken& x) { return x.token == r.stop_tokens[0]; }) -
                               full.tokens.begin());
  const Result st = Alone(t, r, o);
  EXPECT_EQ(st.text, full.text.substr(0, at));
  EXPECT_EQ(st.last.detail, "stop token");
  EXPECT_EQ(st.last.usage.completion_tokens, static_cast<std::int64_t>(at + 1));
  // ignore_eos: the stop token (and EOS) does not end it; max_tokens does.
  r.ignore_eos = true;
  const Result ig = Alone(t, r, o);
  EXPECT_EQ(ig.text, full.text);
  EXPECT_EQ(ig.last.detail, "max_tokens");
}

TEST(Scheduler, SubmitChecksRequests) {
  TinySetup t;
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 16, .step_tokens = 8});
  const std::vector<std::pair<RequestOptions, std::string>> bad = {
      {{.prompt = {}}, "the prompt is empty"},
      {{.prompt = {2, 50}}, "prompt token 1 is 50, outside the vocabulary [0, 50)"},
      {{.prompt = {2, 3}, .max_tokens = 0}, "max_tokens must be >= 1"},
      {{.prompt = Prompt(10, t.V, 1), .max_tokens = 7}, "= 17 exceeds the context of 16 tokens per slot"},
      {{.prompt = {2}, .max_tokens = 1, .top_logprobs = 21}, "top_logprobs must be in [-1, 20]"},
      {{.prompt = {2}, .max_tokens = 1, .stop = {""}}, "stop strings must not be empty"},
      {{.prompt = {2}, .max_tokens = 1, .sampler = {.temperature = 1.0f, .top_p = 1.5f}},
       "top_p must be in (0, 1], got 1.5"},
  };
  for (const auto& [r, want] : bad) {
    try {
      s.Submit(r);
      ADD_FAILURE() << "no error, wanted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(s.Idle());
  EXPECT_THROW(Scheduler(*t.model, t.tok, nullptr, {.slots = 4, .step_tokens = 4}), Error);
  EXPECT_THROW(Scheduler(*t.model, t.tok, nullptr, {.slots = 0}), Error);
}

// Gemma 4 (KV-shared layers with the prefill short-cut, per-layer head sizes):
// together equals alone, and a cache hit equals cold.
TEST(Scheduler, Gemma4ConcurrentAndCachedEqualAlone) {
  const testing::TinyGemma4Spec spec;
  const TempGguf file = testing::TempGemma4(spec, "scheduler");
  const std::unique_ptr<Model> model = Model::Load(file.path);
  const Tokenizer tok(TinyVocab(spec.n_vocab));
  ThreadPool pool(2);
  const SchedulerOptions o{.slots = 3, .max_context = 80, .step_tokens = 6};
  Scheduler s(*model, tok, &pool, o);
  std::vector<RequestOptions> rs;
  for (int i = 0; i < 5; ++i) {
    rs.push_back({.prompt = Prompt(4 + 7 * i, spec.n_vocab, 40 + static_cast<unsigned>(i)),
                  .max_tokens = 6 + i,
                  .top_logprobs = 2});
  }
  rs.push_back(rs[3]);  // served from the cache of request 3's slot (if free) or cold: same result
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const RequestOptions& r : rs) hs.push_back(MustSubmit(s, r));
  const std::vector<Result> got = RunAll(s, hs);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    Scheduler alone(*model, tok, nullptr, {.slots = 1, .max_context = 80, .step_tokens = 64});
    auto h = MustSubmit(alone, rs[i]);
    ExpectSame(got[i], RunAll(alone, {h})[0], "gemma4 request " + std::to_string(i));
  }
}

std::string DefaultModel() { return testing::DefaultModelPath(); }

// The default model: 8 greedy requests together (one prompt past the
// 512-token window) equal each alone, token for token and logprob for
// logprob; a request sharing a prefix is served from the cache, identically.
TEST(Scheduler, DefaultModelEightConcurrentEqualAlone) {
  if (!std::filesystem::exists(DefaultModel())) GTEST_SKIP() << "no default model at " << DefaultModel();
  const std::unique_ptr<Model> model = Model::Load(DefaultModel());
  const Tokenizer tok(ReadVocab(model->gguf()));
  ThreadPool pool(2);
  const SchedulerOptions o{.slots = 8, .max_context = 1024, .step_tokens = 128};
  std::vector<RequestOptions> rs;
  const std::string base = "The capital of France is Paris. The capital of Germany is Berlin. ";
  for (int i = 0; i < 8; ++i) {
    std::string text;
    for (int k = 0; k < (i == 7 ? 45 : 1 + i); ++k) text += base;
    text += "Question " + std::to_string(i) + ": the capital of Italy is";
    rs.push_back({.prompt = tok.Encode(text), .max_tokens = 6, .top_logprobs = 1});
  }
  ASSERT_GT(rs[7].prompt.size(), 600u);
  Scheduler s(*model, tok, &pool, o);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const RequestOptions& r : rs) hs.push_back(MustSubmit(s, r));
  const std::vector<Result> got = RunAll(s, hs);
  Scheduler alone(*model, tok, &pool, {.slots = 1, .max_context = 1024, .step_tokens = 512});
  for (std::size_t i = 0; i < rs.size(); ++i) {
    ExpectSame(got[i], RunAll(alone, {MustSubmit(alone, rs[i])})[0], "default model request " + std::to_string(i));
  }
  // Shares all but the question with request 6 (still cached in a slot).
  RequestOptions follow = rs[6];
  follow.prompt =
      tok.Encode(std::string(base).append(base).append(base).append(base).append(base).append(base).append(base) +
                 "Question 9: the capital of Spain is");
  const Result hit = RunAll(s, {MustSubmit(s, follow)})[0];
  EXPECT_GT(hit.last.usage.cached_tokens, 100);
  Scheduler cold(*model, tok, &pool, {.slots = 1, .max_context = 1024, .step_tokens = 128});
  ExpectSame(hit, RunAll(cold, {MustSubmit(cold, follow)})[0], "default model cache hit");
}

}  // namespace
}  // namespace kvshare
