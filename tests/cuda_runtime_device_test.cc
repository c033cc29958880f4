// The runtime over a model on the GPU (kvshare/runtime/device_support.h;
// docs/serving.md "On the GPU").
// - Host side, everywhere: a CPU model dressed as the GPU model's states
//   look to the runtime (ModelState::device() kCuda, CopyRow false, no
//   hidden states) is refused what the table refuses, with the device named,
//   and serves the rest: choices prefill instead of copying a row, prompt
//   lookup speculates.
// - Device, skipped without a GPU (tests/cuda_test_util.h's rule: skip only
//   when the error says there is none): the scheduler on the GPU model
//   against the CPU run, and speculative greedy decoding against plain greedy
//   on the same device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common_record_measured.h"
#include "cuda_model_compare.h"
#include "kvshare/common/error.h"
#include "kvshare/cuda_model/model_cuda.h"
#include "kvshare/runtime/device_support.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/runtime/speculative.h"
#include "model_device_like.h"
#include "model_test_util.h"
#include "runtime/scheduler/admission.h"
#include "runtime_scheduler_util.h"
#include "runtime_spec_util.h"

namespace kvshare {
namespace {

using testing::DeviceLikeModel;
using testing::MustSubmit;
using testing::Prompt;
using testing::Result;
using testing::RunAll;
using testing::StepRecorder;
using testing::TinySetup;

// A drafter that reads the target's hidden states, as Gemma 4's assistant.
class HiddenReadingDrafter final : public Drafter {
 public:
  std::string name() const override { return "gemma4-assistant"; }
  void Draft(const DraftContext&, int, std::vector<std::int32_t>&) override {}
  bool needs_target_hidden() const override { return true; }
};

TEST(DeviceSupport, TheTableAndItsWording) {
  const DeviceSupport cpu = SupportOn(Device::kCpu);
  EXPECT_TRUE(cpu.media_inputs && cpu.embeddings && cpu.assistant_drafter && cpu.bitwise_verify);
  const DeviceSupport gpu = SupportOn(Device::kCuda);
  EXPECT_EQ(gpu.device, Device::kCuda);
  EXPECT_TRUE(gpu.media_inputs);
  EXPECT_TRUE(gpu.embeddings) << "Model::Embed runs on the GPU model (src/cuda_model/embed_cuda.cc)";
  EXPECT_FALSE(gpu.bitwise_verify);
  EXPECT_TRUE(gpu.assistant_drafter) << "Gemma 4's assistant runs on the target's device";
  EXPECT_EQ(DeviceRefusal(Device::kCuda, "images", "drop them"),
            "images runs on the CPU only so far, and this model runs on device cuda; drop them");
}

TEST(DeviceSupport, SchedulerTakesMediaOnTheGpuAndRefusesItWhereTheTableSaysSo) {
  TinySetup t;
  const DeviceLikeModel gpu(*t.model);
  Scheduler s(gpu, t.tok, nullptr, {.slots = 2, .max_context = 64, .step_tokens = 8});
  EXPECT_EQ(s.support().device, Device::kCuda);
  const std::vector<float> rows(static_cast<std::size_t>(2 * t.model->config().n_embd), 0.5f);
  RequestOptions r{.prompt = Prompt(6, t.V, 1), .max_tokens = 2};
  r.embeddings = {{.begin = 1, .count = 2, .rows = rows.data()}};
  r.embedding_keys = {7};
  // Images and audio run on the GPU too (SupportOn's media_inputs); a
  // device without them refuses them naming it (ValidateRequest).
  EXPECT_EQ(s.Submit(r).status, SubmitStatus::kAccepted);
  Scheduler cpu(*t.model, t.tok, nullptr, {.slots = 2, .max_context = 64, .step_tokens = 8});
  EXPECT_EQ(cpu.Submit(r).status, SubmitStatus::kAccepted);
  DeviceSupport without = SupportOn(Device::kCuda);
  without.media_inputs = false;
  const std::string msg = testing::ErrorOf([&] { detail::ValidateRequest(r, t.V, 64, 64, without); });
  EXPECT_NE(msg.find("a prompt with images or audio (embedding spans) runs on the CPU only so far, and this model "
                     "runs on device cuda"),
            std::string::npos)
      << msg;
}

// A drafter that reads the target's hidden states and cache (Gemma 4's
// assistant) is taken with the target on the GPU: the scheduler and the
// generator run it (it runs on the target's device, Model::AssistantOnDevice).
TEST(DeviceSupport, DraftersReadingTheTargetRunOnTheGpu) {
  TinySetup t;
  const DeviceLikeModel gpu(*t.model);
  HiddenReadingDrafter assistant;
  EXPECT_EQ(testing::ErrorOf([&] {
              Scheduler(gpu, t.tok, nullptr, {.slots = 2, .max_context = 64, .step_tokens = 8, .drafter = &assistant});
            }),
            "(no error)");
  Generator gen(gpu, t.tok, nullptr, {.max_context = 64});
  const std::vector<std::int32_t> prompt = Prompt(5, t.V, 2);
  GenerateOptions go{.max_new_tokens = 3, .ignore_eos = true, .drafter = &assistant};
  EXPECT_EQ(testing::ErrorOf([&] { gen.Generate(prompt, go, nullptr); }), "(no error)");
  EXPECT_GE(gen.state().length(), 5) << "the prompt ran";
}

// n > 1 choices copy the first one's row on the CPU; where CopyRow is
// refused (the GPU model) each choice prefills its prompt instead and still
// gives what it gives alone.
TEST(DeviceSupport, ChoicesPrefillWhereRowsCannotBeCopied) {
  TinySetup t;
  const DeviceLikeModel gpu(*t.model);
  StepRecorder rec(t.V);
  Scheduler s(gpu, t.tok, nullptr, {.slots = 3, .max_context = 64, .step_tokens = 8, .on_step = rec.Hook()});
  RequestOptions a{.prompt = Prompt(12, t.V, 3), .max_tokens = 6, .top_logprobs = 2};
  a.sampler = {.temperature = 2.0f, .seed = 40};
  const auto [rs, hs] = testing::SubmitChoices(s, a, 3);
  const std::vector<Result> got = RunAll(s, hs);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    Scheduler alone(*t.model, t.tok, nullptr, {.slots = 1, .max_context = 64, .step_tokens = 8});
    testing::ExpectSame(got[i], RunAll(alone, {MustSubmit(alone, rs[i])})[0], "choice " + std::to_string(i));
    // Every prompt token was fed to the choice's own row (no copy).
    std::int64_t fed = 0;
    for (const auto& step : rec.steps) {
      for (const StepTrace::Entry& e : step) {
        if (e.request == hs[i]->id() && !e.decode) fed += e.tokens;
      }
    }
    EXPECT_EQ(fed, static_cast<std::int64_t>(a.prompt.size())) << "choice " << i;
  }
}

// Prompt lookup needs neither copied rows nor hidden states: on the
// device-like model it speculates, and (the CPU kernels underneath) greedy
// output is bitwise plain greedy's.
TEST(DeviceSupport, PromptLookupRunsOnADeviceState) {
  TinySetup t;
  const DeviceLikeModel gpu(*t.model);
  const std::unique_ptr<Drafter> ngram = MakeNgramDrafter({});
  Scheduler plain(gpu, t.tok, nullptr, {.slots = 2, .max_context = 64, .step_tokens = 8});
  Scheduler spec(gpu, t.tok, nullptr,
                 {.slots = 2,
                  .max_context = 64,
                  .step_tokens = 8,
                  .drafter = ngram.get(),
                  .speculative = {.draft_max = 3, .adaptive = false}});
  std::vector<std::int32_t> loop = Prompt(5, t.V, 9);
  for (int i = 0; i < 3; ++i) loop.insert(loop.end(), loop.begin() + 1, loop.begin() + 5);
  const RequestOptions r{.prompt = loop, .max_tokens = 12, .ignore_eos = true, .top_logprobs = 1};
  const Result want = RunAll(plain, {MustSubmit(plain, r)})[0];
  testing::ExpectSame(RunAll(spec, {MustSubmit(spec, r)})[0], want, "ngram on a device state");
  EXPECT_GT(spec.Stats().spec_drafted_tokens, 0u);
}

// ---- On a GPU (skipped without one) ----

// The GPU model of the tiny file, or null with the reason to skip: only a
// missing GPU or a build without CUDA skips; any other error fails.
std::unique_ptr<Model> OnGpu(const std::string& path, std::string* skip) {
  try {
    return MoveModelToCuda(Model::Load(path));
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("no CUDA device is usable") != std::string::npos ||
        what.find("built without CUDA") != std::string::npos) {
      *skip = what;
      return nullptr;
    }
    ADD_FAILURE() << "MoveModelToCuda: " << what;
    *skip = what;
    return nullptr;
  }
}

