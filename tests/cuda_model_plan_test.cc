// The GPU model's host-side logic, run on the CPU in every build (no GPU
// needed): the attention packing plan (PlanAttention, which the CPU's Attend
// and the GPU models share), the batched-step plan (BatchSteps: chunks,
// logits destinations, checks, rollback), the dispatch by architecture, and
// MoveModelToCuda's errors without a usable GPU (Gemma 3, 4, 3n and
// EmbeddingGemma files) or for an architecture without a GPU forward pass
// (an Error, never a crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common_source_path.h"
#include "cuda_model/cuda_dispatch.h"
#include "cuda_model_compare.h"
#include "cuda_test_util.h"
#include "kvshare/cuda_model/model_cuda.h"
#include "model/batch_steps.h"
#include "model/decoder.h"
#include "model/gemma4_moe.h"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma3n.h"
#include "model_tiny_gemma4.h"

namespace kvshare::testing {
namespace {

using detail::AttentionPacking;
using detail::PlanAttention;
using detail::QuerySpan;

TEST(CudaModelPlan, OneSpanOfRowZeroRunsInPlace) {
  const QuerySpan spans[] = {{.row = 0, .begin = 0, .n = 5}};
  const AttentionPacking p = PlanAttention(spans);
  EXPECT_TRUE(p.in_place);
  EXPECT_EQ(p.S, 5);
  EXPECT_EQ(p.flat_rows, 5);
  EXPECT_TRUE(p.packed_row.empty());
  EXPECT_TRUE(p.query_offsets.empty());
  // After the prefill cut a KV-shared layer skips the rows not read.
  const QuerySpan cut[] = {{.row = 0, .begin = 0, .n = 2, .skip = 7}};
  EXPECT_EQ(PlanAttention(cut).query_offsets, (std::vector<std::int64_t>{7}));
}

TEST(CudaModelPlan, RowsArePackedByCacheRow) {
  // A decode row (row 1), a 4-token chunk (row 0), a 2-token chunk of row 3;
  // row 2 is padding.
  const QuerySpan spans[] = {
      {.row = 1, .begin = 0, .n = 1}, {.row = 0, .begin = 1, .n = 4}, {.row = 3, .begin = 5, .n = 2}};
  const AttentionPacking p = PlanAttention(spans);
  EXPECT_FALSE(p.in_place);
  EXPECT_EQ(p.B, 4);
  EXPECT_EQ(p.S, 4);
  EXPECT_EQ(p.flat_rows, 7);
  EXPECT_EQ(p.packed_row, (std::vector<std::int64_t>{4, 0, 1, 2, 3, 12, 13}));
  EXPECT_TRUE(p.query_offsets.empty());
  // One span of a row other than 0 is packed too (B = row + 1).
  const QuerySpan one[] = {{.row = 2, .begin = 0, .n = 3}};
  const AttentionPacking q = PlanAttention(one);
  EXPECT_FALSE(q.in_place);
  EXPECT_EQ(q.B, 3);
  EXPECT_EQ(q.packed_row, (std::vector<std::int64_t>{6, 7, 8}));
}

TEST(CudaModelPlan, SkipsBecomeQueryOffsetsPerRow) {
  const QuerySpan spans[] = {{.row = 0, .begin = 0, .n = 1, .skip = 3}, {.row = 2, .begin = 1, .n = 2}};
  const AttentionPacking p = PlanAttention(spans);
  EXPECT_EQ(p.query_offsets, (std::vector<std::int64_t>{3, 0, 0}));
  EXPECT_EQ(p.packed_row, (std::vector<std::int64_t>{0, 4, 5}));
}

TEST(CudaModelPlan, RandomSpansPackEveryRowOnceInItsCacheRow) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int> rows(8);
    for (int i = 0; i < 8; ++i) rows[static_cast<std::size_t>(i)] = i;
    std::shuffle(rows.begin(), rows.end(), rng);
    const int count = 1 + static_cast<int>(rng() % 5);
    std::vector<QuerySpan> spans;
    std::int64_t at = 0;
    for (int i = 0; i < count; ++i) {
      const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 9);
      spans.push_back({.row = rows[static_cast<std::size_t>(i)], .begin = at, .n = n});
      at += n;
    }
    const AttentionPacking p = PlanAttention(spans);
    if (p.in_place) {
      ASSERT_EQ(spans.size(), 1u);
      continue;
    }
    ASSERT_EQ(p.flat_rows, at);
    std::set<std::int64_t> seen;
    for (const QuerySpan& sp : spans) {
      ASSERT_LE(sp.n, p.S);
      ASSERT_LT(sp.row, p.B);
      for (std::int64_t j = 0; j < sp.n; ++j) {
        const std::int64_t to = p.packed_row[static_cast<std::size_t>(sp.begin + j)];
        EXPECT_EQ(to, sp.row * p.S + j) << "trial " << trial;
        EXPECT_TRUE(seen.insert(to).second) << "packed row " << to << " twice, trial " << trial;
      }
    }
  }
}

