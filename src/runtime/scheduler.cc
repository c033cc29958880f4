// Continuous batching over one multi-row ModelState (kvshare/runtime/scheduler.h).
#include "kvshare/runtime/scheduler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "runtime/log_softmax.h"
#include "runtime/spec_round.h"
#include "runtime/text_release.h"

namespace kvshare {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxTopLogprobs = 20;
constexpr double kRecentWindowSeconds = 10.0;

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

// One request from Submit to its last event.
struct Request {
  Request(std::shared_ptr<Handle> h, RequestOptions o, const Tokenizer& tok, const SpeculativeOptions& spec,
          std::shared_ptr<const TokenTrie> trie)
      : handle(std::move(h)), opt(std::move(o)), sampler(opt.sampler), decoder(tok), releaser(opt.stop),
        draft_length(spec) {
    history = opt.prompt;
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
  detail::TextReleaser releaser;
  std::vector<std::int32_t> history;     // prompt + sampled (repetition penalty)
  std::vector<OutputToken> token_info;   // per sampled token: id and logprobs (text filled on release)
  std::int64_t prefilled = 0;            // prompt tokens in the cache
  std::int64_t cached = 0;               // of which reused from the prompt cache
  int generated = 0;
  std::int32_t next_token = -1;          // sampled, fed at the next step
  std::uint64_t admit_seq = 0;
  detail::DraftLength draft_length;      // speculative decoding: drafts per step
  std::vector<std::int32_t> feed;        // this step's decode tokens: next_token, then its drafts
  std::vector<float> hidden;             // the target's hidden state that chose next_token (drafters that need it)
  std::unique_ptr<GrammarMatcher> matcher;  // constrained decoding (opt.grammar)
  std::vector<float> masked;             // the logits row with the grammar's mask applied

  bool decoding() const { return prefilled == static_cast<std::int64_t>(opt.prompt.size()); }
};

struct Slot {
  std::vector<std::int32_t> tokens;  // what the row's cache holds
  std::unique_ptr<Request> req;      // null: free
  std::uint64_t last_used = 0;
};

std::size_t CommonPrefix(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// log-softmax of `logits` at `token`, and the k most likely tokens.
void Logprobs(std::span<const float> logits, std::int32_t token, int k, OutputToken& info) {
  const double log_z = detail::LogSumExp(logits);
  info.logprob = static_cast<float>(logits[static_cast<std::size_t>(token)] - log_z);
  for (const auto& [id, logit] : detail::TopLogits(logits, k)) {
    info.top.push_back({id, static_cast<float>(logit - log_z)});
  }
}

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

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "?";
}

struct Scheduler::Impl {
  Impl(const Model& m, const Tokenizer& t, ThreadPool* p, const SchedulerOptions& o)
      : model(m), tok(t), pool(p), opt(o) {
    CheckOptions(o);
    ModelStateOptions so;
    so.max_context = o.max_context;
    so.max_step = std::min(o.step_tokens, o.max_context);
    so.kv_dtype = o.kv_dtype;
    so.num_kv_shared_layers = o.num_kv_shared_layers;
    so.max_batch = o.slots;
    so.exact_rewind = o.exact_rewind;
    state = model.NewState(so);
    slots.resize(static_cast<std::size_t>(o.slots));
    for (const LayerMemory& l : state->kv_cache().Memory().layers) {
      if (!l.owns_cache || l.capacity == 0) continue;
      layer_bytes.push_back({l.capacity, l.bytes / static_cast<std::size_t>(o.slots) / static_cast<std::size_t>(l.capacity)});
    }
    stats.slots = o.slots;
    stats.kv_bytes = state->kv_bytes();
    start = Clock::now();
  }