// bf16 weights and projection inputs: the bound tests/cuda_model_test.cc
// holds the GPU model's logits to (relative to the row's largest |logit|).
constexpr double kBf16Tolerance = 3e-2;

struct RowDiff {
  double rel = 0;        // max |a - b| / max |b|
  std::size_t at = 0;    // where the max is
  bool bitwise = false;  // memcmp-equal
};
RowDiff Compare(const std::vector<float>& got, const std::vector<float>& want) {
  RowDiff d;
  double scale = 1e-30, diff = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (e > diff) diff = e, d.at = i;
  }
  d.rel = diff / scale;
  d.bitwise = got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
  return d;
}

// Whether the argmax of `l` leads the runner-up by more than twice the
// tolerance (then both runs must pick it).
bool ClearMargin(const std::vector<float>& l) { return testing::ClearMargin(l, kBf16Tolerance); }

// Rows sampled by the same request on two models: equal within the bound
// while the sequences agree; the first disagreement must sit on a near tie.
void ExpectRowsFollow(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                      const std::vector<std::int32_t>& got_tokens, const std::vector<std::int32_t>& want_tokens,
                      const std::string& what, double* worst) {
  ASSERT_FALSE(want.empty()) << what;
  ASSERT_EQ(got.size(), want.size()) << what << ": sampled rows (a step that failed records none)";
  for (std::size_t i = 0; i < want.size(); ++i) {
    const RowDiff d = Compare(got[i], want[i]);
    *worst = std::max(*worst, d.rel);
    EXPECT_LT(d.rel, kBf16Tolerance) << what << ", sampled token " << i << ": largest error at vocabulary entry "
                                     << d.at << " (" << got[i][d.at] << " against " << want[i][d.at] << ")";
    if (i >= got_tokens.size() || i >= want_tokens.size() || got_tokens[i] == want_tokens[i]) continue;
    EXPECT_FALSE(ClearMargin(want[i])) << what << ", token " << i << ": " << got_tokens[i] << " instead of "
                                       << want_tokens[i] << " where the reference's margin is clear";
    return;  // the sequences part here
  }
}

