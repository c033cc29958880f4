// CUDA graphs of the GPU model's decode steps (docs/gpu.md "CUDA graphs of
// decode steps"; CudaModelOptions::cuda_graphs).
//  - Everywhere (host logic, cuda_model/step_graph.h): which steps are
//    captured (CaptureDecodeStep), their key, KVSHARE_CUDA_GRAPHS, the cache
//    of executable graphs (replace, least recently used eviction, every
//    handle destroyed once); CudaGraphStatsOf a CPU state is all zero.
//  - On a GPU (skipped without one): CudaGraphDevice.DecodeEqualsEager: the
//    same script of calls (prompts on three rows, then decode steps of 1 and
//    3 rows, rows leaving and joining so that the graph key changes, a new
//    row, a rewind, more steps) on a model with graphs and one without gives
//    bitwise equal logits, for Gemma 3, Gemma 4 (KV-shared + per-layer
//    embeddings, and MoE, which must stay eager) and Gemma 3n; with graphs
//    some steps ran as graphs and some execs were updated in place.
//    CudaGraphDevice.FailedCaptureRunsEagerly: captures failed through
//    FailCudaGraphCaptures rerun eagerly with the same logits.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_model/step_graph.h"
#include "cuda_model_compare.h"
#include "cuda_test_util.h"
#include "kvshare/cuda_model/model_cuda.h"
// GCC 12's false -Wstringop-overflow in the tests' GGUF writer (cuda_model_test.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma3n.h"
#include "model_tiny_gemma4.h"
#pragma GCC diagnostic pop

