// Gemma 4's assistant drafter with the target on the GPU
// (src/cuda_model/gemma4_assistant_cuda.h) on the trained tiny pair of
// tests/fixtures/gemma4_assistant: the GPU twin's draft logits, h' and tokens
// against the CPU assistant's over rounds with accepts and rejects (the
// targets rewound) on two rows of one state, and speculative greedy
// generation on the GPU against plain greedy there. The device cases skip
// without a GPU; the first case runs everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common_record_measured.h"
#include "cuda_model_compare.h"
#include "cuda_test_util.h"
#include "gemma4_assistant_fixture.h"
#include "kvshare/cuda_model/model_cuda.h"
#include "kvshare/model/gemma4_assistant.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/speculative.h"
#include "kvshare/tokenizer/tokenizer.h"

#if KVSHARE_HAVE_CUDA
#include "cuda_model/gemma4_assistant_cuda.h"
#endif

namespace kvshare {
namespace {

using testing::ClearMargin;
using testing::CompareRows;
using testing::Describe;
using testing::kFp32ModelTolerance;
using testing::ModelTolerance;

std::string Dir() { return testing::AssistantFixtureDir(); }

constexpr const char* kAssistants[] = {"assistant_plain", "assistant_ordered"};

// The centroid head computes its chosen clusters' logits only and fills the
// rest with (the smallest chosen) - 1, the row's minimum. Which clusters are
// chosen is a top-k of the centroid logits, so a near tie there may choose
// others on another device. The entries computed in both rows, and whether
// the two chose the same tokens.
struct ChosenLogits {
  std::vector<float> got, want;
  bool same_choice = true;
};
ChosenLogits CommonChosen(std::span<const float> got, std::span<const float> want) {
  const float gmin = *std::min_element(got.begin(), got.end()), wmin = *std::min_element(want.begin(), want.end());
  ChosenLogits c;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool g = got[i] != gmin, w = want[i] != wmin;
    c.same_choice = c.same_choice && g == w;
    if (g && w) {
      c.got.push_back(got[i]);
      c.want.push_back(want[i]);
    }
  }
  return c;
}

std::int32_t Argmax(std::span<const float> l) {
  return static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

TEST(CudaAssistant, WithoutAGpuTheTwinIsAnActionableError) {
  std::string why;
  if (testing::GpuUsable(&why)) GTEST_SKIP() << "a GPU is usable here; this checks the error without one";
#if KVSHARE_HAVE_CUDA
  const std::unique_ptr<AssistantModel> a = AssistantModel::Load(Dir() + "assistant_plain.f32.gguf");
  const std::string msg = testing::ErrorOf([&] { detail::MakeCudaAssistant(*a, {}); });
  EXPECT_NE(msg.find("the Gemma 4 assistant: device cuda requested, but no CUDA device is usable"), std::string::npos)
      << msg;
#else
  GTEST_SKIP() << why;
#endif
}

class CudaAssistantDevice : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    if (!testing::GpuUsable(&why)) GTEST_SKIP() << why;
    cpu_ = Model::Load(Dir() + "target.f32.gguf");
    gpu_ = MoveModelToCuda(Model::Load(Dir() + "target.f32.gguf"), {.weights = GetParam()});
    tok_ = std::make_unique<Tokenizer>(ReadVocab(cpu_->gguf()));
  }
  double tol() const { return ModelTolerance(GetParam()); }
  // The assistant's draft logits and h' against the CPU's: the target's K/V
  // and hidden rows and the assistant's own projections are rounded. The
  // weights' bf16 rounding alone, emulated on the CPU (both fixtures' 2-D
  // weights rounded to bf16, bf16 caches), moves the logits by 0.0134 and h'
  // by 0.0098 of their largest value on these rounds, and by up to 0.032 and
  // 0.024 on other prompts; the projection inputs' rounding adds about as
  // much again, so bf16 gets 8e-2 (a wrong layer, window or position moves
  // them by O(1)).
  double assistant_tol() const { return GetParam() == DType::kFloat32 ? kFp32ModelTolerance : 8e-2; }
  std::unique_ptr<Model> cpu_, gpu_;
  std::unique_ptr<Tokenizer> tok_;
};

