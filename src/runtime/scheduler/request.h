// The scheduler's inner types (kvshare/runtime/scheduler.h): a request from
// Submit to its last event, the slots (KV-cache rows) that serve requests,
// and what the stepping thread shares with the threads that submit, cancel
// and read stats. The parts of a step work on these: admission
// (scheduler/admission.h), planning (scheduler/step.h), speculation
// (scheduler/drafts.h), sampling (scheduler/sample.h) and completion
// (scheduler/completion.h). Internal to src/runtime.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kvshare/grammar/grammar.h"
#include "kvshare/runtime/sampler.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "runtime/scheduler/image_spans.h"
#include "runtime/speculative/spec_round.h"
#include "runtime/text_release.h"

namespace kvshare::detail {

using SchedulerClock = std::chrono::steady_clock;

// The caller's side of one request: events queue here until Wait takes them
// (any thread), pushed by the stepping thread.
class Handle final : public RequestHandle {
 public:
  explicit Handle(std::uint64_t id) : id_(id) {}

  bool Wait(std::vector<RequestEvent>& out, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    for (RequestEvent& e : events_) out.push_back(std::move(e));
    events_.clear();
    return true;
  }
  void Cancel() override { cancelled_.store(true); }
  std::uint64_t id() const override { return id_; }

  bool cancelled() const { return cancelled_.load(); }
  void Push(RequestEvent e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }

 private:
  const std::uint64_t id_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RequestEvent> events_;
};

// One request from Submit to its last event. Built by Submit's thread, then
// the stepping thread's alone (only `handle` is shared).
struct Request {
  Request(std::shared_ptr<Handle> h, RequestOptions o, const Tokenizer& tok, const SpeculativeOptions& spec,
          std::shared_ptr<const TokenTrie> trie)
      : handle(std::move(h)),
        opt(std::move(o)),
        sampler(opt.sampler),
        decoder(tok),
        releaser(opt.stop),
        draft_length(spec) {
    history = opt.prompt;
    sampler.set_prompt_length(opt.prompt.size());  // OpenAI's penalties count generated tokens only
    if (opt.grammar) {
      std::vector<std::int32_t> ends = opt.stop_tokens;
      for (std::int32_t id : {tok.eos_id(), tok.end_of_turn_id()}) {
        if (id >= 0) ends.push_back(id);
      }
      matcher = std::make_unique<GrammarMatcher>(opt.grammar, std::move(trie), std::move(ends));
    }
  }
  std::shared_ptr<Handle> handle;
  RequestOptions opt;
  Sampler sampler;
  TokenStreamDecoder decoder;
  TextReleaser releaser;
  std::vector<std::int32_t> history;     // prompt + sampled (repetition penalty)
  std::vector<OutputToken> token_info;   // per sampled token: id and logprobs (text filled on release)
  std::vector<OutputToken> prompt_info;  // opt.prompt_logprobs: prompt tokens 1.. so far (sent with the first event)
  std::int64_t prefilled = 0;            // prompt tokens in the cache
  std::int64_t cached = 0;               // of which reused from the prompt cache
  int generated = 0;
  std::int32_t next_token = -1;  // sampled, fed at the next step
  std::uint64_t admit_seq = 0;
  DraftLength draft_length;                 // speculative decoding: drafts per step
  std::vector<std::int32_t> feed;           // this step's decode tokens: next_token, then its drafts
  std::vector<float> hidden;                // the target's hidden state that chose next_token (drafters that need it)
  std::unique_ptr<GrammarMatcher> matcher;  // constrained decoding (opt.grammar)
  std::vector<float> masked;                // the logits row with the grammar's mask applied
  std::vector<EmbeddingSpan> chunk_spans;   // this step's prompt chunk's image spans (relative to it)

  bool decoding() const { return prefilled == static_cast<std::int64_t>(opt.prompt.size()); }
  // In a slot (Admission's Seat numbers it), not waiting in the queue.
  bool seated() const { return admit_seq != 0; }
};

struct Slot {
  std::vector<std::int32_t> tokens;  // what the row's cache holds
  std::vector<CachedSpan> spans;     // the image spans among them (may reach past a cancelled prefill's end)
  std::unique_ptr<Request> req;      // null: free
  std::uint64_t last_used = 0;
};

// What the stepping thread shares with the threads that call Submit, Stats,
// Drain and CancelAll: the fields marked "under mu" only with mu held, the
// atomics from any thread.
struct SchedulerShared {
  mutable std::mutex mu;
  std::condition_variable wake;                   // the stepping thread's sleep while idle
  std::deque<std::unique_ptr<Request>> incoming;  // under mu: submitted, not yet seen by a step
  // Under mu, and changed with the counters they balance: requests_accepted
  // = requests_finished + queued + active at every moment a reader can see
  // (Stats is one snapshot; Idle never misses a request between queue and slot).
  int queued = 0;  // incoming + waiting
  int active = 0;  // slots with a request
  std::atomic<bool> draining{false};
  std::atomic<bool> cancel_all{false};
  std::uint64_t next_id = 1;      // under mu
  SchedulerStats stats;           // under mu
  std::size_t kv_bytes_used = 0;  // under mu
  std::int64_t kv_tokens = 0;     // under mu
  // Under mu: step end, prefill and sampled tokens of the steps of about the
  // last kRecentWindowSeconds (scheduler.cc; pruned at each step and each
  // Stats call).
  std::deque<std::tuple<SchedulerClock::time_point, std::int64_t, std::int64_t>> recent;
  SchedulerClock::time_point start;
};

// The state's rows and the requests in them: the stepping thread's alone.
struct SlotTable {
  Slot& at(int row) { return slots[static_cast<std::size_t>(row)]; }
  const Slot& at(int row) const { return slots[static_cast<std::size_t>(row)]; }

  // Frees s and hands its request over for the last event (Finish, which
  // counts the slot free in SchedulerShared::active before the client can
  // see that event).
  Request& Free(Slot& s) {
    finished.push_back(std::move(s.req));
    s.last_used = ++use_clock;
    return *finished.back();
  }

  std::vector<Slot> slots;      // none until the owner resizes it (after checking the count)
  std::uint64_t use_clock = 0;  // orders Slot::last_used
  // Requests freed this step, dropped at its end (their last event is sent
  // after Free, and the step's batch entries point into their tokens).
  std::vector<std::unique_ptr<Request>> finished;
};

// SchedulerOptions::log, when set (stepping thread).
inline void LogLine(const SchedulerOptions& opt, const std::string& line) {
  if (opt.log) opt.log(line);
}

}  // namespace kvshare::detail