namespace kvshare::testing {
namespace {

using detail::CaptureDecodeStep;
using detail::DecodeGraphPolicy;
using detail::GraphCache;

detail::Step StepOf(std::vector<std::int64_t> ns) {
  detail::Step s;
  std::int64_t at = 0;
  int row = 0;
  for (const std::int64_t n : ns) {
    s.rows.push_back({.row = row++, .begin = at, .n = n, .keep = 1});
    at += n;
  }
  s.tokens.assign(static_cast<std::size_t>(at), 7);
  return s;
}

TEST(CudaGraphPolicy, OnlyDecodeStepsAreCaptured) {
  const DecodeGraphPolicy on;
  EXPECT_TRUE(CaptureDecodeStep(StepOf({1}), on));
  EXPECT_TRUE(CaptureDecodeStep(StepOf({1, 1, 1}), on));
  EXPECT_FALSE(CaptureDecodeStep(StepOf({1, 2}), on)) << "a prompt chunk in the step";
  EXPECT_FALSE(CaptureDecodeStep(StepOf({6}), on));
  EXPECT_FALSE(CaptureDecodeStep(StepOf({}), on)) << "no rows";
  detail::Step with_rows = StepOf({1});
  with_rows.embeddings.push_back({.at = 0, .count = 1, .rows = nullptr});
  EXPECT_FALSE(CaptureDecodeStep(with_rows, on)) << "an embedding row";
  EXPECT_FALSE(CaptureDecodeStep(StepOf({1}), {.enabled = false}));
  EXPECT_FALSE(CaptureDecodeStep(StepOf({1}), {.family_capturable = false})) << "MoE: a mid-step host round trip";
  EXPECT_FALSE(CaptureDecodeStep(StepOf({1}), {.probing = true}));
  EXPECT_EQ(detail::DecodeGraphKey(StepOf({1, 1, 1})), 3);
  EXPECT_EQ(detail::DecodeGraphKey(StepOf({1})), 1);
}

TEST(CudaGraphPolicy, EnvironmentSwitch) {
  const char* old = std::getenv("KVSHARE_CUDA_GRAPHS");
  const std::string saved = old != nullptr ? old : "";
  unsetenv("KVSHARE_CUDA_GRAPHS");
  EXPECT_TRUE(detail::CudaGraphsFromEnv());
  setenv("KVSHARE_CUDA_GRAPHS", "0", 1);
  EXPECT_FALSE(detail::CudaGraphsFromEnv());
  setenv("KVSHARE_CUDA_GRAPHS", "1", 1);
  EXPECT_TRUE(detail::CudaGraphsFromEnv());
  setenv("KVSHARE_CUDA_GRAPHS", "00", 1);
  EXPECT_TRUE(detail::CudaGraphsFromEnv()) << "only \"0\" turns graphs off";
  if (old != nullptr) {
    setenv("KVSHARE_CUDA_GRAPHS", saved.c_str(), 1);
  } else {
    unsetenv("KVSHARE_CUDA_GRAPHS");
  }
}

TEST(CudaGraphPolicy, CacheReplacesEvictsAndDestroysEachHandleOnce) {
  std::vector<long> destroyed;
  auto h = [](long v) { return reinterpret_cast<void*>(v); };
  {
    GraphCache cache([&](void* p) { destroyed.push_back(reinterpret_cast<long>(p)); }, 2);
    EXPECT_EQ(cache.Find(1), nullptr);
    cache.Put(1, h(11));
    cache.Put(3, h(33));
    EXPECT_EQ(cache.Find(1), h(11));  // key 1 now the most recently used
    cache.Put(1, h(11));              // the same handle: not destroyed
    EXPECT_TRUE(destroyed.empty());
    cache.Put(1, h(12));  // replaced
    EXPECT_EQ(destroyed, std::vector<long>({11}));
    cache.Put(8, h(88));  // over capacity: key 3 was used least recently
    EXPECT_EQ(destroyed, std::vector<long>({11, 33}));
    EXPECT_EQ(cache.Find(3), nullptr);
    EXPECT_EQ(cache.Find(8), h(88));
    EXPECT_EQ(cache.size(), 2u);
    cache.Drop(8);
    cache.Drop(8);  // nothing left under it
    EXPECT_EQ(destroyed, std::vector<long>({11, 33, 88}));
  }
  EXPECT_EQ(destroyed, std::vector<long>({11, 33, 88, 12})) << "the rest destroyed with the cache";
}

TEST(CudaGraphPolicy, CpuStatesHaveNoGraphStats) {
  TinyGemmaSpec spec;
  const TempGguf file(spec, "graph_stats");
  const std::unique_ptr<Model> cpu = Model::Load(file.path);
  auto st = cpu->NewState({.max_context = 16});
  const std::vector<std::int32_t> t = Tokens(3, spec.n_vocab, 1);
  cpu->Forward(*st, t, nullptr, {});
  FailCudaGraphCaptures(*st, 3);  // a no-op here
  const CudaGraphStats s = CudaGraphStatsOf(*st);
  EXPECT_EQ(s.graph_steps + s.captured + s.updated + s.instantiated + s.capture_failures + s.eager_steps, 0);
}

// One call of the script: entries (row, tokens), a rewind before it
// (rewind_row >= 0), captures to fail before it.
struct Call {
  std::vector<std::pair<int, int>> rows;  // (row, token count)
  int rewind_row = -1;
  std::int64_t rewind_to = 0;
  int fail = 0;
};

// Prompts on rows 0..2, decode steps of 1 and 3 rows, row 1 leaving and
// coming back, row 3 joining, a rewind of row 2 by three tokens, more steps:
// row 0 reaches 19 positions, within DeviceTestOptions' 32. fail_at: the
// call (3 rows, after the first step of 3 rows) whose capture and the next
// fail.
std::vector<Call> Script(int fail_at = -1) {
  std::vector<Call> s;
  s.push_back({.rows = {{0, 5}, {1, 3}, {2, 4}}});
  for (int i = 0; i < 3; ++i) s.push_back({.rows = {{0, 1}}});
  for (int i = 0; i < 3; ++i) s.push_back({.rows = {{0, 1}, {1, 1}, {2, 1}}});
  for (int i = 0; i < 2; ++i) s.push_back({.rows = {{2, 1}, {0, 1}}});  // row 1 leaves, the order changes
  s.push_back({.rows = {{3, 1}, {1, 1}, {0, 1}}});                      // row 3 joins (its first token)
  s.push_back({.rows = {{0, 1}, {1, 1}, {2, 1}}, .rewind_row = 2, .rewind_to = 6});
  for (int i = 0; i < 3; ++i) s.push_back({.rows = {{0, 1}, {1, 1}, {2, 1}}});
  s.push_back({.rows = {{0, 1}}});
  if (fail_at >= 0) s[static_cast<std::size_t>(fail_at)].fail = 2;  // this step and the next
  return s;
}

// Each call's logits.
std::vector<std::vector<float>> RunScript(const Model& m, const ModelStateOptions& o, const std::vector<Call>& script,
                                          int vocab, CudaGraphStats* stats) {
  auto st = m.NewState(o);
  std::vector<std::vector<float>> out;
  unsigned seed = 100;
  for (const Call& c : script) {
    if (c.rewind_row >= 0) st->Rewind(c.rewind_row, c.rewind_to);
    if (c.fail > 0) FailCudaGraphCaptures(*st, c.fail);
    std::vector<std::vector<std::int32_t>> toks;
    for (const auto& [row, n] : c.rows) toks.push_back(Tokens(n, vocab, seed++));
    std::vector<BatchEntry> entries;
    for (std::size_t i = 0; i < c.rows.size(); ++i) entries.push_back({.row = c.rows[i].first, .tokens = toks[i]});
    const std::span<const float> l = m.ForwardBatch(*st, entries, nullptr);
    out.emplace_back(l.begin(), l.end());
  }
  *stats = CudaGraphStatsOf(*st);
  return out;
}

std::string StatsText(const CudaGraphStats& s) {
  std::ostringstream o;
  o << "graph_steps " << s.graph_steps << ", captured " << s.captured << ", updated " << s.updated << ", instantiated "
    << s.instantiated << ", capture_failures " << s.capture_failures << ", eager_steps " << s.eager_steps;
  return o.str();
}

// Bitwise equality of every call's logits, naming the first differing call,
// row and element.
void ExpectBitwise(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want, int vocab,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t c = 0; c < got.size(); ++c) {
    ASSERT_EQ(got[c].size(), want[c].size()) << what << ": call " << c;
    for (std::size_t i = 0; i < got[c].size(); ++i) {
      if (std::memcmp(&got[c][i], &want[c][i], sizeof(float)) != 0) {
        const RowsDiff d = CompareRows(got[c], want[c], vocab, 0.0);
        FAIL() << what << ": call " << c << " (script order) logits row " << i / static_cast<std::size_t>(vocab)
               << " element " << i % static_cast<std::size_t>(vocab) << ": graphs " << got[c][i] << ", eager "
               << want[c][i] << "; " << Describe(d);
      }
    }
  }
}

struct GraphFixture {
  std::string name;
  TempGguf file;
  int vocab;
};

GraphFixture MakeFixture(const std::string& name) {
  if (name == "gemma3") {
    TinyGemmaSpec s;
    s.shared_kv_layers = 2;
    return {name, TempGguf(s, "graph_gemma3"), s.n_vocab};
  }
  if (name == "gemma3n") {
    TinyGemma3nSpec s;
    s.edit = ScaleQkNorms;
    return {name, TempGemma3n(s, "graph_gemma3n"), s.n_vocab};
  }
  TinyGemma4Spec s;  // ple_shared: per-layer embeddings and KV-shared layers
  s.edit = ScaleQkNorms;
  if (name == "gemma4_moe") {
    s.experts = 4;
    s.experts_used = 2;
    s.shared = 0;
    s.ple = 0;
  }
  return {name, TempGemma4(s, "graph_" + name), s.n_vocab};
}

class CudaGraphDevice : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
    if (!detail::CudaGraphsFromEnv()) GTEST_SKIP() << "KVSHARE_CUDA_GRAPHS=0 in the environment";
  }
  // bf16 weights and cache: the tensor-core attention kernels.
  ModelStateOptions Options() const { return DeviceTestOptions(DType::kBFloat16, 4); }
};

