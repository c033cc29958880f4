// kvshare/runtime/scheduler.h — continuous batching of many generation requests over
// one multi-row ModelState (runtime layer; no HTTP here: server/ builds on it).
//
// Slots are the rows of the state's KV cache (SchedulerOptions::slots). Each
// step (Step(), or the scheduler's own thread after Start()):
//   1. cancelled requests leave (their slot is free before this step runs);
//   2. waiting requests take free slots in arrival order. Prompt caching: a
//      request takes the free slot whose cached tokens share the longest
//      prefix with its prompt, rewinds that row to the common prefix and
//      prefills only the rest (at least its last prompt token, whose logits
//      it samples from). With images (RequestOptions::embeddings) the
//      prefix also needs equal image keys and never ends inside an image.
//      Sliding layers on window rings can only rewind while
//      the ring still holds the positions needed (KvCache::Rewind); when it
//      does not, the slot is reset and the whole prompt is prefilled again,
//      and the fallback is logged (SchedulerOptions::log) and counted.
//      SchedulerOptions::exact_rewind keeps full-length sliding caches
//      (llama.cpp's --swa-full) so every prefix can be reused. A request
//      with RequestOptions::prefill_from copies that request's row instead
//      once its prompt is in (n choices, one prefill);
//   3. one Model::ForwardBatch: every decoding row's next token first (with
//      speculative decoding, SchedulerOptions::drafter, followed by the
//      row's drafts: each row drafts on its own, one verify step for all),
//      then prefill chunks of the rows still reading their prompt, in
//      admission order, until the step holds step_tokens tokens (chunked
//      prefill; a chunk ends before an image it would cut, and that image
//      waits for the next step);
//   4. each row whose prompt is complete samples its next token with its own
//      Sampler (per-request options and seed), or accepts its drafts by the
//      standard rule (Sampler::Verify; rejected drafts are rewound out of
//      the row's cache), and streams the tokens out; a row
//      finishes at an end-of-generation token, one of its stop tokens, a stop
//      string, max_tokens, or cancellation, and its slot is free for the next
//      step (its cached tokens stay for prompt caching).
//
// Exactness. A row's logits do not depend on the other rows of its step or on
// how its prompt was cut into chunks (Model::ForwardBatch, the attention
// kernel's position-aligned blocks), and a cache hit rewinds to tokens that
// were computed exactly as a cold prefill computes them: a request gives the
// same tokens and logprobs alone, among others, and from the prompt cache.
// With speculative decoding a greedy request gives the same tokens and
// logprobs too (a verify row is bitwise the one-token step's logits,
// kvshare/runtime/speculative.h).
//
// Threads. The model state is owned by the one thread that runs steps.
// Submit, RequestHandle and Stats may be called from any thread; events are
// queued per request, so a slow consumer never blocks a step.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvshare/common/tensor.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/device_support.h"
#include "kvshare/runtime/sampler.h"
#include "kvshare/runtime/speculative.h"
#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare {

class ThreadPool;

// One step as it ran (SchedulerOptions::on_step), for tests and debugging.
struct StepTrace {
  struct Entry {
    int slot = 0;
    std::uint64_t request = 0;  // RequestHandle::id()
    int tokens = 0;             // tokens fed to the slot's row in this step
    bool decode = false;        // a decoding row's one token (false: a prompt chunk)
    bool sampled = false;       // its logits are sampled from (a decode row, a prompt's last chunk)
    // Its rows in `logits`: a decode row's pending token and drafts; a prompt
    // chunk of a request with prompt_logprobs, one per token (the last one
    // sampled from when it ends the prompt); else 1.
    int logits_rows = 1;
    std::int64_t position = 0;  // the row's cached tokens before the step (its first token's position)
  };
  std::vector<Entry> entries;  // in Model::ForwardBatch order
  // [sum of logits_rows, n_vocab], entry after entry: a decode entry's rows
  // for its pending token and each draft, other entries their last token's
  // (or each token's, with prompt_logprobs).
  std::span<const float> logits;
};

