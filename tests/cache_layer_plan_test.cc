// Layer plan: the HF Gemma 3n / Gemma 4 sharing rule on the real layer
// patterns, and every error case.
#include <gtest/gtest.h>

#include <string>

#include "cache_specs.h"
#include "kvshare/common/error.h"

namespace kvshare::testing {
namespace {

// Expected source of every layer: itself below `first`, else `sliding_src` /
// `full_src` by type.
void ExpectSharing(const ModelKvSpec& spec, int first, int sliding_src, int full_src) {
  const LayerPlan plan = BuildLayerPlan(spec);
  ASSERT_EQ(plan.layers.size(), spec.layers.size());
  EXPECT_EQ(plan.first_shared, first);
  EXPECT_EQ(plan.num_slots, first);
  for (int i = 0; i < static_cast<int>(spec.layers.size()); ++i) {
    const LayerPlanEntry& e = plan.layers[static_cast<std::size_t>(i)];
    if (i < first) {
      EXPECT_TRUE(e.owns_cache) << "layer " << i;
      EXPECT_EQ(e.source_layer, i);
      EXPECT_EQ(e.cache_slot, i);
    } else {
      const bool sliding = spec.layers[static_cast<std::size_t>(i)].type == AttentionType::kSliding;
      EXPECT_FALSE(e.owns_cache) << "layer " << i;
      EXPECT_EQ(e.source_layer, sliding ? sliding_src : full_src) << "layer " << i;
      EXPECT_EQ(e.cache_slot, e.source_layer) << "layer " << i;
    }
  }
}

TEST(LayerPlan, Gemma3nE2bSharedLayersReadLayers18And19) { ExpectSharing(Gemma3nSpec(30, 10), 20, 18, 19); }

TEST(LayerPlan, Gemma3nE4bSharedLayersReadLayers18And19) { ExpectSharing(Gemma3nSpec(35, 15), 20, 18, 19); }

TEST(LayerPlan, Gemma4E2bSharedLayersReadLayers13And14) {
  const ModelKvSpec spec = Gemma4E2bSpec();
  ExpectSharing(spec, 15, 13, 14);
  // Full layers {4, 9, ..., 34}; the shared full ones {19, 24, 29, 34} read 14.
  const LayerPlan plan = BuildLayerPlan(spec);
  for (int i : {19, 24, 29, 34}) EXPECT_EQ(plan.layers[static_cast<std::size_t>(i)].source_layer, 14);
  EXPECT_EQ(plan.layers[15].source_layer, 13);  // not "layer 15 reuses slot 0"
}

TEST(LayerPlan, NoSharingWhenZeroSharedLayers) {
  // The `[:-0]` trap: n = 0 must give every layer its own cache, not none.
  ModelKvSpec spec = Gemma4E2bSpec();
  spec.num_kv_shared_layers = 0;
  const LayerPlan plan = BuildLayerPlan(spec);
  EXPECT_EQ(plan.num_slots, 35);
  EXPECT_EQ(plan.first_shared, 35);
  for (const auto& e : plan.layers) EXPECT_TRUE(e.owns_cache);
}

TEST(LayerPlan, SourceIsLastNonSharedLayerOfSameTypeNotAPatternGuess) {
  // Irregular pattern: S F S S | F S (last two shared). llama.cpp's n_kv-2 /
  // n_kv-1 guess would pick layers 2 and 3; the rule picks 3 (sliding) and 1 (full).
  const LayerSpec s{AttentionType::kSliding, 4, 1, 16, 1e4f};
  const LayerSpec f{AttentionType::kFull, 0, 1, 16, 1e6f};
  ModelKvSpec spec{{s, f, s, s, f, s}, 2};
  const LayerPlan plan = BuildLayerPlan(spec);
  EXPECT_EQ(plan.layers[4].source_layer, 1);
  EXPECT_EQ(plan.layers[5].source_layer, 3);
  EXPECT_EQ(plan.layers[4].cache_slot, 1);
  EXPECT_EQ(plan.layers[5].cache_slot, 3);
}

std::string ErrorOf(const ModelKvSpec& spec) {
  try {
    BuildLayerPlan(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LayerPlan, Errors) {
  const LayerSpec s{AttentionType::kSliding, 4, 2, 16, 1e4f};
  const LayerSpec f{AttentionType::kFull, 0, 2, 32, 1e6f};
  // No source of the type.
  std::string e = ErrorOf({{f, f, s}, 1});
  EXPECT_NE(e.find("layer 2 (sliding) is KV-shared"), std::string::npos) << e;
  EXPECT_NE(e.find("no non-shared sliding layer"), std::string::npos) << e;
  // n >= L, n < 0.
  e = ErrorOf({{s, f}, 2});
  EXPECT_NE(e.find("num_kv_shared_layers = 2 must be < the number of layers 2"), std::string::npos) << e;
  e = ErrorOf({{s, f}, -1});
  EXPECT_NE(e.find("num_kv_shared_layers must be >= 0"), std::string::npos) << e;
  // N_kv / H / window / RoPE base of a shared layer differ from its source's.
  LayerSpec s2 = s;
  s2.kv_heads = 1;
  e = ErrorOf({{s, f, s2}, 1});
  EXPECT_NE(e.find("layer 2 (sliding, KV-shared) reads layer 0 but its kv_heads 1 differs from layer 0's 2"),
            std::string::npos)
      << e;
  LayerSpec f2 = f;
  f2.head_size = 64;
  e = ErrorOf({{s, f, f2}, 1});
  EXPECT_NE(e.find("its head_size 64 differs from layer 1's 32"), std::string::npos) << e;
  s2 = s;
  s2.window = 8;
  e = ErrorOf({{s, f, s2}, 1});
  EXPECT_NE(e.find("window 8 differs"), std::string::npos) << e;
  s2 = s;
  s2.rope_base = 1e6f;
  e = ErrorOf({{s, f, s2}, 1});
  EXPECT_NE(e.find("rope_base"), std::string::npos) << e;
  // Bad layers.
  EXPECT_NE(ErrorOf({{}, 0}).find("no layers"), std::string::npos);
  LayerSpec bad = s;
  bad.window = 0;
  EXPECT_NE(ErrorOf({{bad}, 0}).find("sliding layer needs window > 0"), std::string::npos);
  bad = f;
  bad.kv_heads = 0;
  EXPECT_NE(ErrorOf({{bad}, 0}).find("kv_heads must be > 0"), std::string::npos);
}

}  // namespace
}  // namespace kvshare::testing
