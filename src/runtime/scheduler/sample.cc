// A decoding row's tokens from its logits (scheduler/sample.h).
#include "runtime/scheduler/sample.h"

#include <algorithm>
#include <string>

#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "runtime/log_softmax.h"
#include "runtime/speculative/spec_round.h"

namespace kvshare::detail {
namespace {

// log-softmax of `logits` at `token`, and the k most likely tokens.
void Logprobs(std::span<const float> logits, std::int32_t token, int k, OutputToken& info) {
  const double log_z = LogSumExp(logits);
  info.logprob = static_cast<float>(logits[static_cast<std::size_t>(token)] - log_z);
  for (const auto& [id, logit] : TopLogits(logits, k)) {
    info.top.push_back({id, static_cast<float>(logit - log_z)});
  }
}

// Whether t ends r when r has made `made` tokens with t (max_tokens, or an
// end token unless ignore_eos; stop strings are found when the text is
// released, in StreamToken).
bool Ends(const Tokenizer& tok, const Request& r, std::int32_t t, int made) {
  if (made >= r.opt.max_tokens) return true;
  if (r.opt.ignore_eos) return false;
  return tok.IsEndOfGeneration(t) ||
         std::find(r.opt.stop_tokens.begin(), r.opt.stop_tokens.end(), t) != r.opt.stop_tokens.end();
}

}  // namespace

void SampleRow(const Tokenizer& tok, Request& r, std::span<const float> rows, std::size_t V,
               std::span<const std::int32_t> drafts, RowOutcome& out) {
  try {
    // A constrained or biased row has no drafts: it samples from its one
    // row, biased, then masked.
    std::span<const float> sample_rows = rows;
    if (r.matcher || !r.opt.logit_bias.empty()) {
      r.masked.assign(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(V));
      for (const auto& [id, bias] : r.opt.logit_bias) r.masked[static_cast<std::size_t>(id)] += bias;
      if (r.matcher) r.matcher->MaskLogits(r.masked);
      sample_rows = r.masked;
    }
    const Accepted a =
        AcceptDrafts(r.sampler, sample_rows, V, drafts, r.history, [&](std::int32_t t, std::span<const float> row) {
          Sampled& s = out.tokens.emplace_back();
          s.token = s.info.token = t;
          const bool own = r.matcher || !r.opt.logit_bias.empty();  // row is the masked copy: use the model's
          if (r.opt.top_logprobs >= 0) Logprobs(own ? rows.subspan(0, V) : row, t, r.opt.top_logprobs, s.info);
          if (r.matcher && !r.matcher->AcceptToken(t)) {
            throw Error("constrained decoding: sampled token " + std::to_string(t) + " outside the grammar's mask");
          }
          return !Ends(tok, r, t, r.generated + static_cast<int>(out.tokens.size()));
        });
    out.accepted = a.accepted;
  } catch (...) {
    out.error = std::current_exception();
  }
}

void PromptLogprobs(SlotTable& rows, const std::vector<BatchEntry>& entries, std::span<const float> logits,
                    std::size_t V, ThreadPool* pool) {
  std::size_t at = 0;
  for (const BatchEntry& b : entries) {
    const std::size_t first = at;
    at += static_cast<std::size_t>(b.num_logits);
    Request& r = *rows.at(b.row).req;
    if (r.opt.prompt_logprobs < 0 || r.decoding()) continue;
    // Row j of the chunk predicts prompt token prefilled + j + 1 (none after the last).
    const std::int64_t n =
        std::min<std::int64_t>(b.num_logits, static_cast<std::int64_t>(r.opt.prompt.size()) - r.prefilled - 1);
    if (n <= 0) continue;
    const std::size_t base = r.prompt_info.size();
    r.prompt_info.resize(base + static_cast<std::size_t>(n));
    ParallelFor(n > 1 ? pool : nullptr, n, [&](std::int64_t j) {
      const std::int32_t t = r.opt.prompt[static_cast<std::size_t>(r.prefilled + j + 1)];
      OutputToken& info = r.prompt_info[base + static_cast<std::size_t>(j)];
      info.token = t;
      Logprobs(logits.subspan((first + static_cast<std::size_t>(j)) * V, V), t, r.opt.prompt_logprobs, info);
    });
  }
}

}  // namespace kvshare::detail