struct SchedulerOptions {
  // Requests decoded together = rows of the KV cache, >= 1.
  int slots = 4;
  // Positions per slot (prompt + generated tokens), >= 2.
  int max_context = 4096;
  // Most tokens of one step (decode rows + prefill chunks), > slots so that a
  // prefill always advances. Also the state's max_step (sliding rings keep
  // window + step_tokens - 1 positions).
  int step_tokens = 256;
  // Requests waiting for a slot beyond which Submit refuses (kQueueFull), >= 0.
  int max_queue = 64;
  DType kv_dtype = DType::kFloat32;
  // ModelStateOptions::attention_precision: kBf16 puts the attention
  // products of every step on AMX tiles (GqaBf16CoversCausal()).
  GqaMatMulPrecision attention_precision = GqaMatMulPrecision::kF32;
  // ModelStateOptions::num_kv_shared_layers (nullopt: the model's own).
  std::optional<int> num_kv_shared_layers;
  // Full-length sliding caches: every common prefix can be reused (costs the
  // rings' memory savings). Off: rings, with the logged fallback above.
  bool exact_rewind = false;
  // Reuse cached prefixes (off: every request prefills its whole prompt).
  bool prompt_cache = true;
  // Speculative decoding (kvshare/runtime/speculative.h): drafts for the rows of
  // requests that allow it (RequestOptions::speculative), verified in the
  // step. Null: one token per decoding row and step. Must outlive the
  // scheduler and serve rows [0, slots). With `speculative.adaptive`, the
  // drafts of a step go to the rows whose acceptance rates make them worth
  // their verify cost in a step of that many rows.
  Drafter* drafter = nullptr;
  SpeculativeOptions speculative;
  // Receives one line per notable event (prompt-cache fallback, internal
  // errors); called on the stepping thread. Null: silent.
  std::function<void(std::string_view)> log;
  // Called on the stepping thread after each step's forward pass, before its
  // tokens are sampled; the trace is valid during the call only. Null: none.
  std::function<void(const StepTrace&)> on_step;
};

// One generation request. Token ids, not text: the caller applies the chat
// template and tokenizer.
struct RequestOptions {
  std::vector<std::int32_t> prompt;  // non-empty, ids in [0, n_vocab)
  int max_tokens = 16;               // >= 1; prompt.size() + max_tokens <= max_context
  SamplerOptions sampler;            // per request, its own seed
  // Tokens that end generation besides the tokenizer's end-of-generation ones
  // (the chat format's end of turn, ChatTemplate::StopTokens()).
  std::vector<std::int32_t> stop_tokens;
  // Stop strings (non-empty): generation ends when the output text contains
  // one; the text from it on is not output. Text that could still become a
  // stop string is held back until it cannot.
  std::vector<std::string> stop;
  // End-of-generation and stop tokens do not end generation: exactly
  // max_tokens are made (benchmarks; vLLM's and llama.cpp's ignore_eos).
  bool ignore_eos = false;
  // -1: no logprobs. 0..20: each output token carries its log-probability
  // (log-softmax of the model's logits, before temperature and filters) and
  // this many most likely alternatives.
  int top_logprobs = -1;
  // -1: none. 0..20: the log-probability of every prompt token after the
  // first under the model (and this many most likely alternatives), sent in
  // the request's first event (RequestEvent::prompt_logprobs): OpenAI's
  // echo with logprobs. Such a request reuses no prompt cache (every prompt
  // position's logits are needed) and reads its prompt in chunks of at most
  // 64 tokens (bounding a step's logits to 64 rows of n_vocab).
  int prompt_logprobs = -1;
  // Another request (its RequestHandle::id(), submitted before this one)
  // with the same prompt: this request waits in the queue until that one's
  // prompt is in its row, then starts from a copy of that row
  // (ModelState::CopyRow) and prefills only its last prompt token instead of
  // the whole prompt: the choices of one request with n > 1 share one
  // prefill. Exact: the copy holds what this row would have computed. When
  // the other request has left its slot, or the state cannot copy rows, or
  // the request has images, this one prefills as any other (the prompt
  // cache applies). 0: none.
  std::uint64_t prefill_from = 0;
  // With a drafter (SchedulerOptions::drafter): draft and verify several
  // tokens per step for this request; false: one token per step.
  bool speculative = true;
  // Constrained decoding (kvshare/grammar/grammar.h): each step samples only among
  // the tokens that keep the output a prefix of the grammar's language (the
  // others' logits are -inf before the sampler), and an end token (the
  // tokenizer's, or one of stop_tokens) only once the document is complete.
  // Null: unconstrained. Such a request is never speculated (its drafts
  // would not be checked against the grammar); logprobs stay the model's.
  // Excludes ignore_eos.
  std::shared_ptr<const Grammar> grammar;
  // Added to the logits of these tokens before the grammar's mask and the
  // sampler (OpenAI's logit_bias; ids in [0, n_vocab), finite biases). Such a
  // request is never speculated (its drafts were not proposed under the
  // bias); logprobs stay the model's.
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  // Images (kvshare/runtime/image_prompt.h, ImagePrompt): sorted, disjoint
  // spans of `prompt` whose rows replace the placeholder tokens' embeddings
  // (offsets into `prompt`). A span runs in one step (a bidirectional one
  // must), so its count must be <= step_tokens - slots + 1 (a step's room
  // for a prompt chunk when every other slot decodes). `embedding_keys[i]` identifies
  // span i's rows (ImagePrompt::keys): the prompt cache reuses a prefix only
  // where the tokens and the keys of the spans in it match, and never resumes
  // inside a span. `embedding_rows` keeps the rows alive until the request
  // ends (e.g. a shared_ptr to the PromptImages).
  std::vector<EmbeddingSpan> embeddings;
  std::vector<std::uint64_t> embedding_keys;  // [embeddings.size()]
  std::shared_ptr<const void> embedding_rows;
};

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0;
};