// Per row: the tokens the targets hold, the pending token and the hidden
// state it was chosen after (the CPU's: both assistants get the same inputs,
// so each step's difference is the assistant's and the caches', not an
// accumulated one).
struct RowRun {
  std::int32_t pending = 0;
  std::vector<float> hidden;
};

// Rounds of k = 4 drafts on rows 0 and 1 of one state per target (prompts
// longer and shorter than the window of 16): the assistant `a` on `cpu`'s
// state and `twin` on `dev`'s, each step against the other within tol; both
// targets verify the CPU's drafts and are rewound to the accepted ones.
// Every third round's second draft is replaced by a wrong one, so rounds end
// in accepts and in rejects. `what` names the run in the recorded line.
void DraftRounds(const Model& cpu, const Model& dev, const AssistantModel& a, const AssistantModel& twin,
                 const Tokenizer& tok, DType kv, double tol, const std::string& what) {
  const std::int64_t V = cpu.config().n_vocab, Eb = cpu.config().n_embd;
  const ModelStateOptions so{.max_context = 96, .max_step = 5, .kv_dtype = kv, .max_batch = 2};
  const std::vector<std::int32_t> prompts[2] = {tok.Encode("Four score and seven years ago our fathers brought forth"),
                                                tok.Encode("The quick brown fox")};
  ASSERT_GT(prompts[0].size(), 16u) << "row 0's prompt must outgrow the window";
  {
    const std::unique_ptr<AssistantScratch> cs = a.NewScratch(), gs = twin.NewScratch();
    const std::unique_ptr<ModelState> cst = cpu.NewState(so), gst = dev.NewState(so);
    const std::vector<BatchEntry> prefill = {{.row = 0, .tokens = prompts[0]}, {.row = 1, .tokens = prompts[1]}};
    const std::span<const float> cl = cpu.ForwardBatch(*cst, prefill, nullptr);
    const std::vector<float> cpu_logits(cl.begin(), cl.end());
    dev.ForwardBatch(*gst, prefill, nullptr);
    RowRun rows[2];
    for (int r = 0; r < 2; ++r) {
      rows[r].pending = Argmax(std::span<const float>(cpu_logits).subspan(static_cast<std::size_t>(r * V), V));
      const std::span<const float> h = cst->hidden().subspan(static_cast<std::size_t>(r * Eb), Eb);
      rows[r].hidden.assign(h.begin(), h.end());
    }
    int accepts = 0, rejects = 0, steps = 0, argmax_equal = 0, choice_differs = 0;
    double worst_logits = 0, worst_hidden = 0;
    for (int round = 0; round < 6; ++round) {
      for (int r = 0; r < 2; ++r) {
        SCOPED_TRACE("round " + std::to_string(round) + " row " + std::to_string(r));
        std::vector<std::int32_t> drafts;
        std::vector<float> h = rows[r].hidden;
        std::int32_t token = rows[r].pending;
        for (int i = 0; i < 4; ++i) {
          const AssistantStepArgs args{
              .target = &cpu, .target_state = cst.get(), .row = r, .token = token, .hidden = h};
          const AssistantStepOut want = a.Step(*cs, args);
          // want's spans stay valid: the two steps use different scratch.
          AssistantStepArgs gargs = args;
          gargs.target = &dev;
          gargs.target_state = gst.get();
          const AssistantStepOut got = twin.Step(*gs, gargs);
          // The centroid head: the tokens both chose (the choice may differ on a near tie).
          const bool ordered = a.config().ordered_embeddings;
          const ChosenLogits chosen = ordered ? CommonChosen(got.logits, want.logits) : ChosenLogits{};
          choice_differs += !chosen.same_choice;
          const testing::RowsDiff dl =
              ordered ? CompareRows(chosen.got, chosen.want, static_cast<std::int64_t>(chosen.want.size()), tol)
                      : CompareRows(got.logits, want.logits, V, tol);
          const testing::RowsDiff dh = CompareRows(got.hidden, want.hidden, Eb, tol);
          EXPECT_LE(dl.worst, tol) << "draft " << i << " logits: " << Describe(dl);
          EXPECT_LE(dh.worst, tol) << "draft " << i << " h': " << Describe(dh);
          worst_logits = std::max(worst_logits, dl.worst);
          worst_hidden = std::max(worst_hidden, dh.worst);
          ++steps;
          argmax_equal += got.argmax == want.argmax;
          if (got.argmax != want.argmax && chosen.same_choice) {
            EXPECT_FALSE(ClearMargin(want.logits, tol))
                << "draft " << i << ": " << got.argmax << " instead of " << want.argmax << " on a clear margin";
          }
          drafts.push_back(token = want.argmax);
          h.assign(want.hidden.begin(), want.hidden.end());
        }
        if (round % 3 == 2) drafts[1] = static_cast<std::int32_t>((drafts[1] + 1) % V);
        // Verify [pending, drafts] on both targets; keep the greedy prefix.
        std::vector<std::int32_t> verify = {rows[r].pending};
        verify.insert(verify.end(), drafts.begin(), drafts.end());
        const std::int64_t before = cst->length(r);
        const BatchEntry e{.row = r, .tokens = verify, .num_logits = static_cast<std::int64_t>(verify.size())};
        const std::span<const float> vl = cpu.ForwardBatch(*cst, std::span<const BatchEntry>(&e, 1), nullptr);
        const std::vector<float> vrows(vl.begin(), vl.end());
        const std::vector<float> vhidden(cst->hidden().begin(), cst->hidden().end());
        dev.ForwardBatch(*gst, std::span<const BatchEntry>(&e, 1), nullptr);
        const testing::RowsDiff dv = CompareRows(gst->hidden(), vhidden, Eb, tol);
        EXPECT_LE(dv.worst, tol) << "the targets' hidden rows of the verify step: " << Describe(dv);
        std::size_t kept = 0;
        while (kept < drafts.size() &&
               Argmax(std::span<const float>(vrows).subspan(kept * static_cast<std::size_t>(V), V)) == drafts[kept]) {
          ++kept;
        }
        accepts += static_cast<int>(kept);
        rejects += kept < drafts.size();
        cst->Rewind(r, before + 1 + static_cast<std::int64_t>(kept));
        gst->Rewind(r, before + 1 + static_cast<std::int64_t>(kept));
        rows[r].pending = Argmax(std::span<const float>(vrows).subspan(kept * static_cast<std::size_t>(V), V));
        const auto hk = std::span<const float>(vhidden).subspan(kept * static_cast<std::size_t>(Eb), Eb);
        rows[r].hidden.assign(hk.begin(), hk.end());
      }
    }
    EXPECT_GT(accepts, 0) << "no draft was accepted: the rounds never kept a draft";
    EXPECT_GT(rejects, 0) << "no round ended in a reject";
    // A wrong centroid path (weights, product) would choose other clusters
    // nearly every step; rounding, at near ties only.
    EXPECT_LE(choice_differs, steps / 4) << "steps whose centroid head chose other tokens";
    testing::RecordMeasured(
        "%s: %d draft steps, argmax equal in %d, centroid choice different in %d, largest relative error logits "
        "%.3g, h' %.3g; %d accepted, %d rounds with a reject\n",
        what.c_str(), steps, argmax_equal, choice_differs, worst_logits, worst_hidden, accepts, rejects);
  }
}

