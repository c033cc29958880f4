// Admission (kvshare/runtime/scheduler.h, items 1 and 2 of a step): Submit
// checks a request and queues it; at the start of each step the queued
// requests join the waiting line, cancelled ones leave, and waiting ones take
// free slots in arrival order, each the slot whose cached tokens it can
// reuse the most of (prompt caching). Internal to src/runtime.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "kvshare/model/model.h"
#include "kvshare/runtime/device_support.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "runtime/scheduler/request.h"

namespace kvshare::detail {

// Throws kvshare::Error for the first thing Scheduler::Submit refuses in r
// (the header lists them), naming it and its range; a span may hold at most
// max_span tokens, and none is taken where `support` has no media inputs.
void ValidateRequest(const RequestOptions& r, std::int32_t n_vocab, int max_context, std::int64_t max_span,
                     const DeviceSupport& support);

// Threads: Submit runs on any thread and touches only `shared` (under its
// mutex) and the trie (once); the other calls run on the stepping thread,
// which alone owns the waiting line, the slots and the state.
class Admission {
 public:
  // opt, tok, shared and rows must outlive the Admission.
  Admission(const SchedulerOptions& opt, const Tokenizer& tok, std::int32_t n_vocab, SchedulerShared& shared,
            SlotTable& rows)
      : opt_(opt), tok_(tok), n_vocab_(n_vocab), shared_(shared), rows_(rows) {}

  // What the state's device serves (before any Submit; default: the CPU's).
  void SetSupport(const DeviceSupport& support) { support_ = support; }
  // Scheduler::Submit.
  SubmitResult Submit(RequestOptions r, int waiting_upstream);
  // Moves the submitted requests to the waiting line.
  void TakeIncoming();
  // Ends the cancelled requests (all with CancelAll), waiting or in a slot.
  void RemoveCancelled();
  // Gives free slots to waiting requests, rewinding each chosen row of
  // `state` to the prefix it reuses.
  void Admit(ModelState& state);

 private:
  // RequestOptions::prefill_from: the row of the request r copies its
  // prompt from once that one decodes; kLeaderPrefilling while it still
  // reads its prompt; -1 when r prefills as any request (always, once the
  // state refused a CopyRow: the GPU model's states copy no rows).
  static constexpr int kLeaderPrefilling = -2;
  int LeaderRow(const Request& r) const;
  // Seats r (the waiting line's front) in free `slot` as a copy of row
  // `leader`, rewound to all but its last prompt token. False (nothing
  // done) when the state cannot copy rows.
  bool CopyLeader(ModelState& state, std::unique_ptr<Request>& r, int leader, int slot);
  // Moves the waiting line's front r into s, its first `reuse` prompt tokens
  // cached (`fallback`: a longer prefix was lost to a sliding ring), and
  // counts the admission.
  void Seat(std::unique_ptr<Request> r, Slot& s, std::size_t reuse, bool fallback);
  // The vocabulary's trie, built by the first request with a grammar.
  std::shared_ptr<const TokenTrie> Trie();

  const SchedulerOptions& opt_;
  const Tokenizer& tok_;
  const std::int32_t n_vocab_;
  SchedulerShared& shared_;
  SlotTable& rows_;
  DeviceSupport support_;
  bool copies_rows_ = true;                       // false once the state refused a CopyRow
  std::deque<std::unique_ptr<Request>> waiting_;  // stepping thread only
  std::uint64_t admit_counter_ = 0;               // orders Request::admit_seq
  std::once_flag trie_once_;
  std::shared_ptr<const TokenTrie> trie_;
};

}  // namespace kvshare::detail
