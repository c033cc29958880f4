// Images in scheduled prompts (RequestOptions::embeddings) on the tiny
// float-weight Gemma 3 (bidirectional images on every layer), with a fake
// image: random rows over placeholder tokens.
// - a row with an image gives bitwise the same logits alone, among other
//   rows, and cut into other chunks; chunks never cut the image;
// - the prompt cache reuses past an image only when its key matches, and
//   otherwise resumes at the image's start (bitwise the cold result);
// - every bad span is refused at Submit.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/runtime/scheduler.h"
#include "runtime_scheduler_util.h"

namespace kvshare {
namespace {

using testing::ExpectSame;
using testing::ExpectSameLogits;
using testing::MustSubmit;
using testing::Prompt;
using testing::Result;
using testing::RunAll;
using testing::StepRecorder;
using testing::TinySetup;

constexpr std::int32_t kSoft = 3;  // placeholder id of the image's tokens
constexpr int kImageBegin = 6, kImageCount = 7;

std::shared_ptr<std::vector<float>> Rows(int n, int width, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  auto v = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n) * width);
  for (float& e : *v) e = d(rng);
  return v;
}

// A 16-token prompt with a 7-token image at 6 (rows from `seed`, key `key`).
RequestOptions ImageRequest(const TinySetup& t, unsigned seed, std::uint64_t key, int max_tokens = 6) {
  RequestOptions r{.prompt = Prompt(16, t.V, 40), .max_tokens = max_tokens, .top_logprobs = 2};
  for (int i = 0; i < kImageCount; ++i) r.prompt[kImageBegin + i] = kSoft;
  auto rows = Rows(kImageCount, t.spec.n_embd, seed);
  r.embeddings = {{.begin = kImageBegin, .count = kImageCount, .rows = rows->data(), .bidirectional = true}};
  r.embedding_keys = {key};
  r.embedding_rows = rows;
  return r;
}

struct ImageRun {
  Result result;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<StepTrace::Entry>> steps;
  std::uint64_t id = 0;  // the image request's
};

// The image request alone or after `others`, with `step_tokens` a step.
ImageRun RunImage(const TinySetup& t, const RequestOptions& image, int step_tokens, int others) {
  StepRecorder rec(t.V);
  Scheduler s(*t.model, t.tok, nullptr,
              {.slots = 3, .max_context = 48, .step_tokens = step_tokens, .on_step = rec.Hook()});
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int i = 0; i < others; ++i) {
    hs.push_back(MustSubmit(s, {.prompt = Prompt(5 + 4 * i, t.V, 60 + static_cast<unsigned>(i)), .max_tokens = 8}));
  }
  hs.push_back(MustSubmit(s, image));
  const std::vector<Result> out = RunAll(s, hs);
  return {out.back(), rec.logits[hs.back()->id()], rec.steps, hs.back()->id()};
}

TEST(SchedulerImages, SameAloneInABatchAndInAnyChunks) {
  TinySetup t;
  const RequestOptions image = ImageRequest(t, 1, 11);
  const ImageRun alone = RunImage(t, image, 32, 0);
  for (int step : {9, 10, 13}) {
    for (int others : {0, 2}) {
      const std::string what = "step_tokens " + std::to_string(step) + ", others " + std::to_string(others);
      const ImageRun r = RunImage(t, image, step, others);
      ExpectSame(alone.result, r.result, what);
      ExpectSameLogits(alone.logits, r.logits, what);
      // No chunk of the image's row cuts the image.
      for (const auto& entries : r.steps) {
        for (const StepTrace::Entry& e : entries) {
          if (e.decode || e.request != r.id) continue;
          const std::int64_t end = e.position + e.tokens;
          EXPECT_FALSE(e.position > kImageBegin && e.position < kImageBegin + kImageCount) << what;
          EXPECT_FALSE(end > kImageBegin && end < kImageBegin + kImageCount) << what;
        }
      }
    }
  }
  // The image matters: other rows give other logits.
  const ImageRun other = RunImage(t, ImageRequest(t, 2, 12), 32, 0);
  EXPECT_NE(alone.logits.front(), other.logits.front());
}

