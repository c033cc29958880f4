// Continuous batching over one multi-row ModelState (kvshare/runtime/scheduler.h).
// A step meets its parts in this order: admission (scheduler/admission.h),
// planning (scheduler/step.h), speculation (scheduler/drafts.h), sampling
// (scheduler/sample.h) and completion (scheduler/completion.h); the types
// they share are in scheduler/request.h. This file runs them in turn and
// keeps the counters.
#include "kvshare/runtime/scheduler.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "runtime/scheduler/admission.h"
#include "runtime/scheduler/completion.h"
#include "runtime/scheduler/drafts.h"
#include "runtime/scheduler/request.h"
#include "runtime/scheduler/sample.h"
#include "runtime/scheduler/step.h"

namespace kvshare {
namespace {

using Clock = detail::SchedulerClock;
constexpr double kRecentWindowSeconds = 10.0;

void CheckOptions(const SchedulerOptions& o) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error(what);
  };
  need(o.slots >= 1, "scheduler slots must be >= 1, got " + std::to_string(o.slots));
  need(o.max_context >= 2, "scheduler max_context must be >= 2, got " + std::to_string(o.max_context));
  need(o.step_tokens > o.slots, "scheduler step_tokens must be > slots (" + std::to_string(o.slots) +
                                    ") so that a prefill always advances, got " + std::to_string(o.step_tokens));
  need(o.max_queue >= 0, "scheduler max_queue must be >= 0, got " + std::to_string(o.max_queue));
  if (o.drafter != nullptr) CheckSpeculativeOptions(o.speculative);
}

// The message of a sampling error.
std::string ErrorText(const std::exception_ptr& error) {
  std::string what = "unknown error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& ex) {
    what = ex.what();
  } catch (...) {
  }
  return what;
}

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "?";
}

// Threads: the stepping thread (Step's caller, or `thread` after Start)
// alone owns the state, the slots (rows), the admission's waiting line and
// the requests in them; `shared` is what it shares with the threads that
// call Submit, Stats, Drain and CancelAll (SchedulerShared says which
// fields need its mutex).
struct Scheduler::Impl {
  Impl(const Model& m, const Tokenizer& t, ThreadPool* p, const SchedulerOptions& o)
      : model(m), tok(t), pool(p), opt(o), admission(opt, tok, m.config().n_vocab, shared, rows) {
    CheckOptions(o);
    ModelStateOptions so;
    so.max_context = o.max_context;
    so.max_step = std::min(o.step_tokens, o.max_context);
    so.kv_dtype = o.kv_dtype;
    so.attention_precision = o.attention_precision;
    so.num_kv_shared_layers = o.num_kv_shared_layers;
    so.max_batch = o.slots;
    so.exact_rewind = o.exact_rewind;
    state = model.NewState(so);
    support = SupportOn(state->device());
    CheckDrafterOn(o.drafter, support.device);
    admission.SetSupport(support);
    rows.slots.resize(static_cast<std::size_t>(o.slots));
    for (const LayerMemory& l : state->kv_cache().Memory().layers) {
      if (!l.owns_cache || l.capacity == 0) continue;
      layer_bytes.push_back(
          {l.capacity, l.bytes / static_cast<std::size_t>(o.slots) / static_cast<std::size_t>(l.capacity)});
    }
    shared.stats.slots = o.slots;
    shared.stats.kv_bytes = state->kv_bytes();
    shared.start = Clock::now();
  }

  const Model& model;
  const Tokenizer& tok;
  ThreadPool* pool;
  SchedulerOptions opt;
  std::unique_ptr<ModelState> state;
  DeviceSupport support;
  detail::SchedulerShared shared;
  detail::SlotTable rows;
  detail::Admission admission;
  std::vector<std::pair<std::int64_t, std::size_t>> layer_bytes;  // owning layers: capacity, bytes per position per row

  std::thread thread;
  std::atomic<bool> stop{false};
  bool running = false;

  bool HasWork() const {
    std::lock_guard<std::mutex> lock(shared.mu);
    return shared.queued > 0 || shared.active > 0;
  }

  bool Step() {
    const bool worked = StepInner();
    rows.finished.clear();
    std::lock_guard<std::mutex> lock(shared.mu);
    UpdateUsage();
    return worked;
  }