  const Model& model;
  const Tokenizer& tok;
  ThreadPool* pool;
  SchedulerOptions opt;
  std::unique_ptr<ModelState> state;
  std::vector<Slot> slots;
  std::deque<std::unique_ptr<Request>> waiting;  // stepping thread only
  std::uint64_t admit_counter = 0;
  std::uint64_t use_clock = 0;
  std::vector<std::pair<std::int64_t, std::size_t>> layer_bytes;  // owning layers: capacity, bytes per position per row
  static constexpr std::size_t kNoToken = static_cast<std::size_t>(-1);
  std::int64_t sampled_this_step = 0;

  // Shared with other threads.
  mutable std::mutex mu;
  std::condition_variable wake;
  std::deque<std::unique_ptr<Request>> incoming;
  std::atomic<int> queued{0};   // incoming + waiting
  std::atomic<int> active{0};   // slots with a request
  std::atomic<bool> draining{false};
  std::atomic<bool> cancel_all{false};
  std::uint64_t next_id = 1;
  SchedulerStats stats;  // under mu
  std::size_t kv_bytes_used = 0;  // under mu
  std::int64_t kv_tokens = 0;     // under mu
  // Under mu: step end, prefill and sampled tokens of the steps of about the
  // last kRecentWindowSeconds (pruned at each step and each Stats call).
  std::deque<std::tuple<Clock::time_point, std::int64_t, std::int64_t>> recent;
  Clock::time_point start;

  std::thread thread;
  std::atomic<bool> stop{false};
  bool running = false;

  void Log(const std::string& line) const {
    if (opt.log) opt.log(line);
  }

  void Validate(const RequestOptions& r) const {
    if (r.prompt.empty()) throw Error("the prompt is empty: nothing to generate from");
    const std::int32_t v = model.config().n_vocab;
    for (std::size_t i = 0; i < r.prompt.size(); ++i) {
      if (r.prompt[i] < 0 || r.prompt[i] >= v) {
        throw Error("prompt token " + std::to_string(i) + " is " + std::to_string(r.prompt[i]) +
                    ", outside the vocabulary [0, " + std::to_string(v) + ")");
      }
    }
    if (r.max_tokens < 1) throw Error("max_tokens must be >= 1, got " + std::to_string(r.max_tokens));
    const std::int64_t need = static_cast<std::int64_t>(r.prompt.size()) + r.max_tokens;
    if (need > opt.max_context) {
      throw Error("prompt of " + std::to_string(r.prompt.size()) + " tokens + max_tokens " + std::to_string(r.max_tokens) +
                  " = " + std::to_string(need) + " exceeds the context of " + std::to_string(opt.max_context) +
                  " tokens per slot");
    }
    if (r.top_logprobs < -1 || r.top_logprobs > kMaxTopLogprobs) {
      throw Error("top_logprobs must be in [-1, 20], got " + std::to_string(r.top_logprobs));
    }
    for (const std::string& s : r.stop) {
      if (s.empty()) throw Error("stop strings must not be empty");
    }
    Sampler check(r.sampler);  // throws naming a bad sampler option
    for (const auto& [id, bias] : r.logit_bias) {
      if (id < 0 || id >= v || !std::isfinite(bias)) {
        throw Error("logit_bias: token " + std::to_string(id) + " (bias " + std::to_string(bias) +
                    ") must be in the vocabulary [0, " + std::to_string(v) + ") with a finite bias");
      }
    }
    if (r.grammar && r.ignore_eos) {
      throw Error("ignore_eos cannot be combined with a grammar: generation must end when the document is complete");
    }
  }

  // The vocabulary's trie, built by the first request with a grammar.
  std::shared_ptr<const TokenTrie> Trie() {
    std::call_once(trie_once, [&] { trie = TokenTrie::FromTokenizer(tok); });
    return trie;
  }
  std::once_flag trie_once;
  std::shared_ptr<const TokenTrie> trie;