std::vector<std::int32_t> Ids(const Result& r) {
  std::vector<std::int32_t> ids;
  for (const OutputToken& t : r.tokens) ids.push_back(t.token);
  return ids;
}

// Three requests in batched steps (decode rows and prompt chunks mixed) on
// the GPU model against the same on the CPU model, then one that resumes
// after the first one's first 12 prompt tokens (prompt caching: a Rewind of
// the device cache, or a full prefill where the rings no longer hold them,
// the same choice on both). Needs ForwardBatch with several entries on the
// GPU (issue 44 item 2).
TEST(DeviceSupportGpu, SchedulerRunEqualsTheCpuRunWithinBf16) {
  TinySetup t;
  std::string skip;
  const std::unique_ptr<Model> gpu = OnGpu(t.file.path, &skip);
  if (!gpu) GTEST_SKIP() << skip;
  std::vector<RequestOptions> rs = {{.prompt = Prompt(17, t.V, 1), .max_tokens = 10, .ignore_eos = true},
                                    {.prompt = Prompt(5, t.V, 2), .max_tokens = 12, .ignore_eos = true},
                                    {.prompt = Prompt(23, t.V, 3), .max_tokens = 8, .ignore_eos = true}};
  RequestOptions again = rs[0];
  again.prompt.resize(12);
  for (std::int32_t id : Prompt(5, t.V, 4)) again.prompt.push_back(id);
  rs.push_back(again);
  std::vector<std::vector<std::vector<float>>> rows[2];
  std::vector<Result> results[2];
  SchedulerStats stats[2];
  for (int run = 0; run < 2; ++run) {
    const Model& m = run == 0 ? *t.model : *gpu;
    StepRecorder rec(t.V);
    Scheduler s(m, t.tok, nullptr, {.slots = 3, .max_context = 64, .step_tokens = 12, .on_step = rec.Hook()});
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (std::size_t i = 0; i + 1 < rs.size(); ++i) hs.push_back(MustSubmit(s, rs[i]));
    results[run] = RunAll(s, hs);
    const auto later = MustSubmit(s, rs.back());
    results[run].push_back(RunAll(s, {later})[0]);
    hs.push_back(later);
    for (const auto& h : hs) rows[run].push_back(rec.logits[h->id()]);
    stats[run] = s.Stats();
  }
  EXPECT_EQ(stats[1].cached_prompt_tokens, stats[0].cached_prompt_tokens);
  EXPECT_EQ(stats[1].prompt_cache_fallbacks, stats[0].prompt_cache_fallbacks);
  double worst = 0;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    EXPECT_FALSE(results[1][i].last.error) << "request " << i << ": " << results[1][i].last.detail;
    ExpectRowsFollow(rows[1][i], rows[0][i], Ids(results[1][i]), Ids(results[0][i]), "request " + std::to_string(i),
                     &worst);
  }
  testing::RecordMeasured("DeviceSupportGpu scheduler: largest relative logits error against the CPU %.3g\n", worst);
}

