// Completion (kvshare/runtime/scheduler.h, the end of item 4 of a step): a
// row's sampled tokens go out as events, their text held back while it
// could still become a stop string (text_release.h), and a request ends
// with its last event: at an end token, a stop string, max_tokens,
// cancellation or an internal error. Stepping thread; Finish locks
// SchedulerShared::mu for the counters. Internal to src/runtime.
#pragma once

#include <string>

#include "kvshare/runtime/scheduler.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "runtime/scheduler/request.h"
#include "runtime/scheduler/sample.h"

namespace kvshare::detail {

// Ends r (in a slot or not: a slot's request is freed first, SlotTable::Free)
// with its last event: e with finished, the reason, `detail`, the usage and
// the error flag set. Counts it in shared.stats, and the slot or queue
// place it leaves, before the event is pushed.
void Finish(SchedulerShared& shared, Request& r, FinishReason reason, std::string detail, RequestEvent e,
            bool error = false);

// Frees s and ends its request with an internal error ("internal error: "
// + what, kAbort).
void FailRow(SchedulerShared& shared, SlotTable& rows, Slot& s, const std::string& what);

// Streams the next token of s's request (its released text, if any), or
// ends the request with its last event (which frees s) when the token is an
// end token, completes a stop string or reaches max_tokens.
void StreamToken(const Tokenizer& tok, SchedulerShared& shared, SlotTable& rows, Slot& s, Sampled& sampled);

}  // namespace kvshare::detail