// A sampled token whose text has been released.
struct OutputToken {
  std::int32_t token = 0;
  std::string text;               // its share of the released text (may be empty)
  float logprob = 0;              // when logprobs were asked for
  std::vector<TokenLogprob> top;  // top_logprobs alternatives, most likely first
};

enum class FinishReason {
  kStop,    // end-of-generation or stop token, or a stop string
  kLength,  // max_tokens
  kAbort,   // cancelled (RequestHandle::Cancel, Scheduler::CancelAll) or an internal error
};
// "stop", "length", "abort" (OpenAI's finish_reason words; "abort" is vLLM's).
const char* FinishReasonName(FinishReason reason);

struct RequestUsage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;  // sampled tokens, an end token included
  std::int64_t cached_tokens = 0;      // prompt tokens reused from the prompt cache
};

// What a request produced since the last Wait.
struct RequestEvent {
  std::string text;                 // newly released text (UTF-8)
  std::vector<OutputToken> tokens;  // the tokens of that text
  // RequestOptions::prompt_logprobs: prompt tokens 1..n-1, each with its
  // logprob given the tokens before it and its alternatives; in the first
  // event only (empty in the others). `text` is empty in these.
  std::vector<OutputToken> prompt_logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::kStop;
  // Why, in words: "eos", "end_of_turn", "stop token", "stop string",
  // "max_tokens", "cancelled", or the internal error's message.
  std::string detail;
  RequestUsage usage;  // final when finished
  bool error = false;  // finished by an internal error (detail says which)
};

// The caller's side of one submitted request. Thread-safe.
class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  // Appends the events produced since the last call to `out`; waits up to
  // `timeout` for the first one. Returns false when none came.
  virtual bool Wait(std::vector<RequestEvent>& out, std::chrono::milliseconds timeout) = 0;
  // Asks the scheduler to stop this request: it leaves its slot (or the queue)
  // at the start of the next step and finishes with kAbort.
  virtual void Cancel() = 0;
  virtual std::uint64_t id() const = 0;
};

enum class SubmitStatus {
  kAccepted,
  kQueueFull,  // max_queue requests are already waiting: retry later
  kDraining,   // Drain() was called: no new requests
};

struct SubmitResult {
  SubmitStatus status = SubmitStatus::kAccepted;
  std::shared_ptr<RequestHandle> handle;  // set when accepted
};

