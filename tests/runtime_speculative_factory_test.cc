// The drafter factory (kvshare/runtime/drafter_factory.h): which drafter a
// request gets (prompt lookup, a draft model or a Gemma 4 assistant, from a
// path or already loaded), what it owns, and the checks of the combination
// worded with the front end's names.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common_source_path.h"
#include "kvshare/common/error.h"
#include "kvshare/model/gemma4_assistant.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/drafter_factory.h"
#include "model_test_util.h"

namespace kvshare {
namespace {

std::string Fixtures() { return testing::SourcePath("tests/fixtures/"); }

// The message CheckSpeculation throws for `r` ("(no error)" when none).
std::string CheckError(const SpeculationRequest& r) {
  return testing::ErrorOf([&] { CheckSpeculation(r); });
}

void ExpectError(const SpeculationRequest& r, const std::string& part) {
  const std::string msg = CheckError(r);
  EXPECT_NE(msg.find(part), std::string::npos) << "expected \"" << part << "\" in \"" << msg << "\"";
}

const SpeculationNames kCliNames{.method = "--spec",
                                 .draft = "--draft-model",
                                 .ngram_min = "--ngram-min",
                                 .ngram_max = "--ngram-max",
                                 .device = "--device",
                                 .method_choices = "ngram"};

TEST(DrafterFactory, ChecksWordedWithTheFrontEndsNames) {
  // Off: nothing is checked.
  EXPECT_EQ(CheckError({.speculative = {.draft_max = 0}}), "(no error)");
  EXPECT_EQ(CheckError({.method = "ngram"}), "(no error)");
  ExpectError({.method = "medusa"}, "method must be \"\" (none) or \"ngram\" (prompt lookup), got \"medusa\"");
  ExpectError({.method = "ngram", .draft_path = "d.gguf", .names = kCliNames},
              "--spec ngram and --draft-model are exclusive: choose one drafter");
  ExpectError({.method = "ngram", .ngram = {.ngram_min = 3, .ngram_max = 2}, .names = kCliNames},
              "--ngram-max 2 is below --ngram-min 3");
  ExpectError({.method = "ngram", .speculative = {.draft_max = 65}}, "draft_max (--draft-max) must be in [1, 64]");
  ExpectError({.method = "ngram", .speculative = {.verify_cost = 0}}, "verify_cost must be");
}

TEST(DrafterFactory, ChoosesTheDrafter) {
  const std::string g4 = Fixtures() + "gemma4/";
  const std::unique_ptr<Model> target = Model::Load(g4 + "e2b.f32.gguf");

  ExpectError({.draft_path = "d.gguf", .draft_model = target.get()}, "give one draft model or assistant (draft_path)");

  const Speculation off = MakeSpeculation({.speculative = {.draft_max = 5}}, *target, {});
  EXPECT_EQ(off.drafter, nullptr);
  EXPECT_EQ(off.options.draft_max, 5);

  const Speculation ngram =
      MakeSpeculation({.method = "ngram", .speculative = {.draft_max = 3, .adaptive = false}}, *target, {});
  ASSERT_NE(ngram.drafter, nullptr);
  EXPECT_EQ(ngram.drafter->name(), "ngram");
  EXPECT_EQ(ngram.options.draft_max, 3);
  EXPECT_FALSE(ngram.options.adaptive);
  EXPECT_THROW(MakeSpeculation({.method = "ngram", .ngram = {.ngram_min = 0}}, *target, {}), Error);

  // A draft model from a path: loaded and owned; its warnings reported.
  std::vector<std::string> warnings;
  const Speculation from_path = MakeSpeculation(
      {.draft_path = g4 + "hfrule.f32.gguf", .on_warning = [&](std::string_view w) { warnings.emplace_back(w); }},
      *target, {.max_context = 64});
  ASSERT_NE(from_path.drafter, nullptr);
  EXPECT_EQ(from_path.drafter->name(), "draft-model");
  ASSERT_NE(from_path.draft_model, nullptr);
  EXPECT_EQ(warnings, from_path.draft_model->warnings());
  EXPECT_FALSE(warnings.empty()) << "hfrule.f32.gguf shares KV as llama.cpp would not";

  // An already loaded draft model: borrowed.
  const Speculation borrowed = MakeSpeculation({.draft_model = target.get()}, *target, {.max_context = 64});
  ASSERT_NE(borrowed.drafter, nullptr);
  EXPECT_EQ(borrowed.drafter->name(), "draft-model");
  EXPECT_EQ(borrowed.draft_model, nullptr);

  // A Gemma 4 assistant from a path, and one already loaded.
  const std::string g4a = Fixtures() + "gemma4_assistant/";
  const std::unique_ptr<Model> assisted = Model::Load(g4a + "target.f32.gguf");
  const Speculation assistant = MakeSpeculation({.draft_path = g4a + "assistant_plain.f32.gguf"}, *assisted, {});
  ASSERT_NE(assistant.drafter, nullptr);
  EXPECT_EQ(assistant.drafter->name(), "gemma4-assistant");
  EXPECT_NE(assistant.assistant, nullptr);
  EXPECT_EQ(assistant.draft_model, nullptr);
  const std::unique_ptr<AssistantModel> loaded = AssistantModel::Load(g4a + "assistant_plain.f32.gguf");
  const Speculation lent = MakeSpeculation({.assistant = loaded.get()}, *assisted, {});
  ASSERT_NE(lent.drafter, nullptr);
  EXPECT_EQ(lent.drafter->name(), "gemma4-assistant");
  EXPECT_EQ(lent.assistant, nullptr);

  // What does not fit the target passes the drafters' own errors through.
  EXPECT_THROW(MakeSpeculation({.draft_path = g4a + "assistant_plain.f32.gguf"}, *target, {}), Error);
}

// A target on the GPU (runtime/device_support.h): prompt lookup, draft
// models (from a path, moved by place_draft) and Gemma 4's assistant (it runs
// on the target's device: Model::AssistantOnDevice; a CPU target here, so the
// assistant itself) are all made.
TEST(DrafterFactory, OnTheGpuEveryDrafterIsMadeAndDraftModelsArePlaced) {
  EXPECT_EQ(CheckError({.method = "ngram", .device = Device::kCuda}), "(no error)");
  EXPECT_EQ(CheckError({.draft_path = "d.gguf", .device = Device::kCuda}), "(no error)");
  const std::string g4a = Fixtures() + "gemma4_assistant/";
  const std::unique_ptr<AssistantModel> loaded = AssistantModel::Load(g4a + "assistant_plain.f32.gguf");
  EXPECT_EQ(CheckError({.assistant = loaded.get(), .device = Device::kCuda, .names = kCliNames}), "(no error)");
  EXPECT_EQ(CheckError({.draft_path = g4a + "assistant_plain.f32.gguf", .device = Device::kCuda, .names = kCliNames}),
            "(no error)");

  const std::unique_ptr<Model> target = Model::Load(g4a + "target.f32.gguf");
  int moved = 0;
  const auto place = [&](std::unique_ptr<Model> m) {
    ++moved;
    return m;
  };
  const Speculation assisted = MakeSpeculation(
      {.draft_path = g4a + "assistant_plain.f32.gguf", .device = Device::kCuda, .place_draft = place}, *target, {});
  ASSERT_NE(assisted.drafter, nullptr);
  EXPECT_EQ(assisted.drafter->name(), "gemma4-assistant");
  EXPECT_NE(assisted.assistant, nullptr);
  EXPECT_EQ(moved, 0) << "place_draft moves draft models, not the assistant (it follows the target)";

  const Speculation ngram = MakeSpeculation({.method = "ngram", .device = Device::kCuda}, *target, {});
  ASSERT_NE(ngram.drafter, nullptr);
  const Speculation draft =
      MakeSpeculation({.draft_path = g4a + "target.f32.gguf", .device = Device::kCuda, .place_draft = place}, *target,
                      {.max_context = 64});
  ASSERT_NE(draft.drafter, nullptr);
  EXPECT_EQ(draft.drafter->name(), "draft-model");
  EXPECT_EQ(moved, 1) << "the draft model goes where place_draft puts it";

  // A placement on a device without a way there is an error, not a CPU model.
  EXPECT_NE(testing::ErrorOf([&] {
              ModelPlacement{.device = Device::kCuda}.Apply(Model::Load(g4a + "target.f32.gguf"));
            }).find("device cuda needs a move function"),
            std::string::npos);
}

}  // namespace
}  // namespace kvshare