  SubmitResult Submit(RequestOptions r, int waiting_upstream) {
    Validate(r);
    std::shared_ptr<const TokenTrie> vocab = r.grammar ? Trie() : nullptr;
    std::unique_lock<std::mutex> lock(mu);
    if (draining.load()) {
      ++stats.requests_rejected;
      return {SubmitStatus::kDraining, nullptr};
    }
    if (queued.load() + std::max(0, waiting_upstream) >= opt.max_queue + FreeSlotsHint()) {
      ++stats.requests_rejected;
      return {SubmitStatus::kQueueFull, nullptr};
    }
    auto handle = std::make_shared<Handle>(next_id++);
    incoming.push_back(std::make_unique<Request>(handle, std::move(r), tok, opt.speculative, std::move(vocab)));
    queued.fetch_add(1);
    ++stats.requests_accepted;
    lock.unlock();
    wake.notify_all();
    return {SubmitStatus::kAccepted, handle};
  }

  // Slots that will take queued requests at the next step: a request only
  // waits in the queue (and counts against max_queue) beyond them.
  int FreeSlotsHint() const { return opt.slots - active.load(); }

  bool HasWork() const { return queued.load() > 0 || active.load() > 0; }

  // Moves released pieces into e (text and tokens). A piece of kNoToken (a
  // decoder flush) adds its text to the last token of e, if any.
  void Emit(Request& r, std::vector<detail::ReleasedPiece>& pieces, RequestEvent& e) {
    for (detail::ReleasedPiece& p : pieces) {
      if (p.token == kNoToken) {
        e.text += p.text;
        if (!e.tokens.empty()) e.tokens.back().text += p.text;
        continue;
      }
      OutputToken& t = r.token_info[p.token];
      t.text = std::move(p.text);
      e.text += t.text;
      e.tokens.push_back(std::move(t));
    }
    pieces.clear();
  }

  // Ends r (in a slot or not) with its last event.
  void Finish(Request& r, FinishReason reason, std::string detail, RequestEvent e, bool error = false) {
    e.finished = true;
    e.reason = reason;
    e.detail = std::move(detail);
    e.error = error;
    e.usage = {static_cast<std::int64_t>(r.opt.prompt.size()), r.generated, r.cached};
    r.handle->Push(std::move(e));
    std::lock_guard<std::mutex> lock(mu);
    ++stats.requests_finished;
    if (reason == FinishReason::kAbort) ++stats.requests_cancelled;
  }

  void TakeIncoming() {
    std::lock_guard<std::mutex> lock(mu);
    while (!incoming.empty()) {
      waiting.push_back(std::move(incoming.front()));
      incoming.pop_front();
    }
  }

  void RemoveCancelled() {
    const bool all = cancel_all.exchange(false);
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (all || (*it)->handle->cancelled()) {
        Finish(**it, FinishReason::kAbort, "cancelled", {});
        it = waiting.erase(it);
        queued.fetch_sub(1);
      } else {
        ++it;
      }
    }
    for (Slot& s : slots) {
      if (s.req && (all || s.req->handle->cancelled())) {
        Finish(Free(s), FinishReason::kAbort, "cancelled", {});
      }
    }
  }

  // Frees s and hands its request over for the last event: a client that
  // has its final event finds the slot free.
  Request& Free(Slot& s) {
    finished_.push_back(std::move(s.req));
    s.last_used = ++use_clock;
    active.fetch_sub(1);
    return *finished_.back();
  }
  std::vector<std::unique_ptr<Request>> finished_;  // freed this step, dropped at its end

