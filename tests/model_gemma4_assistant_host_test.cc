// The host logic Gemma 4's assistant shares between the CPU and its GPU twin
// (src/model/gemma4_assistant_host.h): the centroid head's choice of tokens
// and mask, the RoPE capacity, the step's checks, the layer map's cache and
// the weights' accessor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gemma4_assistant_fixture.h"
#include "kvshare/common/error.h"
#include "kvshare/model/gemma4_assistant.h"
#include "kvshare/model/model.h"
#include "model/gemma4_assistant_host.h"
#include "model_test_util.h"

namespace kvshare {
namespace {

using testing::ErrorOf;

std::string Dir() { return testing::AssistantFixtureDir(); }

// 4 clusters of 3 tokens over a vocabulary of 12, top 2: the best clusters
// first (ties: the lower cluster), each cluster's ids in ordering's order.
TEST(AssistantHost, CentroidTokensTakeTheBestClustersInOrder) {
  AssistantConfig cfg;
  cfg.n_vocab = 12;
  cfg.num_centroids = 4;
  cfg.centroid_top_k = 2;
  const std::vector<std::int32_t> ordering = {11, 0, 5, 3, 7, 1, 2, 9, 4, 10, 6, 8};
  EXPECT_EQ(detail::CentroidTokens(cfg, std::vector<float>{0.5f, 2.0f, -1.0f, 1.0f}, ordering),
            (std::vector<std::int32_t>{3, 7, 1, 10, 6, 8}));
  // A tie between clusters 0 and 2 goes to cluster 0.
  EXPECT_EQ(detail::CentroidTokens(cfg, std::vector<float>{1.0f, -3.0f, 1.0f, 0.0f}, ordering),
            (std::vector<std::int32_t>{11, 0, 5, 2, 9, 4}));
}

TEST(AssistantHost, MaskUnchosenFillsTheSmallestChosenMinusOne) {
  std::vector<float> logits = {4.0f, -2.0f, 7.0f, 1.5f, 9.0f, 0.0f};
  detail::MaskUnchosen(std::vector<std::int32_t>{2, 3, 0}, logits);
  EXPECT_EQ(logits, (std::vector<float>{4.0f, 0.5f, 7.0f, 1.5f, 0.5f, 0.5f}));
}

TEST(AssistantHost, RopeCapacityDoublesFromAtLeast4096) {
  EXPECT_EQ(detail::AssistantRopeCapacity(0, 10), 4096);
  EXPECT_EQ(detail::AssistantRopeCapacity(0, 5000), 5000);
  EXPECT_EQ(detail::AssistantRopeCapacity(4096, 4097), 8192);
  EXPECT_EQ(detail::AssistantRopeCapacity(4096, 20000), 20000);
}

TEST(AssistantHost, StepChecksTheInputsAndSourcesAreCached) {
  const std::unique_ptr<Model> target = Model::Load(Dir() + "target.f32.gguf");
  const std::unique_ptr<AssistantModel> a = AssistantModel::Load(Dir() + "assistant_plain.f32.gguf");
  const AssistantConfig& cfg = a->config();
  const std::unique_ptr<ModelState> st = target->NewState({.max_context = 32, .max_step = 4});
  const std::vector<float> h(static_cast<std::size_t>(cfg.n_embd_backbone), 0.25f);
  EXPECT_EQ(ErrorOf([&] { detail::CheckAssistantStep(cfg, {.target = target.get(), .hidden = h}); }),
            "assistant step: no target model or state given");
  EXPECT_EQ(ErrorOf([&] {
              detail::CheckAssistantStep(cfg, {.target = target.get(), .target_state = st.get(), .hidden = h});
            }),
            "assistant step: row 0 has no cached token to draft from (length 0)");
  const std::vector<std::int32_t> prompt = {2, 10, 20, 30};
  target->Forward(*st, prompt, nullptr);
  EXPECT_EQ(detail::CheckAssistantStep(cfg, {.target = target.get(), .target_state = st.get(), .hidden = h}), 4);
  const std::vector<float> narrow(3, 0.0f);
  EXPECT_NE(ErrorOf([&] {
              detail::CheckAssistantStep(cfg, {.target = target.get(), .target_state = st.get(), .hidden = narrow});
            }).find("the hidden state has 3 values, expected "),
            std::string::npos);

  // The input row: the target's embedding of the token, then h.
  std::vector<float> in, embedding(static_cast<std::size_t>(cfg.n_embd_backbone));
  detail::AssistantInputRow(cfg, {.target = target.get(), .token = 30, .hidden = h}, in);
  target->EmbedTokens(std::vector<std::int32_t>{30}, embedding.data());
  ASSERT_EQ(in.size(), 2 * h.size());
  EXPECT_EQ(std::vector<float>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(h.size())), embedding);
  EXPECT_EQ(std::vector<float>(in.begin() + static_cast<std::ptrdiff_t>(h.size()), in.end()), h);

  detail::AssistantSourcesCache cache;
  const LayerPlan& plan = st->kv_cache().Plan();
  const std::vector<AssistantLayerSource>& first = cache.For(*a, *target, plan);
  EXPECT_EQ(&cache.For(*a, *target, plan), &first);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].cache_layer, 2);
  EXPECT_EQ(first[1].cache_layer, 3);
  EXPECT_EQ(cache.model, target.get());

  // The weights' accessor takes the loaded assistant only.
  EXPECT_EQ(detail::AssistantWeightsOf(*a).layers.size(), static_cast<std::size_t>(cfg.n_layer));
  EXPECT_EQ(detail::AssistantWeightsOf(*a).embd.rows, cfg.n_vocab);
}

}  // namespace
}  // namespace kvshare