TEST_P(CudaGraphDevice, DecodeEqualsEager) {
  const GraphFixture f = MakeFixture(GetParam());
  const auto graphs = MoveModelToCuda(Model::Load(f.file.path), {.cuda_graphs = true});
  const auto eager = MoveModelToCuda(Model::Load(f.file.path), {.cuda_graphs = false});
  CudaGraphStats gs, es;
  const auto want = RunScript(*eager, Options(), Script(), f.vocab, &es);
  const auto got = RunScript(*graphs, Options(), Script(), f.vocab, &gs);
  ExpectBitwise(got, want, f.vocab, f.name);
  EXPECT_EQ(es.graph_steps, 0) << StatsText(es);
  const std::int64_t decode_steps = static_cast<std::int64_t>(Script().size()) - 1;
  if (f.name == "gemma4_moe") {
    EXPECT_EQ(gs.graph_steps, 0) << "MoE routing reads the router on the host: eager; " << StatsText(gs);
    return;
  }
  // The first step of each row count (1, 3, 2) runs eagerly: it grows the buffers.
  EXPECT_EQ(gs.capture_failures, 0) << StatsText(gs);
  EXPECT_EQ(gs.graph_steps, decode_steps - 3) << StatsText(gs);
  EXPECT_EQ(gs.eager_steps, 1 + 3) << StatsText(gs);
  EXPECT_GT(gs.updated, 0) << "no executable graph was reused; " << StatsText(gs);
  EXPECT_GE(gs.instantiated, 2) << "keys 1, 2 and 3 rows; " << StatsText(gs);
  std::printf("[ measured ] cuda graphs %s: %s\n", f.name.c_str(), StatsText(gs).c_str());
}

TEST_P(CudaGraphDevice, FailedCaptureRunsEagerly) {
  if (GetParam() == "gemma4_moe") GTEST_SKIP() << "no captures to fail";
  const GraphFixture f = MakeFixture(GetParam());
  const auto graphs = MoveModelToCuda(Model::Load(f.file.path), {.cuda_graphs = true});
  const auto eager = MoveModelToCuda(Model::Load(f.file.path), {.cuda_graphs = false});
  CudaGraphStats gs, es;
  const auto want = RunScript(*eager, Options(), Script(), f.vocab, &es);
  const auto got = RunScript(*graphs, Options(), Script(/*fail_at=*/5), f.vocab, &gs);
  ExpectBitwise(got, want, f.vocab, f.name + " with two failed captures");
  EXPECT_EQ(gs.capture_failures, 2) << StatsText(gs);
  EXPECT_GT(gs.graph_steps, 0) << StatsText(gs);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGraphDevice, ::testing::Values("gemma3", "gemma4", "gemma4_moe", "gemma3n"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kvshare::testing
