// What Gemma 4's assistant drafter does on the host whichever device runs its
// layers (kvshare/model/gemma4_assistant.h; docs/speculative.md): its weights
// as the CPU assistant loaded them (for a copy on another device,
// src/cuda_model/gemma4_assistant_cuda.h), a step's checks and input row, the
// cached layer map, and the centroid-masked head's choice of tokens. Internal
// to the model layer and the GPU model above it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvshare/attention/gqa.h"
#include "kvshare/model/gemma4_assistant.h"
#include "model/decoder.h"
#include "quant/quant.h"

namespace kvshare::detail {

// One assistant layer's weights (no K/V projections: it reads the target's).
struct AssistantLayerWeights {
  WeightMatrix q, o, gate, up, down;
  const float* attn_norm = nullptr;
  const float* q_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* post_ffw_norm = nullptr;
  float out_scale = 1.0f;
};

// A loaded assistant's weights (views into its GGUF file), valid while it lives.
struct AssistantWeights {
  std::vector<RopeFamily> rope_families;  // [full, sliding]
  std::vector<int> layer_rope;            // [n_layer]: index into rope_families
  WeightMatrix embd;                      // [n_vocab, E], as stored (the tied head; the centroid head reads rows)
  WeightMatrix pre, post;                 // [E, 2 E_b], [E_b, E]
  const float* out_norm = nullptr;        // [E]
  WeightMatrix centroids;                 // [num_centroids, E] (ordered embeddings only)
  std::vector<std::int32_t> ordering;     // [n_vocab]: the vocabulary by cluster (ordered embeddings only)
  std::vector<AssistantLayerWeights> layers;
};

// The weights of an assistant AssistantModel::Load made (on the CPU). Throws
// kvshare::Error for another AssistantModel (a device twin).
const AssistantWeights& AssistantWeightsOf(const AssistantModel& assistant);

// A step's checks (target and state given, a cached token, the hidden
// state's width; AssistantModel::Step's errors) and its position p, the
// row's cache length.
std::int64_t CheckAssistantStep(const AssistantConfig& cfg, const AssistantStepArgs& args);

// in [2 E_b] = [the target's input embedding of args.token ; args.hidden].
void AssistantInputRow(const AssistantConfig& cfg, const AssistantStepArgs& args, std::vector<float>& in);

// The layer map of a scratch: recomputed (AssistantModel::Sources) when the
// target or its sharing (the plan's first shared layer) changes.
struct AssistantSourcesCache {
  std::vector<AssistantLayerSource> sources;
  const Model* model = nullptr;
  int first_shared = -1;
  const std::vector<AssistantLayerSource>& For(const AssistantModel& assistant, const Model& target,
                                               const LayerPlan& plan);
};

// RoPE positions to build tables for when `need` outgrow `have` (0: none yet):
// at least double, at least 4096, so a growing context rebuilds rarely.
std::int64_t AssistantRopeCapacity(std::int64_t have, std::int64_t need);

// One assistant layer's attention: the GroupQueryAttention op's read-only
// static scatter form over the target state's cache buffers of src
// (src.target_layer's view), rows 0 .. row of the state with every other row
// a padding row. query and output are [row + 1, n_head * head_dim] in the
// memory of run.device (the cache's), row `row` the step's; cos / sin
// [rope_pos, rope_half] there too. Write index p - 1 and nonpad length p make
// every cached key visible; position_ids put the query's RoPE at p; on sliding
// layers the window W + 1 keeps the last W + 1 keys (HF: |q - k| <= W).
// Throws kvshare::Error naming the layer, the target layer it reads and,
// for sliding layers, the max_step the state needs.
struct AssistantAttendArgs {
  int layer = 0;
  const AssistantLayerSource* src = nullptr;
  int row = 0;
  std::int64_t p = 0;
  const float* query = nullptr;
  float* output = nullptr;
  const float* cos = nullptr;
  const float* sin = nullptr;
  std::int64_t rope_pos = 0;
  int rope_half = 0;
  GqaRunOptions run;
};
void AssistantAttend(const AssistantConfig& cfg, const ModelState& target_state, const AssistantAttendArgs& args);

// The centroid-masked head's tokens: the top centroid_top_k clusters of
// centroid_logits [num_centroids] (ties: the lower cluster), best first, each
// cluster's n_vocab / num_centroids ids from `ordering` in order.
std::vector<std::int32_t> CentroidTokens(const AssistantConfig& cfg, std::span<const float> centroid_logits,
                                         std::span<const std::int32_t> ordering);
// Every logit but those of `chosen` set to (the smallest chosen logit) - 1
// (HF's mask value); logits [n_vocab].
void MaskUnchosen(std::span<const std::int32_t> chosen, std::span<float> logits);

}  // namespace kvshare::detail
