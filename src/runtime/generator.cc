#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

#include "kvshare/error.h"

namespace kvshare {
namespace {
double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Generator::Generator(const Model& model, const Tokenizer& tokenizer, ThreadPool* pool,
                     const ModelStateOptions& state_options)
    : model_(model), tokenizer_(tokenizer), pool_(pool), state_(model.NewState(state_options)) {}

GenerateStats Generator::Generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                  const TextCallback& on_text) {
  if (prompt.empty()) throw Error("the prompt is empty: nothing to generate from");
  if (options.max_new_tokens < 1) {
    throw Error("max new tokens must be >= 1, got " + std::to_string(options.max_new_tokens));
  }
  const std::int64_t cached = state_->length();
  const std::int64_t need = cached + static_cast<std::int64_t>(prompt.size()) + options.max_new_tokens;
  if (need > state_->max_context()) {
    std::string what = "prompt of " + std::to_string(prompt.size()) + " tokens";
    if (cached > 0) what = std::to_string(cached) + " tokens of earlier turns + " + what;
    throw Error(what + " + " + std::to_string(options.max_new_tokens) + " new tokens exceeds --max-context " +
                std::to_string(state_->max_context()) + "; increase --max-context to at least " +
                std::to_string(need));
  }
  Sampler sampler(options.sampler);
  TokenStreamDecoder decoder(tokenizer_);
  GenerateStats stats;
  stats.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  stats.stop_reason = "max_tokens";

  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = model_.Forward(*state_, prompt, pool_);
  stats.prefill_seconds = Since(t0);
  history_.insert(history_.end(), prompt.begin(), prompt.end());

  for (int i = 0; i < options.max_new_tokens; ++i) {
    const int32_t tok = sampler.Sample(logits, history_);
    history_.push_back(tok);
    ++stats.generated_tokens;
    stats.last_token = tok;
    stats.last_token_in_cache = false;
    if (tokenizer_.IsEndOfGeneration(tok) ||
        std::find(options.stop_tokens.begin(), options.stop_tokens.end(), tok) != options.stop_tokens.end()) {
      stats.stop_reason = tok == tokenizer_.eos_id() ? "eos" : "end_of_turn";
      break;
    }
    if (on_text) {
      const std::string piece = decoder.Feed(tok);
      if (!piece.empty()) on_text(piece);
    }
    if (i + 1 == options.max_new_tokens) break;
    auto t1 = std::chrono::steady_clock::now();
    const int32_t one[1] = {tok};
    logits = model_.Forward(*state_, one, pool_);
    stats.decode_seconds += Since(t1);
    ++stats.decode_steps;
    stats.last_token_in_cache = true;
  }
  if (on_text) {
    const std::string rest = decoder.Flush();
    if (!rest.empty()) on_text(rest);
  }
  stats.kv_bytes = state_->kv_bytes();
  stats.kv_bytes_without_sharing = state_->kv_cache().Memory().bytes_without_sharing;
  return stats;
}

}  // namespace kvshare