// The GPU models pack the kept rows with a gather by the row map that
// PackKeptRows gives without buffers (CudaDecoder::PackKept); it must move
// the rows the CPU's in-place copy moves, and repoint the spans alike.
TEST(CudaModelPlan, KeptRowMapGathersWhatTheCpuPackingMoves) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    detail::Step step;
    const int count = 1 + static_cast<int>(rng() % 4);
    std::int64_t T = 0;
    for (int i = 0; i < count; ++i) {
      const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 6);
      const std::int64_t keep = static_cast<std::int64_t>(rng() % (n + 1));  // 0 .. n
      step.rows.push_back({.row = (i * 3 + trial) % 5, .begin = T, .n = n, .keep = keep});
      T += n;
    }
    step.tokens.assign(static_cast<std::size_t>(T), 0);
    const std::int64_t kept = detail::DecoderModel::KeptRows(step);
    constexpr int kWidth = 3;
    std::vector<float> buf(static_cast<std::size_t>(T * kWidth));
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i);
    const std::vector<float> before = buf;
    std::vector<QuerySpan> cpu_spans = detail::DecoderModel::FullSpans(step), gpu_spans = cpu_spans;
    std::vector<std::int64_t> cpu_src(static_cast<std::size_t>(T)), from(static_cast<std::size_t>(T));
    detail::DecoderModel::PackKeptRows(step, std::span(&buf, 1), kWidth, &cpu_spans, &cpu_src);
    detail::DecoderModel::PackKeptRows(step, {}, 1, &gpu_spans, &from);
    for (std::int64_t r = 0; r < kept; ++r) {
      const std::int64_t f = from[static_cast<std::size_t>(r)];
      ASSERT_GE(f, 0);
      ASSERT_LT(f, T);
      for (int c = 0; c < kWidth; ++c) {
        EXPECT_EQ(buf[static_cast<std::size_t>(r * kWidth + c)], before[static_cast<std::size_t>(f * kWidth + c)])
            << "trial " << trial << " kept row " << r;
      }
      EXPECT_EQ(f, cpu_src[static_cast<std::size_t>(r)]) << "trial " << trial;
    }
    for (std::size_t i = 0; i < cpu_spans.size(); ++i) {
      EXPECT_EQ(gpu_spans[i].row, cpu_spans[i].row);
      EXPECT_EQ(gpu_spans[i].begin, cpu_spans[i].begin);
      EXPECT_EQ(gpu_spans[i].n, cpu_spans[i].n);
      EXPECT_EQ(gpu_spans[i].skip, cpu_spans[i].skip);
      EXPECT_EQ(gpu_spans[i].n + gpu_spans[i].skip, step.rows[i].n) << "trial " << trial;
    }
  }
}