// The rounds' harness with the CPU on both sides (run everywhere): the
// rounds accept and reject, every step equal.
TEST(CudaAssistantHarness, CpuAgainstItself) {
  const std::unique_ptr<Model> cpu = Model::Load(Dir() + "target.f32.gguf");
  const Tokenizer tok(ReadVocab(cpu->gguf()));
  for (const char* name : kAssistants) {
    SCOPED_TRACE(name);
    const std::unique_ptr<AssistantModel> a = AssistantModel::Load(Dir() + name + ".f32.gguf");
    EXPECT_EQ(cpu->AssistantOnDevice(*a), nullptr) << "the CPU model runs the assistant itself";
    DraftRounds(*cpu, *cpu, *a, *a, tok, DType::kFloat32, 0.0, std::string("CudaAssistantHarness ") + name);
  }
}

TEST_P(CudaAssistantDevice, DraftsFollowTheCpuAssistant) {
  for (const char* name : kAssistants) {
    SCOPED_TRACE(name);
    const std::unique_ptr<AssistantModel> a = AssistantModel::Load(Dir() + name + ".f32.gguf");
    const std::unique_ptr<AssistantModel> twin = gpu_->AssistantOnDevice(*a);
    ASSERT_NE(twin, nullptr) << "the GPU model makes a twin";
    DraftRounds(*cpu_, *gpu_, *a, *twin, *tok_, GetParam() == DType::kFloat32 ? DType::kFloat32 : DType::kBFloat16,
                assistant_tol(),
                std::string("CudaAssistantDevice ") + name + " (" + DTypeName(GetParam()) + " weights)");
  }
}

