// Admission of requests to the scheduler's slots (scheduler/admission.h).
#include "runtime/scheduler/admission.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kvshare/common/error.h"
#include "runtime/scheduler/completion.h"
#include "runtime/scheduler/image_spans.h"

namespace kvshare::detail {
namespace {

constexpr int kMaxTopLogprobs = 20;

std::size_t CommonPrefix(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// The free slot a prompt takes: the one it can reuse the most cached tokens
// of, the least recently used among equals.
struct SlotChoice {
  int slot = -1;          // -1: no slot is free
  std::size_t reuse = 0;  // cached prompt tokens the slot resumes after
  // The free slot sharing the longest prefix with the prompt, and that
  // prefix: more than `reuse` when a sliding ring can no longer rewind to it.
  int raw_slot = -1;
  std::size_t raw = 0;
};

SlotChoice ChooseSlot(const std::vector<Slot>& slots, const KvCache& cache, const std::vector<std::int32_t>& prompt,
                      const std::vector<CachedSpan>& spans, bool prompt_cache) {
  SlotChoice c;
  for (int i = 0; i < static_cast<int>(slots.size()); ++i) {
    const Slot& s = slots[static_cast<std::size_t>(i)];
    if (s.req) continue;
    // At least the last prompt token is prefilled: its logits are sampled.
    // Images: the placeholder tokens match whatever the image; the keys decide.
    std::size_t raw =
        prompt_cache ? ClampReuse(std::min(CommonPrefix(s.tokens, prompt), prompt.size() - 1), s.spans, spans) : 0;
    std::size_t eff = raw;
    if (eff > 0 && eff < s.tokens.size() && eff < static_cast<std::size_t>(cache.OldestRewindLength(i))) {
      eff = 0;
    }
    if (raw > c.raw) c.raw = raw, c.raw_slot = i;
    const bool better = c.slot < 0 || eff > c.reuse ||
                        (eff == c.reuse && s.last_used < slots[static_cast<std::size_t>(c.slot)].last_used);
    if (better) c.slot = i, c.reuse = eff;
  }
  return c;
}

// The log line of a prefix lost to a sliding ring (c.raw > c.reuse).
std::string FallbackNote(const Request& r, const SlotChoice& c, const Slot& raw_slot, std::int64_t oldest) {
  const std::vector<std::int32_t>& prompt = r.opt.prompt;
  return "prompt cache: request " + std::to_string(r.handle->id()) + " shares " + std::to_string(c.raw) +
         " prompt tokens with slot " + std::to_string(c.raw_slot) + " (" + std::to_string(raw_slot.tokens.size()) +
         " cached), but its sliding-window rings no longer hold the positions needed to resume there " +
         "(they can rewind to " + std::to_string(oldest) + " tokens at the least); prefilling " +
         std::to_string(prompt.size() - c.reuse) + " of " + std::to_string(prompt.size()) +
         " prompt tokens instead. --swa-full (exact_rewind) keeps full-length sliding caches for exact reuse";
}

// Cuts row `row` of `state` (and s's tokens) back to its first `reuse`
// tokens; returns the tokens kept (0 when the rewind failed and the row was
// reset instead).
std::size_t ResumeAt(ModelState& state, const SchedulerOptions& opt, Slot& s, int row, std::size_t reuse) {
  if (reuse < s.tokens.size()) {
    try {
      if (reuse == 0) {
        state.Reset(row);
      } else {
        state.Rewind(row, static_cast<std::int64_t>(reuse));
      }
    } catch (const Error& e) {
      LogLine(opt, std::string("prompt cache: rewind failed, re-prefilling: ") + e.what());
      state.Reset(row);
      reuse = 0;
    }
    s.tokens.resize(reuse);
    KeepSpansWithin(s.spans, static_cast<std::int64_t>(reuse));
  }
  return reuse;
}

}  // namespace

void ValidateRequest(const RequestOptions& r, std::int32_t n_vocab, int max_context, std::int64_t max_span,
                     const DeviceSupport& support) {
  if (r.prompt.empty()) throw Error("the prompt is empty: nothing to generate from");
  if (!r.embeddings.empty() && !support.media_inputs) {
    throw Error(DeviceRefusal(support.device, "a prompt with images or audio (embedding spans)",
                              "send text only, or serve the model on the CPU"));
  }
  const std::int32_t v = n_vocab;
  for (std::size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= v) {
      throw Error("prompt token " + std::to_string(i) + " is " + std::to_string(r.prompt[i]) +
                  ", outside the vocabulary [0, " + std::to_string(v) + ")");
    }
  }
  if (r.max_tokens < 1) throw Error("max_tokens must be >= 1, got " + std::to_string(r.max_tokens));
  const std::int64_t need = static_cast<std::int64_t>(r.prompt.size()) + r.max_tokens;
  if (need > max_context) {
    throw Error("prompt of " + std::to_string(r.prompt.size()) + " tokens + max_tokens " +
                std::to_string(r.max_tokens) + " = " + std::to_string(need) + " exceeds the context of " +
                std::to_string(max_context) + " tokens per slot");
  }
  if (r.top_logprobs < -1 || r.top_logprobs > kMaxTopLogprobs) {
    throw Error("top_logprobs must be in [-1, 20], got " + std::to_string(r.top_logprobs));
  }
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > kMaxTopLogprobs) {
    throw Error("prompt_logprobs must be in [-1, 20], got " + std::to_string(r.prompt_logprobs));
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
  ValidateEmbeddings(r, max_span);
}

int Admission::LeaderRow(const Request& r) const {
  if (r.opt.prefill_from == 0 || !r.opt.embeddings.empty() || r.opt.prompt_logprobs >= 0 || !copies_rows_) return -1;
  for (int i = 0; i < static_cast<int>(rows_.slots.size()); ++i) {
    const Slot& s = rows_.at(i);
    if (s.req && s.req->handle->id() == r.opt.prefill_from && s.req->opt.prompt == r.opt.prompt) {
      return s.req->decoding() ? i : kLeaderPrefilling;
    }
  }
  return -1;  // not in a slot (finished, cancelled, or another prompt): prefill as any request
}

bool Admission::CopyLeader(ModelState& state, std::unique_ptr<Request>& r, int leader, int slot) {
  Slot& s = rows_.at(slot);
  const Slot& from = rows_.at(leader);
  if (!state.CopyRow(leader, slot)) {
    copies_rows_ = false;  // the state never will (the GPU model's): choices stop waiting for a leader
    return false;
  }
  s.tokens = from.tokens;
  s.spans.clear();
  // The last prompt token is fed again: its logits are this request's to sample.
  const std::size_t reuse = ResumeAt(state, opt_, s, slot, r->opt.prompt.size() - 1);
  Seat(std::move(r), s, reuse, /*fallback=*/false);
  return true;
}

void Admission::Seat(std::unique_ptr<Request> r, Slot& s, std::size_t reuse, bool fallback) {
  {
    // One step for readers: the request moves from the queue to a slot with
    // its admission's counters (SchedulerShared).
    std::lock_guard<std::mutex> lock(shared_.mu);
    SchedulerStats& stats = shared_.stats;
    if (fallback) ++stats.prompt_cache_fallbacks;
    ++(reuse > 0 ? stats.prompt_cache_hits : stats.prompt_cache_misses);
    stats.prompt_tokens += r->opt.prompt.size();
    stats.cached_prompt_tokens += reuse;
    --shared_.queued;
    ++shared_.active;
  }
  r->prefilled = r->cached = static_cast<std::int64_t>(reuse);
  r->admit_seq = ++admit_counter_;
  s.req = std::move(r);
  s.last_used = ++rows_.use_clock;
  waiting_.pop_front();
}

std::shared_ptr<const TokenTrie> Admission::Trie() {
  std::call_once(trie_once_, [&] { trie_ = TokenTrie::FromTokenizer(tok_); });
  return trie_;
}

SubmitResult Admission::Submit(RequestOptions r, int waiting_upstream) {
  ValidateRequest(r, n_vocab_, opt_.max_context, opt_.step_tokens - opt_.slots + 1, support_);
  std::shared_ptr<const TokenTrie> vocab = r.grammar ? Trie() : nullptr;
  std::unique_lock<std::mutex> lock(shared_.mu);
  if (shared_.draining.load()) {
    ++shared_.stats.requests_rejected;
    return {SubmitStatus::kDraining, nullptr};
  }
  // Slots that will take queued requests at the next step: a request only
  // waits in the queue (and counts against max_queue) beyond them.
  const int free_slots = opt_.slots - shared_.active;
  if (shared_.queued + std::max(0, waiting_upstream) >= opt_.max_queue + free_slots) {
    ++shared_.stats.requests_rejected;
    return {SubmitStatus::kQueueFull, nullptr};
  }
  auto handle = std::make_shared<Handle>(shared_.next_id++);
  shared_.incoming.push_back(std::make_unique<Request>(handle, std::move(r), tok_, opt_.speculative, std::move(vocab)));
  ++shared_.queued;
  ++shared_.stats.requests_accepted;
  lock.unlock();
  shared_.wake.notify_all();
  return {SubmitStatus::kAccepted, handle};
}

void Admission::TakeIncoming() {
  std::lock_guard<std::mutex> lock(shared_.mu);
  while (!shared_.incoming.empty()) {
    waiting_.push_back(std::move(shared_.incoming.front()));
    shared_.incoming.pop_front();
  }
}

void Admission::RemoveCancelled() {
  const bool all = shared_.cancel_all.exchange(false);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (all || (*it)->handle->cancelled()) {
      Finish(shared_, **it, FinishReason::kAbort, "cancelled", {});
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (Slot& s : rows_.slots) {
    if (s.req && (all || s.req->handle->cancelled())) {
      Finish(shared_, rows_.Free(s), FinishReason::kAbort, "cancelled", {});
    }
  }
}

// The prompt-cache choice for each waiting request among free slots (see
// kvshare/runtime/scheduler.h).
void Admission::Admit(ModelState& state) {
  while (!waiting_.empty()) {
    std::unique_ptr<Request>& r = waiting_.front();
    const std::vector<std::int32_t>& prompt = r->opt.prompt;
    std::vector<CachedSpan> spans = SpansOf(r->opt);
    const int leader = LeaderRow(*r);
    if (leader == kLeaderPrefilling) return;  // admission order: the line waits a step or two
    // Prompt logprobs need every position's logits: nothing cached is reused.
    const SlotChoice c =
        ChooseSlot(rows_.slots, state.kv_cache(), prompt, spans, opt_.prompt_cache && r->opt.prompt_logprobs < 0);
    if (c.slot < 0) return;  // no free slot
    if (leader >= 0 && CopyLeader(state, r, leader, c.slot)) continue;
    std::string fallback;
    if (c.raw > c.reuse) {
      fallback = FallbackNote(*r, c, rows_.at(c.raw_slot), state.kv_cache().OldestRewindLength(c.raw_slot));
    }
    Slot& s = rows_.at(c.slot);
    const std::size_t reuse = ResumeAt(state, opt_, s, c.slot, c.reuse);
    if (!fallback.empty()) LogLine(opt_, fallback);
    s.spans = std::move(spans);  // those within the reused prefix are the cached ones
    Seat(std::move(r), s, reuse, !fallback.empty());
  }
}

}  // namespace kvshare::detail