TEST(SchedulerImages, PromptCacheKeysOnTheImage) {
  TinySetup t;
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 48, .step_tokens = 32});
  const RequestOptions a = ImageRequest(t, 1, 11), b = ImageRequest(t, 2, 12);
  RunAll(s, {MustSubmit(s, a)});
  // The same image: every prompt token but the last is reused.
  const Result again = RunAll(s, {MustSubmit(s, a)})[0];
  EXPECT_EQ(again.last.usage.cached_tokens, 15);
  // Another image on the same placeholder tokens: reuse stops at its start,
  // and the result is the cold one.
  const Result other = RunAll(s, {MustSubmit(s, b)})[0];
  EXPECT_EQ(other.last.usage.cached_tokens, kImageBegin);
  Scheduler cold(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 48, .step_tokens = 32});
  ExpectSame(RunAll(cold, {MustSubmit(cold, b)})[0], other, "image b after image a");
  // A text prompt on the placeholders (no image) does not reuse the image.
  RequestOptions text = b;
  text.embeddings.clear();
  text.embedding_keys.clear();
  EXPECT_EQ(RunAll(s, {MustSubmit(s, text)})[0].last.usage.cached_tokens, kImageBegin);
}

// A row whose step ends in an error (here NaN logits from NaN image rows,
// as a clip of NaN samples gave) leaves nothing in the prompt cache: its
// KV rows may hold NaN even before the bad span (attention multiplies the
// V rows of masked keys by 0, and 0 x NaN is NaN), and a later prompt that
// shared their prefix used to get NaN logits too (the server answered every
// later request with a 500).
TEST(SchedulerImages, AFailedRowLeavesNothingToReuse) {
  TinySetup t;
  RequestOptions nan = ImageRequest(t, 1, 11);
  auto rows = std::make_shared<std::vector<float>>(static_cast<std::size_t>(kImageCount) * t.spec.n_embd,
                                                   std::numeric_limits<float>::quiet_NaN());
  nan.embeddings[0].rows = rows->data();
  nan.embedding_rows = rows;
  RequestOptions text = nan;
  text.embeddings.clear();
  text.embedding_keys.clear();
  text.embedding_rows.reset();

  Scheduler cold(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 48, .step_tokens = 32});
  const Result want = RunAll(cold, {MustSubmit(cold, text)})[0];
  ASSERT_FALSE(want.last.error);

  Scheduler s(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 48, .step_tokens = 32});
  const Result failed = RunAll(s, {MustSubmit(s, nan)})[0];
  EXPECT_TRUE(failed.last.error);
  const Result after = RunAll(s, {MustSubmit(s, text)})[0];
  EXPECT_FALSE(after.last.error) << after.last.detail;
  EXPECT_EQ(after.last.usage.cached_tokens, 0);
  ExpectSame(want, after, "a text prompt after a failed image prompt on the same tokens");
}

// Submit throws an Error whose message has `words`.
void ExpectRefused(Scheduler& s, RequestOptions r, const std::string& words) {
  try {
    s.Submit(std::move(r));
    ADD_FAILURE() << "accepted; wanted an error with: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(SchedulerImages, BadSpansAreRefusedAtSubmit) {
  TinySetup t;
  Scheduler s(*t.model, t.tok, nullptr, {.slots = 3, .max_context = 48, .step_tokens = 8});
  // 7 tokens > step_tokens - slots + 1 = 6.
  ExpectRefused(s, ImageRequest(t, 1, 11), "must run in one step");
  Scheduler wide(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 48, .step_tokens = 16});
  RequestOptions r = ImageRequest(t, 1, 11);
  EXPECT_EQ(wide.Submit(r).status, SubmitStatus::kAccepted);
  RequestOptions keys = r;
  keys.embedding_keys.clear();
  ExpectRefused(wide, keys, "keys (one per span)");
  RequestOptions past = r;
  past.embeddings[0].begin = 12;
  ExpectRefused(wide, past, "within the prompt");
  RequestOptions overlap = r;
  overlap.embeddings.push_back(r.embeddings[0]);
  overlap.embedding_keys.push_back(1);
  ExpectRefused(wide, overlap, "disjoint");
  RequestOptions empty = r;
  empty.embeddings[0].count = 0;
  ExpectRefused(wide, empty, "non-empty");
  RequestOptions no_rows = r;
  no_rows.embeddings[0].rows = nullptr;
  ExpectRefused(wide, no_rows, "has no rows");
}

}  // namespace
}  // namespace kvshare