// Greedy speculative decoding on the GPU (prompt lookup; a draft model on
// the CPU and on the GPU) against plain greedy on the GPU. A verify step's
// rows come from an M-row step, plain greedy's from one-row steps: bitwise
// only where the kernels round both alike, which cuBLAS does not promise,
// so rows are held to the bf16 bound and tokens to equality on clear
// margins; how many rows were bitwise equal is recorded.
TEST(DeviceSupportGpu, SpeculativeGreedyEqualsPlainGreedyOnTheGpu) {
  TinySetup t;
  std::string skip;
  const std::unique_ptr<Model> gpu = OnGpu(t.file.path, &skip);
  if (!gpu) GTEST_SKIP() << skip;
  const std::unique_ptr<Model> gpu_draft = OnGpu(t.file.path, &skip);
  ASSERT_NE(gpu_draft, nullptr) << skip;
  std::vector<std::int32_t> prompt = Prompt(6, t.V, 5);
  for (int i = 0; i < 3; ++i) prompt.insert(prompt.end(), prompt.begin() + 1, prompt.begin() + 6);
  const ModelStateOptions so{.max_context = 96, .max_step = 8};
  Generator plain_gen(*gpu, t.tok, nullptr, so);
  const GenerateOptions plain_opt{.max_new_tokens = 40, .ignore_eos = true};
  const testing::GenRun plain = testing::Generate(plain_gen, prompt, plain_opt);

  const std::unique_ptr<Drafter> ngram = MakeNgramDrafter({});
  const DraftModelOptions dso{.max_context = 96};
  const std::unique_ptr<Drafter> cpu_draft = MakeDraftModelDrafter(*t.model, *gpu, dso);
  const std::unique_ptr<Drafter> dev_draft = MakeDraftModelDrafter(*gpu_draft, *gpu, dso);
  const std::pair<const char*, Drafter*> drafters[] = {
      {"ngram", ngram.get()}, {"draft model on the CPU", cpu_draft.get()}, {"draft model on the GPU", dev_draft.get()}};
  for (const auto& [name, drafter] : drafters) {
    Generator gen(*gpu, t.tok, nullptr, so);
    GenerateOptions o = plain_opt;
    o.drafter = drafter;
    o.speculative = {.draft_max = 4, .adaptive = false};
    const testing::GenRun spec = testing::Generate(gen, prompt, o);
    EXPECT_GT(spec.stats.speculative.drafted, 0) << name;
    // The draft models are the target's own file: their drafts are taken.
    if (drafter != ngram.get()) {
      EXPECT_GT(spec.stats.speculative.accepted, 0) << name;
    }
    double worst = 0;
    ExpectRowsFollow(spec.logits, plain.logits, spec.tokens, plain.tokens, name, &worst);
    std::size_t bitwise = 0;
    for (std::size_t i = 0; i < spec.logits.size() && i < plain.logits.size(); ++i) {
      bitwise += Compare(spec.logits[i], plain.logits[i]).bitwise;
    }
    testing::RecordMeasured(
        "DeviceSupportGpu speculation (%s): %zu of %zu rows bitwise, largest relative error %.3g, "
        "accepted %lld of %lld drafts\n",
        name, bitwise, plain.logits.size(), worst, static_cast<long long>(spec.stats.speculative.accepted),
        static_cast<long long>(spec.stats.speculative.drafted));
  }
}

}  // namespace
}  // namespace kvshare
