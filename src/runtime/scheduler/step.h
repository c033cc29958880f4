// Step planning (kvshare/runtime/scheduler.h, item 3 of a step): what one
// Model::ForwardBatch feeds: every decoding row's pending token first (then
// its drafts, scheduler/drafts.h), then prompt chunks of the rows still
// reading their prompt, in admission order, until the step holds
// step_tokens tokens; and, once the forward pass ran, what it did to each
// row. Stepping thread. Internal to src/runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvshare/model/model.h"
#include "kvshare/runtime/scheduler.h"
#include "runtime/scheduler/request.h"

namespace kvshare::detail {

// The rows serving a request, in slot order.
struct StepRows {
  std::vector<int> decode;   // prompt complete: their feed is set to the pending token
  std::vector<int> prefill;  // still reading their prompt
};
StepRows SplitRows(SlotTable& rows);

// A prompt chunk of a request with prompt logprobs reads at most this many
// tokens (its logits are a row of n_vocab per token).
constexpr std::int64_t kPromptLogprobsChunk = 64;

// One ForwardBatch. Entries point into the requests' feed and prompt.
struct StepBatch {
  std::vector<BatchEntry> entries;  // decode rows (each its whole feed's logits), then prefill chunks
  std::int64_t n_decode = 0;        // tokens of the decode entries
  std::int64_t n_prefill = 0;       // tokens of the prefill chunks
};
// The decode rows' feeds (with their drafts), then the prefill rows' next
// chunks in admission order within what is left of step_tokens.
StepBatch PlanBatch(SlotTable& rows, const StepRows& split, std::int64_t step_tokens);

// An entry whose row samples after the step (its prompt complete).
struct SampleEntry {
  std::size_t entry = 0;      // in the step's entries
  std::size_t first_row = 0;  // its first row in the step's logits
  std::size_t rows = 1;       // its rows there: a decode entry's pending token and drafts, else 1
  std::int64_t fed_at = 0;    // the row's length before the step
};
// Accounts for the step in the slots (their cached tokens) and requests
// (prompt tokens prefilled); returns the entries that sample, in entry order.
std::vector<SampleEntry> RecordFed(SlotTable& rows, const std::vector<BatchEntry>& entries);

// SchedulerOptions::on_step for a step's entries, after the forward pass
// and before RecordFed.
void TraceStep(const SchedulerOptions& opt, const SlotTable& rows, const ModelState& state,
               const std::vector<BatchEntry>& entries, std::span<const float> logits);

}  // namespace kvshare::detail