  // Items 1-4 of kvshare/runtime/scheduler.h. Returns false when no row had
  // anything to feed.
  bool StepInner() {
    admission.TakeIncoming();
    admission.RemoveCancelled();
    admission.Admit(*state);
    const detail::StepRows split = detail::SplitRows(rows);
    const auto t0 = Clock::now();
    detail::DraftCounts drafts;
    if (opt.drafter != nullptr) drafts = detail::DraftRows(opt, *state, rows, split.decode);
    const detail::StepBatch batch = detail::PlanBatch(rows, split, opt.step_tokens);
    if (batch.entries.empty()) return false;
    std::span<const float> logits;
    if (!Forward(batch.entries, logits)) return true;
    if (opt.on_step) detail::TraceStep(opt, rows, *state, batch.entries, logits);
    detail::PromptLogprobs(rows, batch.entries, logits, static_cast<std::size_t>(model.config().n_vocab), pool);
    const std::vector<detail::SampleEntry> to_sample = detail::RecordFed(rows, batch.entries);
    std::vector<detail::RowOutcome> out = SampleRows(batch.entries, to_sample, logits);
    const StepTokens made = TakeOutcomes(batch.entries, to_sample, out);
    RecordStep(t0, Clock::now(), drafts, batch.n_prefill, made);
    return true;
  }

  // Empties row `row` and its slot's prompt cache after a failed step: its
  // KV rows may be garbage (NaN logits come from NaN rows, and attention
  // spreads a NaN V row to the rows before it, as 0 x NaN), and a later
  // prompt on the same prefix must not reuse them.
  void ForgetRow(int row) {
    state->Reset(row);
    detail::Slot& s = rows.at(row);
    s.tokens.clear();
    s.spans.clear();
  }

  // The step's forward pass into `logits`. Not expected to fail once
  // Submit's checks pass; when it does, the rows of this step end (with an
  // internal error) and this returns false.
  bool Forward(const std::vector<BatchEntry>& entries, std::span<const float>& logits) {
    try {
      logits = model.ForwardBatch(*state, entries, pool);
      return true;
    } catch (const std::exception& ex) {
      detail::LogLine(opt, std::string("step failed: ") + ex.what());
      for (const BatchEntry& b : entries) {
        ForgetRow(b.row);
        detail::FailRow(shared, rows, rows.at(b.row), ex.what());
      }
      return false;
    }
  }

  // Rows sample (or accept their drafts) in parallel, each a pass or more
  // over n_vocab logits per row; out[i] is to_sample[i]'s.
  std::vector<detail::RowOutcome> SampleRows(const std::vector<BatchEntry>& entries,
                                             const std::vector<detail::SampleEntry>& to_sample,
                                             std::span<const float> logits) {
    const std::size_t V = static_cast<std::size_t>(model.config().n_vocab);
    std::vector<detail::RowOutcome> out(to_sample.size());
    ParallelFor(to_sample.size() > 1 ? pool : nullptr, static_cast<std::int64_t>(to_sample.size()),
                [&](std::int64_t i) {
                  const detail::SampleEntry& e = to_sample[static_cast<std::size_t>(i)];
                  const BatchEntry& b = entries[e.entry];
                  detail::SampleRow(tok, *rows.at(b.row).req, logits.subspan(e.first_row * V, e.rows * V), V,
                                    b.tokens.subspan(b.tokens.size() - e.rows + 1), out[static_cast<std::size_t>(i)]);
                });
    return out;
  }

  struct StepTokens {
    std::int64_t accepted = 0;  // drafts accepted
    std::int64_t sampled = 0;   // tokens streamed (SchedulerStats::generated_tokens)
  };
  // Each sampled row in row order: keeps its accepted drafts (and the hidden
  // state its drafter needs), then streams its tokens or ends on its error.
  StepTokens TakeOutcomes(const std::vector<BatchEntry>& entries, const std::vector<detail::SampleEntry>& to_sample,
                          std::vector<detail::RowOutcome>& out) {
    StepTokens made;
    for (std::size_t i = 0; i < to_sample.size(); ++i) {
      const detail::SampleEntry& e = to_sample[i];
      const BatchEntry& b = entries[e.entry];
      detail::Slot& s = rows.at(b.row);
      detail::RowOutcome& o = out[i];
      if (e.rows > 1) {
        detail::KeepAccepted(*state, s, b.row, e.fed_at, static_cast<int>(e.rows) - 1, o);
        made.accepted += o.accepted;
      }
      if (!o.tokens.empty() && opt.drafter != nullptr && opt.drafter->needs_target_hidden()) {
        // The row that chose the pending token.
        detail::KeepHidden(*state, static_cast<std::size_t>(model.config().n_embd), e.first_row + o.tokens.size() - 1,
                           *s.req);
      }
      if (o.error) {
        const std::string what = ErrorText(o.error);
        detail::LogLine(opt, "sampling failed: " + what);
        ForgetRow(b.row);
        detail::FailRow(shared, rows, s, what);
        continue;
      }
      for (detail::Sampled& t : o.tokens) {
        ++made.sampled;
        detail::StreamToken(tok, shared, rows, s, t);
        if (!s.req) break;  // finished
      }
    }
    return made;
  }