  // The prompt-cache choice for r among free slots (see the header).
  void Admit() {
    while (!waiting.empty()) {
      int best = -1;
      std::size_t best_eff = 0, best_raw = 0;
      int raw_slot = -1;
      std::unique_ptr<Request>& r = waiting.front();
      const std::vector<std::int32_t>& prompt = r->opt.prompt;
      for (int i = 0; i < opt.slots; ++i) {
        Slot& s = slots[static_cast<std::size_t>(i)];
        if (s.req) continue;
        std::size_t raw = opt.prompt_cache ? std::min(CommonPrefix(s.tokens, prompt), prompt.size() - 1) : 0;
        std::size_t eff = raw;
        if (eff > 0 && eff < s.tokens.size() && eff < static_cast<std::size_t>(state->kv_cache().OldestRewindLength(i))) {
          eff = 0;
        }
        if (raw > best_raw) best_raw = raw, raw_slot = i;
        const bool better = best < 0 || eff > best_eff ||
                            (eff == best_eff && s.last_used < slots[static_cast<std::size_t>(best)].last_used);
        if (better) best = i, best_eff = eff;
      }
      if (best < 0) return;  // no free slot
      std::string fallback;
      if (best_raw > best_eff) {
        const Slot& rs = slots[static_cast<std::size_t>(raw_slot)];
        const std::int64_t oldest = state->kv_cache().OldestRewindLength(raw_slot);
        fallback = "prompt cache: request " + std::to_string(r->handle->id()) + " shares " + std::to_string(best_raw) +
                   " prompt tokens with slot " + std::to_string(raw_slot) + " (" + std::to_string(rs.tokens.size()) +
                   " cached), but its sliding-window rings no longer hold the positions needed to resume there " +
                   "(they can rewind to " + std::to_string(oldest) + " tokens at the least); prefilling " +
                   std::to_string(prompt.size() - best_eff) + " of " + std::to_string(prompt.size()) +
                   " prompt tokens instead. --swa-full (exact_rewind) keeps full-length sliding caches for exact reuse";
      }
      Slot& s = slots[static_cast<std::size_t>(best)];
      if (best_eff < s.tokens.size()) {
        try {
          if (best_eff == 0) {
            state->Reset(best);
          } else {
            state->Rewind(best, static_cast<std::int64_t>(best_eff));
          }
        } catch (const Error& e) {
          Log(std::string("prompt cache: rewind failed, re-prefilling: ") + e.what());
          state->Reset(best);
          best_eff = 0;
        }
        s.tokens.resize(best_eff);
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!fallback.empty()) ++stats.prompt_cache_fallbacks;
        if (best_eff > 0) {
          ++stats.prompt_cache_hits;
        } else {
          ++stats.prompt_cache_misses;
        }
        stats.prompt_tokens += prompt.size();
        stats.cached_prompt_tokens += best_eff;
      }
      if (!fallback.empty()) Log(fallback);
      r->prefilled = r->cached = static_cast<std::int64_t>(best_eff);
      r->admit_seq = ++admit_counter;
      s.req = std::move(r);
      s.last_used = ++use_clock;
      waiting.pop_front();
      queued.fetch_sub(1);
      active.fetch_add(1);
    }
  }

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

  // Whether t ends r when r has made `made` tokens with t (max_tokens, or an
  // end token unless ignore_eos; stop strings are found when the text is
  // released, in Emit).
  bool Ends(const Request& r, std::int32_t t, int made) const {
    if (made >= r.opt.max_tokens) return true;
    if (r.opt.ignore_eos) return false;
    return tok.IsEndOfGeneration(t) ||
           std::find(r.opt.stop_tokens.begin(), r.opt.stop_tokens.end(), t) != r.opt.stop_tokens.end();
  }

