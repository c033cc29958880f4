// Text generation loop: prefill the prompt, then sample and decode one token at
// a time until an end-of-generation token, the token limit, or the context end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvshare/model.h"
#include "kvshare/sampler.h"
#include "kvshare/tokenizer.h"

namespace kvshare {

class ThreadPool;

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplerOptions sampler;
  // Tokens that end generation besides the tokenizer's end-of-generation ones
  // (Tokenizer::IsEndOfGeneration): the chat format's end of turn
  // (ChatTemplate::StopTokens()).
  std::vector<int32_t> stop_tokens;
};

struct GenerateStats {
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;  // sampled tokens, the stop token included
  double prefill_seconds = 0;
  double decode_seconds = 0;          // Forward time of decode steps
  std::int64_t decode_steps = 0;
  std::size_t kv_bytes = 0;                  // KV cache buffers as allocated
  std::size_t kv_bytes_without_sharing = 0;  // the same cache with no KV-shared layers
  std::string stop_reason;            // "eos", "end_of_turn" (any other stop token), "max_tokens"
  int32_t last_token = -1;
  bool last_token_in_cache = false;   // false when generation stopped on the last sample
};

// Streams text as it becomes complete.
using TextCallback = std::function<void(std::string_view)>;

class Generator {
 public:
  // The model, tokenizer and pool must outlive the generator.
  Generator(const Model& model, const Tokenizer& tokenizer, ThreadPool* pool, const ModelStateOptions& state_options);

  // Appends `prompt` to the sequence (the cache keeps earlier turns) and
  // generates. Throws kvshare::Error, before running anything, when the
  // cached tokens + prompt + max_new_tokens exceed max_context.
  GenerateStats Generate(std::span<const int32_t> prompt, const GenerateOptions& options, const TextCallback& on_text);

  ModelState& state() { return *state_; }
  void Reset() { state_->Reset(); history_.clear(); }

 private:
  const Model& model_;
  const Tokenizer& tokenizer_;
  ThreadPool* pool_;
  std::unique_ptr<ModelState> state_;
  std::vector<int32_t> history_;
};

}  // namespace kvshare