  // The step's counters (SchedulerStats) and its entry in the rate window.
  void RecordStep(Clock::time_point t0, Clock::time_point t1, const detail::DraftCounts& drafts, std::int64_t n_prefill,
                  const StepTokens& made) {
    std::lock_guard<std::mutex> lock(shared.mu);
    SchedulerStats& stats = shared.stats;
    ++stats.steps;
    stats.spec_verify_rows += static_cast<std::uint64_t>(drafts.verify_rows);
    stats.spec_drafted_tokens += static_cast<std::uint64_t>(drafts.drafted);
    stats.spec_accepted_tokens += static_cast<std::uint64_t>(made.accepted);
    stats.busy_seconds += std::chrono::duration<double>(t1 - t0).count();
    stats.prefill_tokens += static_cast<std::uint64_t>(n_prefill);
    stats.generated_tokens += static_cast<std::uint64_t>(made.sampled);
    shared.recent.emplace_back(t1, n_prefill, made.sampled);
    PruneRecent(t1);
  }

  // Drops step records older than the rate window (under mu).
  void PruneRecent(Clock::time_point now) {
    while (!shared.recent.empty() &&
           std::chrono::duration<double>(now - std::get<0>(shared.recent.front())).count() > kRecentWindowSeconds) {
      shared.recent.pop_front();
    }
  }

  // Cached positions and the KV bytes they fill (under mu).
  void UpdateUsage() {
    std::size_t used = 0;
    std::int64_t tokens = 0;
    for (int i = 0; i < opt.slots; ++i) {
      const std::int64_t len = state->length(i);
      tokens += len;
      for (const auto& [capacity, bytes] : layer_bytes)
        used += static_cast<std::size_t>(std::min(len, capacity)) * bytes;
    }
    shared.kv_bytes_used = used;
    shared.kv_tokens = tokens;
  }
};

Scheduler::Scheduler(const Model& model, const Tokenizer& tokenizer, ThreadPool* pool, const SchedulerOptions& options)
    : impl_(std::make_unique<Impl>(model, tokenizer, pool, options)) {}

Scheduler::~Scheduler() {
  CancelAll();
  Stop();
}

const SchedulerOptions& Scheduler::options() const { return impl_->opt; }

const DeviceSupport& Scheduler::support() const { return impl_->support; }

SubmitResult Scheduler::Submit(RequestOptions request, int waiting_upstream) {
  return impl_->admission.Submit(std::move(request), waiting_upstream);
}

bool Scheduler::Step() {
  if (impl_->running) throw Error("Scheduler::Step: the scheduler runs its own thread (Start); call Stop first");
  return impl_->Step();
}

void Scheduler::Start() {
  Impl& m = *impl_;
  if (m.running) return;
  m.stop.store(false);
  m.running = true;
  m.thread = std::thread([&m] {
    while (!m.stop.load()) {
      bool worked = false;
      try {
        worked = m.Step();
      } catch (const std::exception& e) {
        detail::LogLine(m.opt, std::string("scheduler step: ") + e.what());
      }
      if (!worked) {
        std::unique_lock<std::mutex> lock(m.shared.mu);
        m.shared.wake.wait_for(lock, std::chrono::milliseconds(50), [&] {
          return m.stop.load() || !m.shared.incoming.empty() || m.shared.cancel_all.load();
        });
      }
    }
  });
}

void Scheduler::Stop() {
  Impl& m = *impl_;
  if (!m.running) return;
  m.stop.store(true);
  m.shared.wake.notify_all();
  m.thread.join();
  m.running = false;
}

void Scheduler::Drain() { impl_->shared.draining.store(true); }

void Scheduler::CancelAll() {
  impl_->shared.cancel_all.store(true);
  impl_->shared.wake.notify_all();
}

bool Scheduler::Idle() const { return !impl_->HasWork(); }

bool Scheduler::WaitIdle(std::chrono::milliseconds timeout) const {
  const auto end = Clock::now() + timeout;
  while (!Idle()) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

SchedulerStats Scheduler::Stats() const {
  Impl& m = *impl_;
  SchedulerStats s;
  {
    std::lock_guard<std::mutex> lock(m.shared.mu);
    const auto now = Clock::now();
    m.PruneRecent(now);
    std::int64_t pre = 0, dec = 0;
    for (const auto& [t, p, d] : m.shared.recent) pre += p, dec += d;
    const double window = std::min(kRecentWindowSeconds, std::chrono::duration<double>(now - m.shared.start).count());
    s = m.shared.stats;
    if (window > 0) {
      s.recent_prefill_tokens_per_second = static_cast<double>(pre) / window;
      s.recent_decode_tokens_per_second = static_cast<double>(dec) / window;
    }
    s.kv_bytes_used = m.shared.kv_bytes_used;
    s.kv_tokens = m.shared.kv_tokens;
    s.active_slots = m.shared.active;
    s.queue_depth = m.shared.queued;
  }
  return s;
}

}  // namespace kvshare