  // r's tokens from its logits rows: [1 + drafts, V], the pending token's
  // row then each draft's (thread-safe across slots: each request has its
  // own sampler and history, which the tokens are appended to).
  void SampleRow(Request& r, std::span<const float> rows, std::size_t V, std::span<const std::int32_t> drafts,
                 RowOutcome& out) const {
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
      const detail::Accepted a = detail::AcceptDrafts(
          r.sampler, sample_rows, V, drafts, r.history, [&](std::int32_t t, std::span<const float> row) {
            Sampled& s = out.tokens.emplace_back();
            s.token = s.info.token = t;
            const bool own = r.matcher || !r.opt.logit_bias.empty();  // row is the masked copy: use the model's
            if (r.opt.top_logprobs >= 0) Logprobs(own ? rows.subspan(0, V) : row, t, r.opt.top_logprobs, s.info);
            if (r.matcher && !r.matcher->AcceptToken(t)) {
              throw Error("constrained decoding: sampled token " + std::to_string(t) + " outside the grammar's mask");
            }
            return !Ends(r, t, r.generated + static_cast<int>(out.tokens.size()));
          });
      out.accepted = a.accepted;
    } catch (...) {
      out.error = std::current_exception();
    }
  }

  // Streams r's sampled token; frees the slot when r ends.
  void Emit(Slot& s, Sampled& sampled) {
    Request& r = *s.req;
    const std::int32_t t = sampled.token;
    ++r.generated;
    ++sampled_this_step;
    RequestEvent e;
    std::vector<detail::ReleasedPiece> pieces;
    const bool stop_token = std::find(r.opt.stop_tokens.begin(), r.opt.stop_tokens.end(), t) != r.opt.stop_tokens.end();
    if (!r.opt.ignore_eos && (tok.IsEndOfGeneration(t) || stop_token)) {
      // The end token adds no text; bytes of an unfinished character become U+FFFD.
      r.releaser.Add(kNoToken, r.decoder.Flush(), pieces);
      r.releaser.Flush(pieces);
      Emit(r, pieces, e);
      Free(s);
      Finish(r, FinishReason::kStop,
             t == tok.eos_id() ? "eos" : t == tok.end_of_turn_id() ? "end_of_turn" : "stop token", std::move(e));
      return;
    }
    r.token_info.push_back(std::move(sampled.info));
    r.releaser.Add(r.token_info.size() - 1, r.decoder.Feed(t), pieces);
    if (!r.releaser.stopped() && r.generated >= r.opt.max_tokens) {
      r.releaser.Add(kNoToken, r.decoder.Flush(), pieces);
      r.releaser.Flush(pieces);
      Emit(r, pieces, e);
      Free(s);
      Finish(r, r.releaser.stopped() ? FinishReason::kStop : FinishReason::kLength,
             r.releaser.stopped() ? "stop string" : "max_tokens", std::move(e));
      return;
    }
    Emit(r, pieces, e);
    if (r.releaser.stopped()) {
      Free(s);
      Finish(r, FinishReason::kStop, "stop string", std::move(e));
      return;
    }
    r.next_token = t;
    if (!e.tokens.empty() || !e.text.empty()) r.handle->Push(std::move(e));
  }

  // Cached positions and the KV bytes they fill (under mu).
  void UpdateUsage() {
    std::size_t used = 0;
    std::int64_t tokens = 0;
    for (int i = 0; i < opt.slots; ++i) {
      const std::int64_t len = state->length(i);
      tokens += len;
      for (const auto& [capacity, bytes] : layer_bytes) used += static_cast<std::size_t>(std::min(len, capacity)) * bytes;
    }
    kv_bytes_used = used;
    kv_tokens = tokens;
  }

  bool Step() {
    const bool worked = StepInner();
    finished_.clear();
    std::lock_guard<std::mutex> lock(mu);
    UpdateUsage();
    return worked;
  }

  bool StepInner() {
    TakeIncoming();
    RemoveCancelled();
    Admit();
    sampled_this_step = 0;
    // Decode rows first, then prefill chunks in admission order.
    std::vector<BatchEntry> entries;
    std::vector<int> prefill_rows;
    std::int64_t n_decode = 0, n_prefill = 0;
    std::vector<int> decode_rows;
    for (int i = 0; i < opt.slots; ++i) {
      Slot& s = slots[static_cast<std::size_t>(i)];
      if (!s.req) continue;
      if (s.req->decoding()) {
        decode_rows.push_back(i);
        s.req->feed.assign(1, s.req->next_token);
      } else {
        prefill_rows.push_back(i);
      }
    }
    const auto t0 = Clock::now();
    std::int64_t n_drafted = 0, n_verify_rows = 0;
    if (opt.drafter != nullptr) n_drafted = Draft(decode_rows, n_verify_rows);
    for (int i : decode_rows) {
      Request& r = *slots[static_cast<std::size_t>(i)].req;
      entries.push_back({.row = i, .tokens = r.feed, .num_logits = static_cast<std::int64_t>(r.feed.size())});
      n_decode += static_cast<std::int64_t>(r.feed.size());
    }
    std::sort(prefill_rows.begin(), prefill_rows.end(), [&](int a, int b) {
      return slots[static_cast<std::size_t>(a)].req->admit_seq < slots[static_cast<std::size_t>(b)].req->admit_seq;
    });
    std::int64_t budget = opt.step_tokens - n_decode;
    for (int i : prefill_rows) {
      if (budget <= 0) break;
      Request& r = *slots[static_cast<std::size_t>(i)].req;
      const std::int64_t n = std::min<std::int64_t>(budget, static_cast<std::int64_t>(r.opt.prompt.size()) - r.prefilled);
      entries.push_back({.row = i,
                         .tokens = std::span<const std::int32_t>(r.opt.prompt).subspan(static_cast<std::size_t>(r.prefilled),
                                                                                        static_cast<std::size_t>(n))});
      budget -= n;
      n_prefill += n;
    }
    if (entries.empty()) return false;

    std::span<const float> logits;
    try {
      logits = model.ForwardBatch(*state, entries, pool);
    } catch (const std::exception& ex) {
      // Not expected once Submit's checks pass: the rows of this step end.
      Log(std::string("step failed: ") + ex.what());
      for (const BatchEntry& b : entries) {
        Slot& s = slots[static_cast<std::size_t>(b.row)];
        s.tokens.resize(static_cast<std::size_t>(state->length(b.row)));
        Finish(Free(s), FinishReason::kAbort, std::string("internal error: ") + ex.what(), {}, true);
      }
      return true;
    }
    const std::size_t V = static_cast<std::size_t>(model.config().n_vocab);
    if (opt.on_step) Trace(entries, logits);
    std::vector<std::size_t> to_sample;  // entries whose row samples a token now
    std::vector<std::size_t> first_row;  // per entry: its first row in `logits`
    std::vector<std::int64_t> fed_at;    // per entry: the row's length before the step
    std::size_t at = 0;
    for (std::size_t k = 0; k < entries.size(); ++k) {
      const BatchEntry& b = entries[k];
      first_row.push_back(at);
      at += static_cast<std::size_t>(b.num_logits);
      Slot& s = slots[static_cast<std::size_t>(b.row)];
      fed_at.push_back(static_cast<std::int64_t>(s.tokens.size()));
      s.tokens.insert(s.tokens.end(), b.tokens.begin(), b.tokens.end());
      Request& r = *s.req;
      if (!r.decoding()) r.prefilled += static_cast<std::int64_t>(b.tokens.size());
      if (r.decoding()) to_sample.push_back(k);
    }
    // Rows sample (or accept their drafts) in parallel, each a pass or more
    // over n_vocab logits per row, then stream in row order.
    std::vector<RowOutcome> out(to_sample.size());
    ParallelFor(to_sample.size() > 1 ? pool : nullptr, static_cast<std::int64_t>(to_sample.size()), [&](std::int64_t i) {
      const std::size_t k = to_sample[static_cast<std::size_t>(i)];
      const BatchEntry& b = entries[k];
      SampleRow(*slots[static_cast<std::size_t>(b.row)].req,
                logits.subspan(first_row[k] * V, static_cast<std::size_t>(b.num_logits) * V), V,
                b.tokens.subspan(b.tokens.size() - static_cast<std::size_t>(b.num_logits) + 1), out[static_cast<std::size_t>(i)]);
    });
    std::int64_t n_accepted = 0;
    for (std::size_t i = 0; i < to_sample.size(); ++i) {
      const BatchEntry& b = entries[to_sample[i]];
      Slot& s = slots[static_cast<std::size_t>(b.row)];
      RowOutcome& o = out[i];
      if (b.num_logits > 1) {
        // Keep the pending token and the accepted drafts before the last
        // token (pending now, as after a one-token step).
        const std::int64_t keep = fed_at[to_sample[i]] + static_cast<std::int64_t>(std::max<std::size_t>(1, o.tokens.size()));
        state->Rewind(b.row, keep);
        s.tokens.resize(static_cast<std::size_t>(keep));
        s.req->draft_length.Observe(static_cast<int>(b.num_logits) - 1, o.accepted);
        n_accepted += o.accepted;
      }
      if (!o.tokens.empty() && opt.drafter != nullptr && opt.drafter->needs_target_hidden()) {
        const std::span<const float> h = state->hidden();
        const std::size_t E = static_cast<std::size_t>(model.config().n_embd);
        const std::size_t row = first_row[to_sample[i]] + o.tokens.size() - 1;  // chose the pending token
        if (h.size() >= (row + 1) * E) {
          s.req->hidden.assign(h.begin() + static_cast<std::ptrdiff_t>(row * E),
                               h.begin() + static_cast<std::ptrdiff_t>((row + 1) * E));
        }
      }
      if (o.error) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(o.error);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        Log("sampling failed: " + what);
        Finish(Free(s), FinishReason::kAbort, "internal error: " + what, {}, true);
        continue;
      }
      for (Sampled& t : o.tokens) {
        Emit(s, t);
        if (!s.req) break;  // finished
      }
    }
    const auto t1 = Clock::now();
    std::lock_guard<std::mutex> lock(mu);
    ++stats.steps;
    stats.spec_verify_rows += static_cast<std::uint64_t>(n_verify_rows);
    stats.spec_drafted_tokens += static_cast<std::uint64_t>(n_drafted);
    stats.spec_accepted_tokens += static_cast<std::uint64_t>(n_accepted);
    stats.busy_seconds += std::chrono::duration<double>(t1 - t0).count();
    stats.prefill_tokens += static_cast<std::uint64_t>(n_prefill);
    stats.generated_tokens += static_cast<std::uint64_t>(sampled_this_step);
    recent.emplace_back(t1, n_prefill, sampled_this_step);
    PruneRecent(t1);
    return true;
  }

  // Drops step records older than the rate window (under mu).
  void PruneRecent(Clock::time_point now) {
    while (!recent.empty() && std::chrono::duration<double>(now - std::get<0>(recent.front())).count() > kRecentWindowSeconds) {
      recent.pop_front();
    }
  }

  // Drafts for the decoding rows (appended to each request's feed), within
  // the step's token budget and, with adaptive drafting, where they pay
  // (AllocateDrafts). Returns the drafts in all; counts the rows with any.
  std::int64_t Draft(const std::vector<int>& rows, std::int64_t& verify_rows) {
    const std::int64_t max_step = state->kv_cache().Options().max_step;
    std::int64_t budget = opt.step_tokens - static_cast<std::int64_t>(rows.size());
    std::vector<detail::RowDrafts> bids;
    std::vector<std::int32_t> seq;
    for (int i : rows) {
      Slot& s = slots[static_cast<std::size_t>(i)];
      Request& r = *s.req;
      std::int64_t k = 0;
      if (r.opt.speculative && !r.matcher && r.opt.logit_bias.empty()) {
        k = std::min<std::int64_t>({r.draft_length.Next(), r.opt.max_tokens - r.generated - 1, max_step - 1,
                                    state->max_context() - state->length(i) - 1, budget});
      }
      if (k > 0) {
        seq.assign(s.tokens.begin(), s.tokens.end());
        seq.push_back(r.next_token);
        const DraftContext ctx{.row = i, .tokens = seq, .target_state = state.get(), .target_hidden = r.hidden};
        opt.drafter->Draft(ctx, static_cast<int>(k), r.feed);
        r.feed.resize(std::min<std::size_t>(r.feed.size(), static_cast<std::size_t>(k + 1)));
      }
      bids.push_back({.alpha = r.draft_length.alpha(), .available = static_cast<int>(r.feed.size()) - 1});
    }
    if (opt.speculative.adaptive) {
      detail::AllocateDrafts(bids, opt.speculative.verify_cost, budget);
    } else {
      for (detail::RowDrafts& b : bids) {
        b.keep = static_cast<int>(std::min<std::int64_t>(b.available, budget));
        budget -= b.keep;
      }
    }
    std::int64_t drafted = 0;
    for (std::size_t j = 0; j < rows.size(); ++j) {
      Request& r = *slots[static_cast<std::size_t>(rows[j])].req;
      r.feed.resize(1 + static_cast<std::size_t>(bids[j].keep));
      drafted += bids[j].keep;
      if (bids[j].keep > 0) ++verify_rows;
    }
    return drafted;
  }

  // SchedulerOptions::on_step for a step's entries (before the rows' requests
  // account for them).
  void Trace(const std::vector<BatchEntry>& entries, std::span<const float> logits) {
    StepTrace t;
    t.logits = logits;
    for (const BatchEntry& b : entries) {
      const Request& r = *slots[static_cast<std::size_t>(b.row)].req;
      const bool decode = r.decoding();
      const std::int64_t n = static_cast<std::int64_t>(b.tokens.size());
      t.entries.push_back({.slot = b.row,
                           .request = r.handle->id(),
                           .tokens = static_cast<int>(n),
                           .decode = decode,
                           .sampled = decode || r.prefilled + n == static_cast<std::int64_t>(r.opt.prompt.size()),
                           .logits_rows = static_cast<int>(b.num_logits),
                           .position = state->length(b.row) - n});
    }
    opt.on_step(t);
  }
};

