// Test helpers for the Scheduler tests (runtime_scheduler*_test.cc): a tiny
// float-weight Gemma 3 and its tokenizer, submitting and stepping requests to
// the end, comparing results bitwise, and recording the logits each sampled
// token was drawn from (SchedulerOptions::on_step).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvshare/model/model.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_tiny_gemma.h"
#include "tokenizer_tiny_vocab.h"

namespace kvshare::testing {

// Everything a request produced.
struct Result {
  std::string text;
  std::vector<OutputToken> tokens;
  RequestEvent last;
  int events = 0;
};

inline Result Collect(RequestHandle& h, std::vector<RequestEvent>& events) {
  Result r;
  for (RequestEvent& e : events) {
    ++r.events;
    r.text += e.text;
    for (OutputToken& t : e.tokens) r.tokens.push_back(t);
    if (e.finished) r.last = e;
  }
  (void)h;
  return r;
}

// Steps until every handle has finished; returns their results in order.
inline std::vector<Result> RunAll(Scheduler& s, const std::vector<std::shared_ptr<RequestHandle>>& handles) {
  std::vector<std::vector<RequestEvent>> events(handles.size());
  for (int guard = 0; guard < 100000 && !s.Idle(); ++guard) s.Step();
  EXPECT_TRUE(s.Idle());
  std::vector<Result> out;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    handles[i]->Wait(events[i], std::chrono::milliseconds(0));
    out.push_back(Collect(*handles[i], events[i]));
    EXPECT_TRUE(out.back().last.finished) << "request " << i;
  }
  return out;
}

inline std::shared_ptr<RequestHandle> MustSubmit(Scheduler& s, RequestOptions r) {
  SubmitResult res = s.Submit(std::move(r));
  EXPECT_EQ(res.status, SubmitStatus::kAccepted);
  return res.handle;
}

// `n` choices of request `a`, as a server's `n` submits them: the first as
// given, choice i with seed a.sampler.seed + i, prefilled from the first
// (RequestOptions::prefill_from).
struct Choices {
  std::vector<RequestOptions> requests;
  std::vector<std::shared_ptr<RequestHandle>> handles;
};
inline Choices SubmitChoices(Scheduler& s, const RequestOptions& a, int n) {
  Choices c{{a}, {MustSubmit(s, a)}};
  for (int i = 1; i < n; ++i) {
    RequestOptions b = a;
    b.sampler.seed = a.sampler.seed + static_cast<unsigned>(i);
    b.prefill_from = c.handles[0]->id();
    c.requests.push_back(b);
    c.handles.push_back(MustSubmit(s, b));
  }
  return c;
}

inline std::vector<std::int32_t> Prompt(int n, int vocab, unsigned seed) {
  std::vector<std::int32_t> t = {2};
  std::uint64_t x = seed;
  for (int i = 1; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t.push_back(4 + static_cast<std::int32_t>((x >> 33) % static_cast<std::uint64_t>(vocab - 4)));
  }
  return t;
}

inline void ExpectSame(const Result& a, const Result& b, const std::string& what) {
  EXPECT_EQ(a.text, b.text) << what;
  ASSERT_EQ(a.tokens.size(), b.tokens.size()) << what;
  for (std::size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_EQ(a.tokens[i].token, b.tokens[i].token) << what << " token " << i;
    EXPECT_EQ(a.tokens[i].text, b.tokens[i].text) << what << " token " << i;
    // Bitwise: the logits they come from are bitwise equal.
    EXPECT_EQ(a.tokens[i].logprob, b.tokens[i].logprob) << what << " token " << i;
    ASSERT_EQ(a.tokens[i].top.size(), b.tokens[i].top.size()) << what;
    for (std::size_t k = 0; k < a.tokens[i].top.size(); ++k) {
      EXPECT_EQ(a.tokens[i].top[k].token, b.tokens[i].top[k].token) << what;
      EXPECT_EQ(a.tokens[i].top[k].logprob, b.tokens[i].top[k].logprob) << what;
    }
  }
  EXPECT_EQ(a.last.reason, b.last.reason) << what;
  EXPECT_EQ(a.last.usage.completion_tokens, b.last.usage.completion_tokens) << what;
}

// A tiny float-weight Gemma 3 (window 5; float matmuls keep every last bit).
struct TinySetup {
  TinyGemmaSpec spec = [] {
    TinyGemmaSpec s;
    s.types = {GgmlType::kF32, GgmlType::kF16};
    return s;
  }();
  TempGguf file{spec, "scheduler"};
  std::unique_ptr<Model> model = Model::Load(file.path);
  Tokenizer tok{TinyVocab(spec.n_vocab)};
  int V = spec.n_vocab;
};

// The logits each request's sampled tokens were drawn from, in order, keyed
// by RequestHandle::id(); and every step's trace (entries only). Set as
// SchedulerOptions::on_step through Hook().
struct StepRecorder {
  std::map<std::uint64_t, std::vector<std::vector<float>>> logits;
  std::vector<std::vector<StepTrace::Entry>> steps;
  int n_vocab = 0;

  explicit StepRecorder(int vocab) : n_vocab(vocab) {}
  std::function<void(const StepTrace&)> Hook() {
    return [this](const StepTrace& t) {
      steps.push_back(t.entries);
      const std::size_t V = static_cast<std::size_t>(n_vocab);
      std::size_t at = 0;  // the entry's first logits row (the only one without speculation)
      for (const StepTrace::Entry& e : t.entries) {
        if (e.sampled) {
          const std::span<const float> l = t.logits.subspan(at * V, V);
          logits[e.request].emplace_back(l.begin(), l.end());
        }
        at += static_cast<std::size_t>(e.logits_rows);
      }
      EXPECT_EQ(t.logits.size(), at * V);
    };
  }
};

// Bitwise equality of two requests' sampled logits (every vocabulary entry of
// every step).
inline void ExpectSameLogits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                             const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what;
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float))) << what << ", sampled token " << i;
  }
}

}  // namespace kvshare::testing