// Greedy generation with the assistant drafting on the GPU against plain
// greedy on the GPU: the tokens equal while the plain run's margin is clear
// (a verify step's rows round otherwise than one-token steps': not bitwise,
// DeviceSupport::bitwise_verify), the rows within the tolerance.
TEST_P(CudaAssistantDevice, SpeculativeGreedyEqualsPlainGreedyOnTheGpu) {
  const ModelStateOptions so{.max_context = 96, .max_step = 8};
  const std::vector<std::int32_t> prompt = tok_->Encode("Four score and seven years ago");
  std::vector<std::int32_t> plain_tokens;
  std::vector<std::vector<float>> plain_rows;
  {
    Generator gen(*gpu_, *tok_, nullptr, so);
    GenerateOptions o{.max_new_tokens = 40, .ignore_eos = true};
    o.on_token = [&](std::int32_t t, std::span<const float> l) {
      plain_tokens.push_back(t);
      plain_rows.emplace_back(l.begin(), l.end());
    };
    gen.Generate(prompt, o, nullptr);
  }
  for (const char* name : kAssistants) {
    SCOPED_TRACE(name);
    const std::unique_ptr<AssistantModel> a = AssistantModel::Load(Dir() + name + ".f32.gguf");
    const std::unique_ptr<Drafter> drafter = MakeAssistantDrafter(*a, *gpu_, nullptr);
    Generator gen(*gpu_, *tok_, nullptr, so);
    GenerateOptions o{.max_new_tokens = 40, .ignore_eos = true, .drafter = drafter.get()};
    o.speculative = {.draft_max = 4, .adaptive = false};
    std::vector<std::int32_t> tokens;
    std::vector<std::vector<float>> rows;
    o.on_token = [&](std::int32_t t, std::span<const float> l) {
      tokens.push_back(t);
      rows.emplace_back(l.begin(), l.end());
    };
    const GenerateStats stats = gen.Generate(prompt, o, nullptr);
    ASSERT_EQ(tokens.size(), plain_tokens.size());
    double worst = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const testing::RowsDiff d = CompareRows(rows[i], plain_rows[i], static_cast<std::int64_t>(rows[i].size()), tol());
      worst = std::max(worst, d.worst);
      EXPECT_LE(d.worst, tol()) << "token " << i << ": " << Describe(d);
      if (tokens[i] != plain_tokens[i]) {
        EXPECT_FALSE(ClearMargin(plain_rows[i], tol()))
            << "token " << i << ": " << tokens[i] << " instead of " << plain_tokens[i] << " on a clear margin";
        break;  // the sequences part here
      }
    }
    EXPECT_GT(stats.speculative.accepted, 0) << "the trained assistant's drafts are taken";
    testing::RecordMeasured(
        "CudaAssistantDevice speculation %s (%s weights): accepted %lld of %lld drafts, largest relative error %.3g\n",
        name, DTypeName(GetParam()), static_cast<long long>(stats.speculative.accepted),
        static_cast<long long>(stats.speculative.drafted), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, CudaAssistantDevice, ::testing::Values(DType::kBFloat16, DType::kFloat32),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(DTypeName(i.param)); });

}  // namespace
}  // namespace kvshare
