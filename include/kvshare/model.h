// kvshare/model.h — decoder LLMs loaded from GGUF, run on the CPU.
//
// Model::Load maps a GGUF file (weights stay quantized in the mapping) and
// builds the architecture named by `general.architecture` (today: gemma3, any
// size: every hyperparameter comes from metadata). A Model is immutable and may
// be shared by many sessions; each ModelState owns one sequence's KV cache.
//
// Forward(state, tokens) appends `tokens` at positions state.length() ...
// and returns the logits of the last one. Prefill (many tokens) runs every
// layer's attention as one GroupQueryAttention call; decode passes one token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvshare/gguf.h"
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
};

struct ModelStateOptions {
  // Positions the KV cache can hold (prompt + generated tokens).
  int max_context = 4096;
};

// One sequence's KV cache and scratch buffers.
class ModelState {
 public:
  virtual ~ModelState() = default;
  // Tokens already in the cache.
  virtual std::int64_t length() const = 0;
  virtual int max_context() const = 0;
  // Bytes held by the KV cache buffers.
  virtual std::size_t kv_bytes() const = 0;
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
  virtual std::unique_ptr<ModelState> NewState(const ModelStateOptions& options = {}) const = 0;

  // Appends tokens (non-empty, ids in [0, n_vocab)) to `state` and returns the
  // logits of the last token ([n_vocab], valid until the next call on state).
  // Throws kvshare::Error if the cache would overflow (state unchanged).
  virtual std::span<const float> Forward(ModelState& state, std::span<const std::int32_t> tokens,
                                         ThreadPool* pool) const = 0;
};

// The tokenizer.ggml.* metadata as a VocabData. Throws kvshare::Error if the
// vocabulary arrays are missing.
VocabData ReadVocab(const GgufFile& file);

}  // namespace kvshare