Scheduler::Scheduler(const Model& model, const Tokenizer& tokenizer, ThreadPool* pool, const SchedulerOptions& options)
    : impl_(std::make_unique<Impl>(model, tokenizer, pool, options)) {}

Scheduler::~Scheduler() {
  CancelAll();
  Stop();
}

const SchedulerOptions& Scheduler::options() const { return impl_->opt; }

SubmitResult Scheduler::Submit(RequestOptions request, int waiting_upstream) {
  return impl_->Submit(std::move(request), waiting_upstream);
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
        m.Log(std::string("scheduler step: ") + e.what());
      }
      if (!worked) {
        std::unique_lock<std::mutex> lock(m.mu);
        m.wake.wait_for(lock, std::chrono::milliseconds(50),
                        [&] { return m.stop.load() || !m.incoming.empty() || m.cancel_all.load(); });
      }
    }
  });
}

void Scheduler::Stop() {
  Impl& m = *impl_;
  if (!m.running) return;
  m.stop.store(true);
  m.wake.notify_all();
  m.thread.join();
  m.running = false;
}

void Scheduler::Drain() { impl_->draining.store(true); }

void Scheduler::CancelAll() {
  impl_->cancel_all.store(true);
  impl_->wake.notify_all();
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
    std::lock_guard<std::mutex> lock(m.mu);
    const auto now = Clock::now();
    m.PruneRecent(now);
    std::int64_t pre = 0, dec = 0;
    for (const auto& [t, p, d] : m.recent) pre += p, dec += d;
    const double window = std::min(kRecentWindowSeconds, std::chrono::duration<double>(now - m.start).count());
    s = m.stats;
    if (window > 0) {
      s.recent_prefill_tokens_per_second = static_cast<double>(pre) / window;
      s.recent_decode_tokens_per_second = static_cast<double>(dec) / window;
    }
    s.kv_bytes_used = m.kv_bytes_used;
    s.kv_tokens = m.kv_tokens;
  }
  s.active_slots = m.active.load();
  s.queue_depth = m.queued.load();
  return s;
}

}  // namespace kvshare