// Counters since construction and the current state (Scheduler::Stats): one
// snapshot, taken under the scheduler's lock, in which requests_accepted =
// requests_finished + queue_depth + active_slots; a request is counted
// finished (and its slot free) before its client can see its last event.
struct SchedulerStats {
  int slots = 0;
  int active_slots = 0;  // rows serving a request
  int queue_depth = 0;   // accepted, waiting for a slot
  std::uint64_t requests_accepted = 0;
  std::uint64_t requests_rejected = 0;   // kQueueFull / kDraining
  std::uint64_t requests_finished = 0;   // any reason
  std::uint64_t requests_cancelled = 0;  // finished with kAbort
  std::uint64_t prompt_tokens = 0;       // of admitted requests
  std::uint64_t prefill_tokens = 0;      // prompt tokens computed (prompt - cached)
  std::uint64_t cached_prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;        // sampled
  std::uint64_t prompt_cache_hits = 0;       // admissions that reused >= 1 cached token
  std::uint64_t prompt_cache_misses = 0;     // admissions that reused none
  std::uint64_t prompt_cache_fallbacks = 0;  // a usable prefix lost to a sliding ring
  std::uint64_t steps = 0;
  std::uint64_t spec_verify_rows = 0;      // decode rows that verified >= 1 draft
  std::uint64_t spec_drafted_tokens = 0;   // drafts fed to verify steps
  std::uint64_t spec_accepted_tokens = 0;  // drafts accepted
  double busy_seconds = 0;                 // time in ForwardBatch, drafting and sampling
  // Tokens per second over about the last 10 seconds of wall time.
  double recent_prefill_tokens_per_second = 0;
  double recent_decode_tokens_per_second = 0;
  std::size_t kv_bytes = 0;       // KV cache buffers as allocated
  std::size_t kv_bytes_used = 0;  // the part holding cached positions, all rows
  std::int64_t kv_tokens = 0;     // cached positions, all rows
};

class Scheduler {
 public:
  // Allocates the state (model.NewState with slots rows). The model,
  // tokenizer and pool (null: the stepping thread) must outlive the
  // scheduler. Throws kvshare::Error for invalid options, naming the option
  // and its range, and for a drafter that reads the target's hidden states
  // (Gemma 4's assistant) on a state whose device has none
  // (runtime/device_support.h).
  Scheduler(const Model& model, const Tokenizer& tokenizer, ThreadPool* pool, const SchedulerOptions& options);
  // Stops the thread (CancelAll, then Stop).
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerOptions& options() const;
  // What the state's device serves (SupportOn of ModelState::device()).
  const DeviceSupport& support() const;

  // Queues a request. Throws kvshare::Error (nothing queued) for an empty
  // prompt, an id out of range, max_tokens < 1, prompt + max_tokens over
  // max_context, top_logprobs or prompt_logprobs outside [-1, 20], an empty stop string,
  // invalid sampler options, a grammar with ignore_eos, or embeddings that
  // are unsorted, overlap, leave the prompt, lack rows or a key, or exceed
  // step_tokens - slots + 1 tokens, or embeddings at all on a device without
  // media inputs (DeviceSupport; the message names the device). The first request
  // with a grammar builds the vocabulary's TokenTrie (once, shared). Returns kQueueFull / kDraining without a handle
  // when the request cannot be taken now. `waiting_upstream`: requests that
  // wait before reaching Submit (an HTTP server's connections queued for a
  // thread); they count toward max_queue as if queued here, so that a burst
  // is refused rather than queued without bound in front of the scheduler.
  SubmitResult Submit(RequestOptions request, int waiting_upstream = 0);

  // Runs one step on the calling thread (not while Start()ed). Returns
  // whether there was anything to do.
  bool Step();
  // Runs steps on a new thread until Stop(); it sleeps while idle.
  void Start();
  // Stops and joins the thread (requests in flight stay where they are).
  void Stop();

  // Stops taking requests (Submit returns kDraining); queued and running
  // ones go on.
  void Drain();
  // Cancels every queued and running request (they finish with kAbort at the
  // next step).
  void CancelAll();
  // True when no request is queued or running (Stats' queue_depth and
  // active_slots are both 0).
  bool Idle() const;
  // Waits until Idle() or the timeout; returns Idle().
  bool WaitIdle(std::chrono::milliseconds timeout) const;

  SchedulerStats Stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvshare
