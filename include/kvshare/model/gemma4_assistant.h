// kvshare/model/gemma4_assistant.h — Gemma 4's assistant drafter (model layer): the
// "multi-token prediction" checkpoints Google ships next to Gemma 4 (HF
// transformers Gemma4AssistantForCausalLM, model_type gemma4_assistant;
// GGUF architecture `gemma4-assistant` as llama.cpp's converter writes it).
//
// Every assistant layer is KV-shared with the TARGET model: it has no K/V
// projections and attends, through the GroupQueryAttention op's read-only
// static scatter form, to the target state's cache — its full layers to the
// K/V of the target's last full-attention layer, its sliding layers to the
// target's last sliding layer (each read where that layer's cache lives: its
// own buffers, or its source's when it is KV-shared itself). Two models, one
// cache, no copies.
//
// One draft step of a row (HF SinglePositionMultiTokenCandidateGenerator and
// Gemma4AssistantForCausalLM.forward; docs/speculative.md):
//   e = the target's input embedding of `token` (token_embd row * sqrt(E_b))
//   x = pre_projection · [e ; h]                 h: [E_b] hidden state
//   for each layer: x = layer(x), its query at position p (RoPE there) over
//     the target's cached keys j < p; a sliding layer sees the last W + 1 of
//     them (HF's bidirectional sliding mask, |q - k| <= W)
//   y = output_norm(x)
//   logits = token_embd · y (the assistant's own tied table; no softcap), or
//     with ordered embeddings the centroid-masked head: the top_k of
//     `centroids · y` select clusters of the `token_ordering` permutation
//     (n_vocab / num_centroids tokens each); only their logits are computed,
//     every other logit is (the smallest selected) - 1
//   h' = post_projection · y                      [E_b], the next step's h
// p is the row's cache length (the position of the pending token, which the
// target has not run yet) for every step of a round: the drafts chain through
// h and the token, not through positions. The first step's h is the target's
// final hidden state (ModelState::hidden()) at position p - 1.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvshare/cache/kv_cache.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/model/model.h"

namespace kvshare {

class ThreadPool;

// Hyperparameters of an assistant, from `gemma4-assistant.*` metadata.
struct AssistantConfig {
  int n_layer = 0;
  int n_embd = 0;           // E: the assistant's width
  int n_embd_backbone = 0;  // E_b: the target's width (embedding_length_out; HF backbone_hidden_size)
  int n_head = 0;
  int n_vocab = 0;
  float rms_eps = 1e-6f;
  int sliding_window = 0;                                        // W of its sliding layers
  std::vector<bool> is_sliding;                                  // [n_layer]
  std::vector<int> layer_head_dim, layer_n_head_kv, layer_n_ff;  // [n_layer]
  bool ordered_embeddings = false;                               // the centroid-masked head
  int num_centroids = 0;
  int centroid_top_k = 0;
};

// Which target layer's K/V a drafter layer reads.
struct AssistantLayerSource {
  int layer = 0;                              // the drafter's
  AttentionType type = AttentionType::kFull;  // its attention type
  int target_layer = 0;                       // the target's last layer of that type (HF's shared_kv_states entry)
  int cache_layer = 0;  // the layer whose cache buffers hold that K/V (its source when it is KV-shared)
};

// One draft step's inputs (see the top of this file).
struct AssistantStepArgs {
  const Model* target = nullptr;
  const ModelState* target_state = nullptr;  // read only (the op writes nothing)
  int row = 0;                               // the state's row
  std::int32_t token = 0;                    // at position p = target_state->length(row)
  std::span<const float> hidden;             // [n_embd_backbone]
  ThreadPool* pool = nullptr;
};

// A step's outputs, valid until the next Step on the same scratch.
struct AssistantStepOut {
  std::span<const float> logits;  // [n_vocab]
  std::span<const float> hidden;  // [n_embd_backbone], h' for the next step
  std::int32_t argmax = 0;        // the greedy draft (lowest id on ties)
};

// Scratch of one drafting thread (activations, RoPE tables grown on demand).
class AssistantScratch {
 public:
  virtual ~AssistantScratch() = default;
};

// Whether the GGUF file at `path` is a Gemma 4 assistant (general.architecture
// `gemma4-assistant`; reads the header only). Throws kvshare::Error for a
// missing or malformed file.
bool IsAssistantGguf(const std::string& path);

class AssistantModel {
 public:
  // Opens a `gemma4-assistant` GGUF. Throws kvshare::Error for another
  // architecture, a missing or ill-shaped tensor or key (named), a layer
  // that is not KV-shared (shared_kv_layers must be block_count), or
  // per-layer embeddings / MoE (HF's assistant has neither).
  static std::unique_ptr<AssistantModel> Load(const std::string& path);
  virtual ~AssistantModel() = default;

  virtual const AssistantConfig& config() const = 0;
  virtual const GgufFile& gguf() const = 0;

  // Checks that the assistant fits `target` and returns the layer map for
  // states of `target` with layer plan `plan`. Throws kvshare::Error, naming
  // the mismatch, when the vocabulary size, the backbone width
  // (embedding_length_out vs the target's embedding_length) or a layer's head
  // size or KV head count differs from the target layer it reads, when the
  // target has no layer of a type the assistant reads, or when the
  // assistant's sliding window is wider than the target's (its rings would
  // not hold the keys).
  virtual std::vector<AssistantLayerSource> Sources(const Model& target, const LayerPlan& plan) const = 0;

  virtual std::unique_ptr<AssistantScratch> NewScratch() const = 0;

  // One draft step of args.row. Throws kvshare::Error for a row without a
  // cached token (p = 0), a hidden state of the wrong width, a token out of
  // range, or a target state whose sliding rings do not hold the last W + 1
  // positions (max_step >= 2 keeps them).
  virtual AssistantStepOut Step(AssistantScratch& scratch, const AssistantStepArgs& args) const = 0;
};

}  // namespace kvshare
