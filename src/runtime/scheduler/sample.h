// Sampling (kvshare/runtime/scheduler.h, item 4 of a step): the tokens a
// decoding row takes from its logits rows, with the request's own sampler,
// logit bias, grammar mask and logprobs, accepting its drafts by the
// standard rule (spec_round.h). Internal to src/runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <vector>

#include "kvshare/runtime/scheduler.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "runtime/scheduler/request.h"

namespace kvshare {
class ThreadPool;
}

namespace kvshare::detail {

// A sampled token, with its logprobs when the request asks.
struct Sampled {
  std::int32_t token = 0;
  OutputToken info;
};

// What a decoding row takes from a step: its tokens (the accepted drafts,
// then the token sampled after them) and how many drafts it accepted.
struct RowOutcome {
  std::vector<Sampled> tokens;
  int accepted = 0;
  std::exception_ptr error;  // the sampler refused the logits (e.g. NaN)
};

// r's tokens from its logits rows: [1 + drafts.size(), V], the pending
// token's row then each draft's. Stops after a token that ends r (max_tokens,
// or an end token unless ignore_eos; stop strings are found when the text is
// released, scheduler/completion.h). Thread-safe across slots: each request
// has its own sampler and history, which the tokens are appended to. Errors
// land in out.error, not thrown.
void SampleRow(const Tokenizer& tok, Request& r, std::span<const float> rows, std::size_t V,
               std::span<const std::int32_t> drafts, RowOutcome& out);

// RequestOptions::prompt_logprobs: for each prompt chunk of the step with a
// logits row per token (before RecordFed counts it), appends to its
// request's prompt_info the logprob of each next prompt token and its
// alternatives. Tokens in parallel on `pool` (null: this thread).
void PromptLogprobs(SlotTable& rows, const std::vector<BatchEntry>& entries, std::span<const float> logits,
                    std::size_t V, ThreadPool* pool);

}  // namespace kvshare::detail
