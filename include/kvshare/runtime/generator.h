// kvshare/runtime/generator.h — the single-sequence text generation loop (runtime
// layer; the `kvshare generate` / `bench` commands and the Python module's
// Model.generate): prefill the prompt, then sample and decode one token at a
// time until an end-of-generation token, the token limit, or the context end.
// Tokens are int32 ids of the model's vocabulary; logits are float32
// [n_vocab]; text comes out as UTF-8 pieces, each whole characters (the
// TokenStreamDecoder of kvshare/tokenizer/tokenizer.h). Errors: kvshare::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvshare/model/model.h"
#include "kvshare/runtime/sampler.h"
#include "kvshare/runtime/speculative.h"
#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare {

class ThreadPool;

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplerOptions sampler;
  // Tokens that end generation besides the tokenizer's end-of-generation ones
  // (Tokenizer::IsEndOfGeneration): the chat format's end of turn
  // (ChatTemplate::StopTokens()).
  std::vector<int32_t> stop_tokens;
  // End-of-generation and stop tokens do not end generation: exactly
  // max_new_tokens are made (benchmarks).
  bool ignore_eos = false;
  // Speculative decoding (kvshare/runtime/speculative.h): drafts verified several
  // tokens per target step, the tokens bitwise those of greedy decoding
  // without it. Null: one token per step. The drafter must outlive the call
  // and serve row 0 of this generator's state.
  Drafter* drafter = nullptr;
  SpeculativeOptions speculative;
  // Rows that replace prompt tokens (an image's soft tokens: ImagePrompt of
  // kvshare/runtime/image_prompt.h), offsets into the prompt; checked as
  // Forward checks them. They must outlive the call.
  std::span<const EmbeddingSpan> prompt_embeddings;
  // Called for every sampled token (the stop token included) with the logits
  // it was chosen from ([n_vocab], valid during the call). Null: none.
  std::function<void(int32_t token, std::span<const float> logits)> on_token;
};

struct GenerateStats {
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;  // sampled tokens, the stop token included
  double prefill_seconds = 0;
  double decode_seconds = 0;                 // Forward time of decode steps (drafting included)
  std::int64_t decode_steps = 0;             // target Forward calls after the prompt's
  SpeculativeStats speculative;              // verify steps, drafted and accepted tokens
  std::size_t kv_bytes = 0;                  // KV cache buffers as allocated
  std::size_t kv_bytes_without_sharing = 0;  // the same cache with no KV-shared layers
  std::string stop_reason;                   // "eos", "end_of_turn" (any other stop token), "max_tokens"
  int32_t last_token = -1;
  bool last_token_in_cache = false;  // false when generation stopped on the last sample
};

// Streams text as it becomes complete.
using TextCallback = std::function<void(std::string_view)>;

class Generator {
 public:
  // The model, tokenizer and pool must outlive the generator.
  Generator(const Model& model, const Tokenizer& tokenizer, ThreadPool* pool, const ModelStateOptions& state_options);

  // Appends `prompt` to the sequence (the cache keeps earlier turns) and
  // generates. Throws kvshare::Error, before running anything, when the
  // cached tokens + prompt + max_new_tokens exceed max_context, or for
  // speculative options out of range (CheckSpeculativeOptions), or a drafter
  // the state's device cannot serve (CheckDrafterOn; none so far).
  GenerateStats Generate(std::span<const int32_t> prompt, const GenerateOptions& options, const TextCallback& on_text);

  ModelState& state() { return *state_; }
  // Forgets the sequence (and tells `drafter`, when given, that row 0 restarts).
  void Reset(Drafter* drafter = nullptr) {
    state_->Reset();
    history_.clear();
    if (drafter != nullptr) drafter->Reset(0);
  }

 private:
  const Model& model_;
  const Tokenizer& tokenizer_;
  ThreadPool* pool_;
  std::unique_ptr<ModelState> state_;
  std::vector<int32_t> history_;
};

}  // namespace kvshare
