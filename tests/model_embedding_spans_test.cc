// Caller-given input rows (EmbeddingSpan: an image's soft tokens) in the
// model's forward pass, on the tiny random gemma3 of model_tiny_gemma.h (6
// layers S S F S S F, window 5) and the tiny Gemma 4 of model_tiny_gemma4.h:
// - rows equal to the tokens' own embeddings give the tokens' logits bit for bit;
// - a bidirectional image matches the double reference with HF's blockwise
//   overlay on every layer (Gemma 3) or on sliding layers only, and differs
//   from the causal run (the test would see the overlay ignored);
// - chunking (max_step) and batching do not change a row with an image;
// - each family's default image attention, and every bad span is an error
//   that leaves the state as it was.
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <string>
#include <vector>

#include "common_test_util.h"
#include "kvshare/common/error.h"
#include "kvshare/model/model.h"
#include "model/decoder.h"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma4.h"

namespace kvshare {
namespace {

using testing::MaxRelDiff;
using testing::ReferenceImage;
using testing::ReferenceLogits;
using testing::TempGguf;
using testing::TinyGemmaSpec;
using testing::Tokens;

constexpr double kFp32Tol = 1e-5;  // as model_tiny_gemma_test.cc

std::vector<float> RandomRows(int n, int width, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<std::size_t>(n) * width);
  for (float& e : v) e = d(rng);
  return v;
}

std::vector<float> AllLogits(const Model& m, const std::vector<std::int32_t>& tokens,
                             std::span<const EmbeddingSpan> embeddings, ModelStateOptions o) {
  auto st = m.NewState(o);
  const auto l = m.Forward(*st, tokens, nullptr,
                           {.num_logits = static_cast<std::int64_t>(tokens.size()), .embeddings = embeddings});
  return std::vector<float>(l.begin(), l.end());
}

class EmbeddingSpans : public ::testing::Test {
 protected:
  EmbeddingSpans() : file_(Spec(), "embedding_spans"), model_(Model::Load(file_.path)) {}
  static TinyGemmaSpec Spec() {
    TinyGemmaSpec s;
    s.types = {GgmlType::kF32};
    return s;
  }
  int E() const { return model_->config().n_embd; }
  TempGguf file_;
  std::unique_ptr<Model> model_;
};

TEST_F(EmbeddingSpans, TheTokensOwnRowsGiveTheTokensLogits) {
  const auto t = Tokens(20, model_->config().n_vocab, 3);
  std::vector<float> rows(static_cast<std::size_t>(8) * E());
  model_->EmbedTokens(std::span(t).subspan(6, 8), rows.data());
  std::vector<std::int32_t> placeholders = t;
  for (int i = 6; i < 14; ++i) placeholders[static_cast<std::size_t>(i)] = 7;
  const EmbeddingSpan causal[] = {{.begin = 6, .count = 8, .rows = rows.data(), .bidirectional = false}};
  const auto plain = AllLogits(*model_, t, {}, {.max_context = 32});
  EXPECT_EQ(AllLogits(*model_, placeholders, causal, {.max_context = 32}), plain);
  // A bidirectional span on a model told to keep images causal: the same.
  const EmbeddingSpan bidi[] = {{.begin = 6, .count = 8, .rows = rows.data(), .bidirectional = true}};
  EXPECT_EQ(AllLogits(*model_, placeholders, bidi, {.max_context = 32, .image_attention = ImageAttention::kCausal}),
            plain);
}

TEST_F(EmbeddingSpans, BidirectionalImageMatchesTheDenseReference) {
  EXPECT_EQ(model_->config().image_attention, ImageAttention::kAllLayers);
  const auto t = Tokens(24, model_->config().n_vocab, 4);
  // Two images, the first longer than the window (5) so the window meets the overlay.
  const std::vector<ReferenceImage> images = {{.begin = 3, .count = 9, .rows = RandomRows(9, E(), 1)},
                                              {.begin = 15, .count = 4, .rows = RandomRows(4, E(), 2)}};
  std::vector<EmbeddingSpan> spans;
  for (const ReferenceImage& im : images) {
    spans.push_back({.begin = im.begin, .count = im.count, .rows = im.rows.data(), .bidirectional = true});
  }
  for (ImageAttention mode : {ImageAttention::kAllLayers, ImageAttention::kSlidingLayers}) {
    const auto ref = ReferenceLogits(*model_, t, 0, images, mode);
    const std::vector<float> want(ref.begin(), ref.end());
    for (GqaKernel kernel : {GqaKernel::kReference, GqaKernel::kAuto}) {
      for (int step : {64, 12, 9}) {
        const auto got =
            AllLogits(*model_, t, spans,
                      {.max_context = 32, .max_step = step, .attention_kernel = kernel, .image_attention = mode});
        EXPECT_LT(MaxRelDiff(got, want), kFp32Tol) << ImageAttentionName(mode) << " step " << step;
      }
    }
  }
  const auto causal = ReferenceLogits(*model_, t, 0, images, ImageAttention::kCausal);
  const auto all = ReferenceLogits(*model_, t, 0, images, ImageAttention::kAllLayers);
  const auto sliding = ReferenceLogits(*model_, t, 0, images, ImageAttention::kSlidingLayers);
  EXPECT_GT(MaxRelDiff(std::vector<float>(all.begin(), all.end()), std::vector<float>(causal.begin(), causal.end())),
            1e-2);
  EXPECT_GT(MaxRelDiff(std::vector<float>(all.begin(), all.end()), std::vector<float>(sliding.begin(), sliding.end())),
            1e-3);
}

TEST_F(EmbeddingSpans, ChunksAndBatchesLeaveARowWithAnImageBitwiseTheSame) {
  const auto t = Tokens(22, model_->config().n_vocab, 5);
  const auto rows = RandomRows(8, E(), 3);
  const EmbeddingSpan img[] = {{.begin = 5, .count = 8, .rows = rows.data(), .bidirectional = true}};
  const auto whole = AllLogits(*model_, t, img, {.max_context = 32, .max_step = 64});
  // max_step 10 would cut the image at 10: the cut moves to 5.
  for (int step : {10, 8}) EXPECT_EQ(AllLogits(*model_, t, img, {.max_context = 32, .max_step = step}), whole) << step;
  // In a batch beside a text row, and fed in two calls (the image in the second).
  auto st = model_->NewState({.max_context = 32, .max_step = 10, .max_batch = 2});
  const auto other = Tokens(17, model_->config().n_vocab, 6);
  const BatchEntry entries[] = {
      {.row = 1, .tokens = other, .num_logits = 1},
      {.row = 0, .tokens = t, .num_logits = static_cast<std::int64_t>(t.size()), .embeddings = img}};
  const auto l = model_->ForwardBatch(*st, entries, nullptr);
  const std::size_t V = static_cast<std::size_t>(model_->config().n_vocab);
  EXPECT_EQ(std::vector<float>(l.begin() + static_cast<std::ptrdiff_t>(V), l.end()), whole);
  auto st2 = model_->NewState({.max_context = 32, .max_step = 64});
  model_->Forward(*st2, std::span(t).first(3), nullptr, {.num_logits = 3});
  const EmbeddingSpan shifted[] = {{.begin = 2, .count = 8, .rows = rows.data(), .bidirectional = true}};
  const auto tail = model_->Forward(*st2, std::span(t).subspan(3), nullptr, {.num_logits = 19, .embeddings = shifted});
  EXPECT_EQ(std::vector<float>(tail.begin(), tail.end()),
            std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(3 * V), whole.end()));
}