// The rows routed to expert e, ascending, by a plain scan of the routing:
// the reference of BatchExpertRows.
void ExpertRows(const detail::MoeScratch& s, int K, int e, std::int64_t S, std::vector<std::int64_t>& token,
                std::vector<float>& weight) {
  token.clear();
  weight.clear();
  for (std::int64_t t = 0; t < S; ++t) {
    for (int k = 0; k < K; ++k) {
      if (s.chosen[static_cast<std::size_t>(t * K + k)] == e) {
        token.push_back(t);
        weight.push_back(s.chosen_w[static_cast<std::size_t>(t * K + k)]);
      }
    }
  }
}

// The MoE's expert batches (BatchExpertRows: the CPU model's walk over the
// experts and the GPU model's upload): every expert's rows as the plain scan
// gives them, one after another, each row K times in all.
TEST(CudaModelPlan, ExpertBatchesFollowExpertRows) {
  detail::Gemma4Moe m;
  m.n_expert = 5;
  m.n_used = 2;
  const std::vector<float> scale = {1.0f, 0.5f, 2.0f, 1.5f, 0.25f};
  m.expert_scale = scale.data();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (const std::int64_t S : {1, 7, 40}) {
    std::vector<float> logits(static_cast<std::size_t>(S * m.n_expert));
    for (float& v : logits) v = u(rng);
    detail::MoeScratch s;
    detail::RouteGemma4Moe(m, logits.data(), S, s);
    detail::ExpertBatches b;
    detail::BatchExpertRows(m, S, s, b);
    ASSERT_EQ(b.begin.size(), 6u);
    EXPECT_EQ(b.begin.front(), 0);
    EXPECT_EQ(b.begin.back(), S * m.n_used);
    std::vector<int> uses(static_cast<std::size_t>(S), 0);
    for (int e = 0; e < m.n_expert; ++e) {
      std::vector<std::int64_t> token;
      std::vector<float> weight;
      ExpertRows(s, m.n_used, e, S, token, weight);
      const auto lo = static_cast<std::size_t>(b.begin[static_cast<std::size_t>(e)]);
      const auto hi = static_cast<std::size_t>(b.begin[static_cast<std::size_t>(e) + 1]);
      EXPECT_EQ(std::vector<std::int64_t>(b.token.begin() + lo, b.token.begin() + hi), token)
          << "S " << S << " e " << e;
      EXPECT_EQ(std::vector<float>(b.weight.begin() + lo, b.weight.begin() + hi), weight) << "S " << S << " e " << e;
      for (std::int64_t t : token) ++uses[static_cast<std::size_t>(t)];
    }
    for (int n : uses) EXPECT_EQ(n, m.n_used) << "S " << S;
  }
  detail::MoeScratch bad;
  bad.chosen = {0, 5};
  bad.chosen_w = {0.5f, 0.5f};
  detail::ExpertBatches b;
  EXPECT_NE(ErrorOf([&] { detail::BatchExpertRows(m, 1, bad, b); }).find("expert id 5 is outside [0, 5)"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { detail::BatchExpertRows(m, 2, bad, b); }).find("expected 2"), std::string::npos);
}

class CudaModelSteps : public ::testing::Test {
 protected:
  void SetUp() override { model_ = Model::Load(file_.path); }
  const TempGguf file_{TinyGemmaSpec{}, "cuda_steps"};
  std::unique_ptr<Model> model_;
};

