// Speculation in the scheduler's steps (kvshare/runtime/scheduler.h, items 3
// and 4; kvshare/runtime/speculative.h): before the forward pass each
// decoding row that allows it drafts tokens after its pending one, within
// the step's token budget and, with adaptive drafting, where they pay
// (AllocateDrafts, spec_round.h); one verify step checks them all; after
// it, each row keeps its accepted drafts and rewinds the rest out of its
// cache. Stepping thread. Internal to src/runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvshare/model/model.h"
#include "kvshare/runtime/scheduler.h"
#include "runtime/scheduler/request.h"
#include "runtime/scheduler/sample.h"

namespace kvshare::detail {

struct DraftCounts {
  std::int64_t drafted = 0;      // drafts in all
  std::int64_t verify_rows = 0;  // rows with at least one
};

// Appends drafts to the feed (pending token first) of each of
// `decode_rows` (opt.drafter must be set).
DraftCounts DraftRows(const SchedulerOptions& opt, const ModelState& state, SlotTable& rows,
                      const std::vector<int>& decode_rows);

// After a verify step that fed `drafted` drafts to s's row `row`, whose
// length was `fed_at` before the step: keeps the pending token and the
// accepted drafts before the row's last sampled token (pending now, as after
// a one-token step), rewinds the rest out of the cache and tells the row's
// draft length what was accepted.
void KeepAccepted(ModelState& state, Slot& s, int row, std::int64_t fed_at, int drafted, const RowOutcome& o);

// Keeps for r's next drafts the target's hidden state at `logits_row` of the
// step (the row that chose the pending token), when the state has one.
void KeepHidden(const ModelState& state, std::size_t n_embd, std::size_t logits_row, Request& r);

}  // namespace kvshare::detail
