// Speculative decoding with Gemma 4's assistant drafter on the trained tiny
// pair of tests/fixtures/gemma4_assistant: greedy generation with the
// assistant gives the target's plain greedy tokens (HF's, target.hf.json, and
// those of HF's generate(assistant_model=...)),
// with the same drafted / accepted counts as the fixture script's loop in
// which the drafter sees exactly the accepted positions (speculative.hf.json
// clean_hf_hf_*: HF's first round and HF's sliding window); and on f16 / q8_0
// caches, the Q8_0 target and window rings with the least slack, every token
// and the logits it was chosen from are bitwise those without speculation.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common_record_measured.h"
#include "common_source_path.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/gemma4_assistant.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/runtime/speculative.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "runtime_spec_util.h"

namespace kvshare {
namespace {

using testing::ExpectBitwiseEqual;
using testing::Generate;
using testing::GenRun;

std::string Dir() { return testing::SourcePath("tests/fixtures/gemma4_assistant/"); }

class SpeculativeAssistant : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(Dir() + "speculative.hf.json");
    if (!in) GTEST_SKIP() << "no " << Dir() << "speculative.hf.json";
    spec_ = nlohmann::json::parse(in);
    target_ = Model::Load(Dir() + "target.f32.gguf");
    tok_ = std::make_unique<Tokenizer>(ReadVocab(target_->gguf()));
  }
  nlohmann::json spec_;
  std::unique_ptr<Model> target_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SpeculativeAssistant, RoundsEqualTheCleanHfLoop) {
  ThreadPool pool(2);
  for (const char* name : {"assistant_plain", "assistant_ordered"}) {
    const std::unique_ptr<AssistantModel> a = AssistantModel::Load(Dir() + name + ".f32.gguf");
    const std::unique_ptr<Drafter> drafter = MakeAssistantDrafter(*a, *target_, &pool);
    std::int64_t drafted = 0, accepted = 0;
    for (const nlohmann::json& p : spec_["prompts"]) {
      const std::string what = std::string(name) + " " + p["prompt"].get<std::string>();
      const std::vector<std::int32_t> ids = p["ids"].get<std::vector<std::int32_t>>();
      const nlohmann::json *clean = nullptr, *hf = nullptr;
      for (const nlohmann::json& r : p["runs"]) {
        if (r["name"] == std::string("clean_hf_hf_") + name) clean = &r;
        if (r["name"] == std::string("hf_generate_") + name) hf = &r;
      }
      ASSERT_NE(clean, nullptr) << what;
      ASSERT_NE(hf, nullptr) << what;
      Generator gen(*target_, *tok_, &pool, {.max_context = 128});
      GenerateOptions o;
      o.max_new_tokens = spec_["steps"].get<int>();
      o.ignore_eos = true;
      o.drafter = drafter.get();
      o.speculative = {.draft_max = spec_["k"].get<int>(), .adaptive = false};
      const GenRun got = Generate(gen, ids, o);
      EXPECT_EQ(got.tokens, p["greedy"].get<std::vector<std::int32_t>>()) << what;
      EXPECT_EQ(got.tokens, (*hf)["tokens"].get<std::vector<std::int32_t>>())
          << what << ": HF generate(assistant_model=...)";
      EXPECT_EQ(got.stats.speculative.drafted, (*clean)["drafted"].get<std::int64_t>()) << what;
      EXPECT_EQ(got.stats.speculative.accepted, (*clean)["accepted"].get<std::int64_t>()) << what;
      EXPECT_EQ(got.stats.speculative.rounds, static_cast<std::int64_t>((*clean)["rounds"].size())) << what;
      drafted += got.stats.speculative.drafted;
      accepted += got.stats.speculative.accepted;
    }
    testing::RecordMeasured("%s: accepted %lld / drafted %lld\n", name, static_cast<long long>(accepted),
                            static_cast<long long>(drafted));
  }
}

