// kvshare/model.h — decoder LLMs loaded from GGUF, run on the CPU.
//
// Model::Load maps a GGUF file (weights stay quantized in the mapping) and
// builds the architecture named by `general.architecture` (today: gemma3, any
// size: every hyperparameter comes from metadata). A Model is immutable and may
// be shared by many sessions; each ModelState owns one sequence's KV cache.
//
// Forward(state, tokens) appends `tokens` at positions state.length() ...
// and returns the logits of the last one (or of the last few, ForwardOptions).
// Inputs are run in chunks of at most ModelStateOptions::max_step tokens; each
// chunk runs every layer's attention as one GroupQueryAttention call in static
// scatter mode on the state's kvshare::KvCache (cache.h): full layers on
// linear buffers of max_context positions, sliding layers on window rings of
// window + max_step - 1 positions, KV-shared layers (the last
// num_kv_shared_layers, DESIGN.md §4) read their source layer's buffers
// zero-copy and compute no K/V. Decode passes one token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvshare/cache.h"
#include "kvshare/gguf.h"
#include "kvshare/tensor.h"
#include "kvshare/tokenizer.h"

namespace kvshare {

class ThreadPool;

// Hyperparameters read from metadata.
struct ModelConfig {
  std::string architecture;
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_vocab = 0;
  int context_length = 0;       // trained context
  float rms_eps = 1e-6f;
  int sliding_window = 0;       // 0: none
  float rope_base_full = 1e6f;
  float rope_base_sliding = 1e4f;
  float attn_scale = 0.0f;      // query scale
  std::vector<bool> is_sliding; // [n_layer]
  // Trailing layers that reuse an earlier layer's K/V (`<arch>.attention.
  // shared_kv_layers`, Gemma 3n / Gemma 4); 0 when the file has no such key.
  int num_kv_shared_layers = 0;
};

// The attention layers of `config` as a cache spec (per layer: sliding or
// full, window, N_kv, H, RoPE base) with the last `num_kv_shared_layers`
// layers KV-shared. Does not validate the sharing (BuildLayerPlan does).
ModelKvSpec KvSpecOf(const ModelConfig& config, int num_kv_shared_layers);

// Largest num_kv_shared_layers whose layer plan is valid for `config`: every
// shared layer needs a non-shared layer of its type (sliding / full) before the
// first shared layer (Gemma 3 270M: 12, since layer 5 is the first full layer).
// Every n in [0, MaxKvSharedLayers] is valid.
int MaxKvSharedLayers(const ModelConfig& config);

struct ModelStateOptions {
  // Positions the KV cache can hold (prompt + generated tokens), >= 1.
  int max_context = 4096;
  // S_max: most tokens per internal step, >= 1 (clamped to max_context).
  // Forward splits longer inputs into chunks of max_step tokens; sliding
  // layers keep rings of window + max_step - 1 positions. Prefill speed is
  // flat from 64 to 2048 on the 270M model (one CPU thread); 256 keeps the
  // rings small (Gemma 3 270M at 4096 positions: 46.5 MiB fp32 vs 54 MiB at 512).
  int max_step = 256;
  // KV cache storage: float32, float16 or bfloat16 (K/V are rounded to it when
  // written; attention accumulates in fp32).
  DType kv_dtype = DType::kFloat32;
  // KV-shared trailing layers; nullopt: the model's own
  // (ModelConfig::num_kv_shared_layers). Must be in [0, MaxKvSharedLayers].
  // Overriding it on a model trained without sharing changes its outputs
  // (the shared layers drop their own K/V projections); it is there to try
  // sharing and see the memory it saves.
  std::optional<int> num_kv_shared_layers;
  // The GQA kernel of every attention layer. kReference (plain loops, double
  // accumulation, slow) sums each query's keys in position order whatever the
  // chunking, ring wrap or step; tests use it to compare cache layouts
  // without kernel rounding differences.
  GqaKernel attention_kernel = GqaKernel::kAuto;
};

// Options of one Forward call.
struct ForwardOptions {
  // Return the logits of the last num_logits tokens of the call, 1 <= num_logits
  // <= tokens.size(): [num_logits, n_vocab] row-major, in token order.
  std::int64_t num_logits = 1;
};

// One sequence's KV cache (a KvCache with one row) and scratch buffers.
class ModelState {
 public:
  virtual ~ModelState() = default;
  // Tokens already in the cache.
  virtual std::int64_t length() const = 0;
  virtual int max_context() const = 0;
  // Bytes held by the KV cache buffers (kv_cache().Memory().total_bytes).
  virtual std::size_t kv_bytes() const = 0;
  // The cache: its layer plan (Plan()), options and memory report (Memory():
  // bytes per layer, saved by sharing and by rings).
  virtual const KvCache& kv_cache() const = 0;
  // Forget the sequence (length 0); buffers are kept.
  virtual void Reset() = 0;
};

class Model {
 public:
  // Opens and validates `path`. Throws kvshare::Error for a missing file, an
  // unsupported architecture, or missing/ill-shaped tensors.
  static std::unique_ptr<Model> Load(const std::string& path);
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const GgufFile& gguf() const = 0;
  // A state with an empty cache. Throws kvshare::Error when max_context or
  // max_step < 1, kv_dtype is not a float type, or num_kv_shared_layers is
  // outside [0, MaxKvSharedLayers(config())] (the message gives the range).
  virtual std::unique_ptr<ModelState> NewState(const ModelStateOptions& options = {}) const = 0;

  // Appends tokens (non-empty, ids in [0, n_vocab)) to `state` and returns the
  // logits of the last options.num_logits tokens ([num_logits, n_vocab]; by
  // default the last token's [n_vocab]), valid until the next call on state.
  // Throws kvshare::Error, leaving the state unchanged, if the cache would
  // overflow (length() + tokens.size() > max_context()), a token id is out of
  // range, or num_logits is out of [1, tokens.size()]. An error while running
  // (not expected once these checks pass) rewinds the state to its length
  // before the call, or resets it (length 0) when a sliding ring no longer
  // holds that length. Results do not depend on the thread count of `pool`
  // (null: the calling thread).
  virtual std::span<const float> Forward(ModelState& state, std::span<const std::int32_t> tokens,
                                         ThreadPool* pool, const ForwardOptions& options = {}) const = 0;
};

// The tokenizer.ggml.* metadata as a VocabData. `tokenizer.ggml.model` must be
// "llama" (also when absent) or "gemma4"; "gemma4" requires
// `tokenizer.ggml.merges` and, as llama.cpp loads it, always adds BOS, never a
// space prefix, and makes its end-of-generation tokens <eos>, <turn|> and
// <|tool_response> CONTROL (the converter writes the last USER_DEFINED). Throws kvshare::Error if the vocabulary arrays are missing, or
// naming the key and its value for an unsupported tokenizer model.
VocabData ReadVocab(const GgufFile& file);

}  // namespace kvshare