TEST_F(EmbeddingSpans, BadSpansAreErrorsThatChangeNothing) {
  const auto t = Tokens(12, model_->config().n_vocab, 7);
  const auto rows = RandomRows(12, E(), 4);
  auto st = model_->NewState({.max_context = 32, .max_step = 6});
  model_->Forward(*st, std::span(t).first(2), nullptr);
  const auto expect_error = [&](std::vector<EmbeddingSpan> spans, const std::string& what) {
    try {
      model_->Forward(*st, t, nullptr, {.embeddings = spans});
      ADD_FAILURE() << "expected an error containing '" << what << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    EXPECT_EQ(st->length(), 2);
  };
  expect_error({{.begin = 1, .count = 0, .rows = rows.data()}}, "is empty");
  expect_error({{.begin = 8, .count = 5, .rows = rows.data()}}, "lies outside the 12 tokens");
  expect_error({{.begin = -1, .count = 2, .rows = rows.data()}}, "lies outside");
  expect_error({{.begin = 4, .count = 3, .rows = rows.data()}, {.begin = 6, .count = 2, .rows = rows.data()}},
               "starts before the previous span ends at 7");
  expect_error({{.begin = 0, .count = 2, .rows = nullptr}}, "has no rows");
  expect_error({{.begin = 1, .count = 7, .rows = rows.data(), .bidirectional = true}}, "raise max_step to at least 7");
  // Causal spans may be longer than a step: they are cut like tokens.
  EXPECT_NO_THROW(model_->Forward(
      *st, t, nullptr, {.embeddings = std::vector<EmbeddingSpan>{{.begin = 1, .count = 7, .rows = rows.data()}}}));
}

TEST(EmbeddingSpansGemma4, ImageAttentionFollowsTheVariantAndPerLayerInputsTakeIdZero) {
  testing::TinyGemma4Spec e_model;  // per-layer embeddings: an E-model, causal
  testing::TinyGemma4Spec large = e_model;
  large.ple = 0;  // none: the 26B / 31B kind, bidirectional on sliding layers
  const auto fe = testing::TempGemma4(e_model, "spans_e");
  const auto fl = testing::TempGemma4(large, "spans_large");
  const auto me = Model::Load(fe.path);
  const auto ml = Model::Load(fl.path);
  EXPECT_EQ(me->config().image_attention, ImageAttention::kCausal);
  EXPECT_EQ(ml->config().image_attention, ImageAttention::kSlidingLayers);
  // The placeholder ids do not matter (id 0 goes to the per-layer inputs),
  // and differ from running the original ids' per-layer inputs.
  const int E = me->config().n_embd;
  auto t = Tokens(16, me->config().n_vocab, 8);
  std::vector<float> rows(static_cast<std::size_t>(5) * E);
  me->EmbedTokens(std::span(t).subspan(4, 5), rows.data());
  const EmbeddingSpan img[] = {{.begin = 4, .count = 5, .rows = rows.data(), .bidirectional = true}};
  const auto original = AllLogits(*me, t, {}, {.max_context = 32});
  for (int i = 4; i < 9; ++i) t[static_cast<std::size_t>(i)] = 11;
  const auto a = AllLogits(*me, t, img, {.max_context = 32});
  for (int i = 4; i < 9; ++i) t[static_cast<std::size_t>(i)] = 13;
  EXPECT_EQ(AllLogits(*me, t, img, {.max_context = 32}), a);
  EXPECT_GT(MaxRelDiff(a, original), 1e-4);
  // The large kind: sliding-layer overlay changes the outputs; causal override restores.
  const int El = ml->config().n_embd;
  std::vector<float> rows_l(static_cast<std::size_t>(5) * El);
  ml->EmbedTokens(std::span(t).subspan(4, 5), rows_l.data());
  const EmbeddingSpan img_l[] = {{.begin = 4, .count = 5, .rows = rows_l.data(), .bidirectional = true}};
  const EmbeddingSpan causal_l[] = {{.begin = 4, .count = 5, .rows = rows_l.data(), .bidirectional = false}};
  const auto overlay = AllLogits(*ml, t, img_l, {.max_context = 32});
  EXPECT_GT(MaxRelDiff(overlay, AllLogits(*ml, t, causal_l, {.max_context = 32})), 1e-4);
  EXPECT_EQ(AllLogits(*ml, t, img_l, {.max_context = 32, .image_attention = ImageAttention::kCausal}),
            AllLogits(*ml, t, causal_l, {.max_context = 32}));
}

// The rows a step takes instead of its token embeddings (GivenStepRows, the
// CPU's EmbedStep and the GPU models' upload alike): hard-token rows for ids
// in the installed ranges, the step's embedding rows over them (a span's
// placeholder id may itself be a hard id), in step order, each token once;
// the per-layer ids zero the hard ids only.
TEST(GivenStepRows, HardRowsThenSpansOverThemInStepOrder) {
  constexpr int E = 2;
  const std::vector<HardTokenRows> hard = {{.first = 10, .rows = {1, 1, 2, 2}}, {.first = 20, .rows = {3, 3}}};
  const std::vector<float> span_rows = {7, 7, 8, 8, 9, 9};
  detail::Step step;
  step.tokens = {5, 11, 0, 20, 10, 12, 21};
  step.embeddings = {{.at = 4, .count = 1, .rows = span_rows.data()},
                     {.at = 5, .count = 2, .rows = span_rows.data() + 2}};
  std::vector<std::int32_t> ple;
  const detail::StepInputRows g = detail::GivenStepRows(step, &hard, E, &ple);
  EXPECT_EQ(g.at, (std::vector<std::int64_t>{1, 3, 4, 5, 6}));
  ASSERT_EQ(g.rows.size(), 5u);
  EXPECT_EQ(g.rows[0], hard[0].rows.data() + 2);  // id 11
  EXPECT_EQ(g.rows[1], hard[1].rows.data());      // id 20
  EXPECT_EQ(g.rows[2], span_rows.data());         // a span over hard id 10
  EXPECT_EQ(g.rows[3], span_rows.data() + 2);     // id 12: no range holds it
  EXPECT_EQ(g.rows[4], span_rows.data() + 4);     // a span over id 21 (past its range)
  EXPECT_EQ(ple, (std::vector<std::int32_t>{5, 0, 0, 0, 0, 12, 21}));
  // No ranges: the spans only, the ids as they are.
  const detail::StepInputRows s = detail::GivenStepRows(step, nullptr, E, &ple);
  EXPECT_EQ(s.at, (std::vector<std::int64_t>{4, 5, 6}));
  EXPECT_EQ(ple, step.tokens);
  EXPECT_TRUE(detail::GivenStepRows(detail::Step{.tokens = {1, 2}}, &hard, E).at.empty());
}

TEST(ImageAttentionNames, RoundTripAndRejectUnknown) {
  for (ImageAttention m : {ImageAttention::kCausal, ImageAttention::kAllLayers, ImageAttention::kSlidingLayers}) {
    EXPECT_EQ(ImageAttentionFromName(ImageAttentionName(m)), m);
  }
  EXPECT_THROW(ImageAttentionFromName("bidirectional"), Error);
}

}  // namespace
}  // namespace kvshare