TEST_F(SpeculativeAssistant, BitwiseLosslessOnCacheTypesAndRings) {
  ThreadPool pool(2);
  const std::unique_ptr<AssistantModel> a = AssistantModel::Load(Dir() + "assistant_plain.f32.gguf");
  const std::unique_ptr<Model> q8 = Model::Load(Dir() + "target.q8_0.gguf");
  for (const Model* target : {target_.get(), q8.get()}) {
    const std::unique_ptr<Drafter> drafter = MakeAssistantDrafter(*a, *target, &pool);
    for (const DType dt : {DType::kFloat32, DType::kFloat16, DType::kQ8_0}) {
      // max_step 5: a verify step of 1 + 4 drafts is one chunk, and the rings
      // (window + 4 positions) keep both what a rewind needs and the window + 1
      // keys the assistant's sliding layer reads.
      const ModelStateOptions so{.max_context = 160, .max_step = 5, .kv_dtype = dt};
      for (const nlohmann::json& p : spec_["prompts"]) {
        const std::string what = target->gguf().name() + " " + DTypeName(dt) + " " + p["prompt"].get<std::string>();
        const std::vector<std::int32_t> ids = p["ids"].get<std::vector<std::int32_t>>();
        GenerateOptions o;
        o.max_new_tokens = 96;
        o.ignore_eos = true;
        Generator plain(*target, *tok_, &pool, so);
        const GenRun want = Generate(plain, ids, o);
        o.drafter = drafter.get();
        o.speculative = {.draft_max = 4, .adaptive = true};
        Generator spec(*target, *tok_, &pool, so);
        const GenRun got = Generate(spec, ids, o);
        ExpectBitwiseEqual(want, got, what);
        EXPECT_GT(got.stats.speculative.accepted, 0) << what;
      }
    }
  }
}

// The scheduler with the assistant: four prompts at once, each row drafting
// from its own hidden state over the shared multi-row cache, give each
// prompt's greedy tokens (HF's) with logprobs bitwise those of a scheduler
// without speculation, and the clean HF loop's acceptance.
TEST_F(SpeculativeAssistant, SchedulerRowsDraftFromTheirOwnState) {
  const std::unique_ptr<AssistantModel> a = AssistantModel::Load(Dir() + "assistant_plain.f32.gguf");
  const std::unique_ptr<Drafter> drafter = MakeAssistantDrafter(*a, *target_, nullptr);
  const auto run = [&](Drafter* d, SchedulerStats& stats) {
    Scheduler s(*target_, *tok_, nullptr,
                {.slots = 4,
                 .max_context = 128,
                 .step_tokens = 64,
                 .drafter = d,
                 .speculative = {.draft_max = spec_["k"].get<int>(), .adaptive = false}});
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const nlohmann::json& p : spec_["prompts"]) {
      RequestOptions r;
      r.prompt = p["ids"].get<std::vector<std::int32_t>>();
      r.max_tokens = spec_["steps"].get<int>();
      r.ignore_eos = true;
      r.top_logprobs = 2;
      handles.push_back(s.Submit(r).handle);
    }
    while (!s.Idle()) s.Step();
    std::vector<std::vector<OutputToken>> out;
    for (auto& h : handles) {
      std::vector<RequestEvent> events;
      h->Wait(events, std::chrono::milliseconds(0));
      out.emplace_back();
      for (RequestEvent& e : events) out.back().insert(out.back().end(), e.tokens.begin(), e.tokens.end());
    }
    stats = s.Stats();
    return out;
  };
  SchedulerStats plain_stats, spec_stats;
  const auto plain = run(nullptr, plain_stats);
  const auto spec = run(drafter.get(), spec_stats);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const std::vector<std::int32_t> greedy = spec_["prompts"][i]["greedy"].get<std::vector<std::int32_t>>();
    ASSERT_EQ(spec[i].size(), greedy.size()) << i;
    for (std::size_t t = 0; t < greedy.size(); ++t) {
      EXPECT_EQ(spec[i][t].token, greedy[t]) << i << " " << t;
      EXPECT_EQ(spec[i][t].logprob, plain[i][t].logprob) << i << " " << t;
      ASSERT_EQ(spec[i][t].top.size(), 2u);
      EXPECT_EQ(spec[i][t].top[1].logprob, plain[i][t].top[1].logprob) << i << " " << t;
    }
  }
  // Each row drafts k every round as one stream does: the totals of the
  // clean HF loop over the four prompts (each row's drafts come from its own
  // hidden state and cache row).
  EXPECT_EQ(spec_stats.spec_accepted_tokens,
            spec_["totals"]["clean_hf_hf_assistant_plain"]["accepted"].get<std::uint64_t>());
  EXPECT_EQ(spec_stats.spec_drafted_tokens,
            spec_["totals"]["clean_hf_hf_assistant_plain"]["drafted"].get<std::uint64_t>());
  EXPECT_LT(spec_stats.steps, plain_stats.steps);
}

}  // namespace
}  // namespace kvshare
