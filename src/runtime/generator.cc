#include "kvshare/runtime/generator.h"

#include <algorithm>
#include <chrono>

#include "kvshare/common/error.h"
#include "kvshare/runtime/device_support.h"
#include "runtime/speculative/spec_round.h"

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
  if (options.drafter != nullptr) CheckSpeculativeOptions(options.speculative);
  CheckDrafterOn(options.drafter, state_->device());
  const std::int64_t cached = state_->length();
  const std::int64_t need = cached + static_cast<std::int64_t>(prompt.size()) + options.max_new_tokens;
  if (need > state_->max_context()) {
    std::string what = "prompt of " + std::to_string(prompt.size()) + " tokens";
    if (cached > 0) what = std::to_string(cached) + " tokens of earlier turns + " + what;
    // Named for both front ends: the CLI's flag and Python's Model argument.
    throw Error(what + " + " + std::to_string(options.max_new_tokens) + " new tokens exceeds max_context " +
                std::to_string(state_->max_context()) +
                " (the KV cache's capacity in tokens); increase it to at least " + std::to_string(need) +
                " (--max-context in kvshare generate, max_context= in kvshare.Model)");
  }
  Sampler sampler(options.sampler);
  TokenStreamDecoder decoder(tokenizer_);
  GenerateStats stats;
  stats.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  stats.stop_reason = "max_tokens";

  // The sequence is what the cache holds: a previous call's last token,
  // pending and never fed, is not part of it (the caller feeds it again in
  // `prompt` when the conversation goes on from it).
  history_.resize(static_cast<std::size_t>(cached));
  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> rows = model_.Forward(*state_, prompt, pool_, {.embeddings = options.prompt_embeddings});
  stats.prefill_seconds = Since(t0);
  history_.insert(history_.end(), prompt.begin(), prompt.end());
  sampler.set_prompt_length(history_.size());  // frequency / presence penalties: this call's tokens only

  const std::size_t V = static_cast<std::size_t>(model_.config().n_vocab);
  const std::int64_t max_step = state_->kv_cache().Options().max_step;
  detail::DraftLength draft_length(options.speculative);
  std::vector<int32_t> feed;               // the pending token, then the drafts verified with it
  std::span<const std::int32_t> drafts;    // the drafts `rows` verifies (after row 0)
  std::int64_t fed_at = state_->length();  // cache length before `feed`
  std::size_t hidden_row = 0;              // the row of `rows` that chose the pending token
  bool stop = false;
  const auto emit = [&](int32_t tok, std::span<const float> logits) {
    if (options.on_token) options.on_token(tok, logits);
    ++stats.generated_tokens;
    stats.last_token = tok;
    stats.last_token_in_cache = false;
    if (!options.ignore_eos &&
        (tokenizer_.IsEndOfGeneration(tok) ||
         std::find(options.stop_tokens.begin(), options.stop_tokens.end(), tok) != options.stop_tokens.end())) {
      stats.stop_reason = tok == tokenizer_.eos_id() ? "eos" : "end_of_turn";
      stop = true;
      return false;
    }
    if (on_text) {
      const std::string piece = decoder.Feed(tok);
      if (!piece.empty()) on_text(piece);
    }
    stop = stats.generated_tokens == options.max_new_tokens;
    return !stop;
  };
  while (true) {
    const detail::Accepted a = detail::AcceptDrafts(sampler, rows, V, drafts, history_, emit);
    hidden_row = static_cast<std::size_t>(a.emitted - 1);
    if (!drafts.empty()) {
      stats.speculative.accepted += a.accepted;
      draft_length.Observe(static_cast<int>(drafts.size()), a.accepted);
      // Keep the pending token and the accepted drafts before the last
      // emitted token (which is pending now, as after a one-token step).
      state_->Rewind(0, fed_at + a.emitted);
    }
    if (stop) break;
    feed.assign(1, history_.back());
    if (options.drafter != nullptr) {
      const std::int64_t left = options.max_new_tokens - stats.generated_tokens;  // >= 1
      const std::int64_t k = std::min<std::int64_t>(
          {draft_length.Next(), left - 1, max_step - 1, state_->max_context() - state_->length() - 1});
      if (k > 0) {
        auto t1 = std::chrono::steady_clock::now();
        const std::size_t E = static_cast<std::size_t>(model_.config().n_embd);
        const DraftContext ctx{.row = 0,
                               .tokens = history_,
                               .target_state = state_.get(),
                               .target_hidden = options.drafter->needs_target_hidden() && !state_->hidden().empty()
                                                    ? state_->hidden().subspan(hidden_row * E, E)
                                                    : std::span<const float>()};
        options.drafter->Draft(ctx, static_cast<int>(k), feed);
        feed.resize(std::min<std::size_t>(feed.size(), static_cast<std::size_t>(k + 1)));
        stats.decode_seconds += Since(t1);
      }
    }
    drafts = std::span<const std::int32_t>(feed).subspan(1);
    fed_at = state_->length();
    auto t1 = std::chrono::steady_clock::now();
    rows = model_.Forward(*state_, feed, pool_, {.num_logits = static_cast<std::int64_t>(feed.size())});
    stats.decode_seconds += Since(t1);
    ++stats.decode_steps;
    if (!drafts.empty()) {
      ++stats.speculative.rounds;
      stats.speculative.drafted += static_cast<std::int64_t>(drafts.size());
    }
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