TEST_F(CudaModelSteps, ChunksInLockStepWithTheirLogitsPlaces) {
  auto st = model_->NewState({.max_context = 32, .max_step = 4, .max_batch = 3});
  const std::vector<std::int32_t> a = Tokens(3, 50, 1), b = Tokens(9, 50, 2);
  const BatchEntry entries[] = {{.row = 1, .tokens = a, .num_logits = 1}, {.row = 0, .tokens = b, .num_logits = 9}};
  detail::BatchSteps steps(*st, model_->config(), entries, 4, false);
  EXPECT_EQ(steps.total_logits(), 10);
  std::vector<std::vector<std::int64_t>> spans(3);
  detail::Step step;
  ASSERT_TRUE(steps.Next(step, spans));
  ASSERT_EQ(step.rows.size(), 2u);
  EXPECT_EQ(step.rows[0].row, 1);
  EXPECT_EQ(step.rows[0].n, 3);
  EXPECT_EQ(step.rows[0].keep, 1);
  EXPECT_EQ(step.rows[1].begin, 3);
  EXPECT_EQ(step.rows[1].n, 4);
  EXPECT_EQ(step.rows[1].keep, 4);
  EXPECT_EQ(std::vector<std::int64_t>(steps.dest().begin(), steps.dest().end()), (std::vector<std::int64_t>{0, 1}));
  EXPECT_TRUE(steps.contiguous());
  EXPECT_EQ(step.tokens.size(), 7u);
  ASSERT_TRUE(steps.Next(step, spans));
  ASSERT_EQ(step.rows.size(), 1u);
  EXPECT_EQ(steps.dest()[0], 5);
  ASSERT_TRUE(steps.Next(step, spans));
  EXPECT_EQ(step.rows[0].n, 1);
  EXPECT_EQ(steps.dest()[0], 9);
  EXPECT_FALSE(steps.Next(step, spans));
}

TEST_F(CudaModelSteps, ChecksEveryEntryAndRestoresRows) {
  auto st = model_->NewState({.max_context = 16, .max_step = 4, .max_batch = 2, .exact_rewind = true});
  const std::vector<std::int32_t> t = Tokens(5, 50, 3);
  const BatchEntry twice[] = {{.row = 1, .tokens = t}, {.row = 1, .tokens = t}};
  EXPECT_NE(ErrorOf([&] { detail::BatchSteps(*st, model_->config(), twice, 4, false); }).find("appears twice"),
            std::string::npos);
  const BatchEntry out_of_range[] = {{.row = 2, .tokens = t}};
  EXPECT_NE(ErrorOf([&] { detail::BatchSteps(*st, model_->config(), out_of_range, 4, false); }).find("out of range"),
            std::string::npos);
  // Restore puts each row back at its length when the plan was made.
  model_->Forward(*st, t, nullptr);
  const BatchEntry more[] = {{.row = 0, .tokens = t}};
  const detail::BatchSteps steps(*st, model_->config(), more, 4, false);
  model_->ForwardBatch(*st, more, nullptr);
  EXPECT_EQ(st->length(0), 10);
  steps.Restore(*st);
  EXPECT_EQ(st->length(0), 5);
}

// The device tests' harness (cuda_model_compare.h) on their fixtures with the
// CPU model on both sides: it passes (the scenarios are valid calls), the
// layer probe reports every layer, and a planted difference is named.
TEST(CudaModelHarness, CpuAgainstItself) {
  TinyGemma4Spec g4;
  g4.edit = ScaleQkNorms;
  TinyGemma3nSpec g3n;
  g3n.edit = ScaleQkNorms;
  TinyGemmaSpec g3;
  g3.shared_kv_layers = 2;
  const TempGguf gemma4 = TempGemma4(g4, "cuda_harness");
  const TempGguf gemma3n = TempGemma3n(g3n, "cuda_harness");
  const TempGguf gemma3(g3, "cuda_harness");
  for (const TempGguf* file : {&gemma4, &gemma3n, &gemma3}) {
    const std::unique_ptr<Model> m = Model::Load(file->path);
    const int V = m->config().n_vocab;
    const std::string what = m->config().architecture + " cpu";
    const ModelStateOptions o{.max_context = 32, .max_step = 6, .max_batch = 4};
    ExpectFollowsCpu(*m, *m, o, Tokens(20, V, 3), {.tolerance = kFp32ModelTolerance, .what = what});
    const std::vector<std::vector<std::int32_t>> history = {Tokens(7, V, 1), Tokens(3, V, 2), {}, {}};
    const std::vector<std::int32_t> one = Tokens(1, V, 3), eight = Tokens(8, V, 4), five = Tokens(5, V, 5);
    ExpectBatchEqualsAlone(*m, o, history,
                           {{.row = 1, .tokens = one},
                            {.row = 0, .tokens = eight, .num_logits = 8},
                            {.row = 3, .tokens = five, .num_logits = 2}},
                           kFp32ModelTolerance, what);
    const std::vector<std::int32_t> prompt = Tokens(13, V, 6);
    EXPECT_EQ(LayerRows(*m, o, prompt).size(), static_cast<std::size_t>(m->config().n_layer)) << what;
    const std::string same = LayerDivergence(*m, *m, o, prompt, kFp32ModelTolerance);
    EXPECT_NE(same.find("no layer past tolerance"), std::string::npos) << what << ": " << same;
  }
  const std::vector<float> want = {1, 2, 3, 4}, got = {1, 2, 3.5f, 4};
  const RowsDiff d = CompareRows(got, want, 2, 1e-3);
  EXPECT_EQ(d.first, 2);
  EXPECT_EQ(d.bad_rows, 1);
  EXPECT_NE(Describe(d).find("row 1 col 0"), std::string::npos) << Describe(d);
}

TEST(CudaModelDispatch, ArchitecturesWithAGpuForwardPass) {
  EXPECT_EQ(detail::CudaFamilyOf("gemma3"), detail::CudaFamily::kGemma3);
  EXPECT_EQ(detail::CudaFamilyOf("gemma-embedding"), detail::CudaFamily::kGemma3) << "EmbeddingGemma: Gemma 3 layers";
  EXPECT_EQ(detail::CudaFamilyOf("gemma4"), detail::CudaFamily::kGemma4);
  EXPECT_EQ(detail::CudaFamilyOf("gemma3n"), detail::CudaFamily::kGemma3n);
  for (const char* arch : {"gemma4-assistant", "llama"})
    EXPECT_EQ(detail::CudaFamilyOf(arch), detail::CudaFamily::kNone) << arch;
  const std::string msg = detail::NoCudaFamilyMessage("llama");
  for (const char* part : {"'llama'", "gemma3, gemma3n, gemma4 and gemma-embedding", "use device cpu"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
}

TEST(CudaModelDispatch, WithoutUsableGpuIsAnActionableError) {
  std::string why;
  if (GpuUsable(&why)) GTEST_SKIP() << "a GPU is usable here; this checks the error without one";
  TinyGemmaSpec g3;
  g3.types = {GgmlType::kF32, GgmlType::kQ8_0, GgmlType::kF16};
  g3.shared_kv_layers = 2;
  const TempGguf gemma3(g3, "cuda_error");
  const TempGguf gemma4 = TempGemma4(TinyGemma4Spec{}, "cuda_error");
  const TempGguf gemma3n = TempGemma3n(TinyGemma3nSpec{}, "cuda_error");
  // EmbeddingGemma (tests/fixtures/embedding_gemma) goes to the Gemma 3
  // family too, so it fails on the device, not on its architecture.
  const std::string embedding = testing::SourcePath("tests/fixtures/embedding_gemma/tiny.f32.gguf");
  ASSERT_TRUE(std::filesystem::exists(embedding)) << embedding;
  for (const std::string& path : {gemma3.path, gemma4.path, gemma3n.path, embedding}) {
    const std::string msg = ErrorOf([&] { MoveModelToCuda(Model::Load(path)); });
#if KVSHARE_HAVE_CUDA
    EXPECT_NE(msg.find("no CUDA device is usable"), std::string::npos) << msg;
#else
    EXPECT_NE(msg.find("built without CUDA"), std::string::npos) << msg;
#endif
    EXPECT_NE(msg.find("use device cpu"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kvshare::testing
