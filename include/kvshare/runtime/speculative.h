// kvshare/runtime/speculative.h — speculative decoding (runtime layer; docs/speculative.md).
//
// A round on one row: a Drafter proposes up to k tokens that continue the
// row's sequence; the target model runs the pending token and the k drafts in
// one Forward (k + 1 positions, the logits of each); the drafts are accepted
// by the standard rule (Sampler::Verify): greedy keeps the longest prefix the
// target's argmax agrees with, sampling accepts draft i with probability
// p_i(draft) and on a rejection draws from p_i without it; the target's own
// token follows the accepted prefix. The target's cache is then rewound to
// the accepted tokens (KvCache::Rewind), so the next round starts exactly
// where one-token-at-a-time decoding would be.
//
// Losslessness. With greedy sampling the tokens are bitwise those of decoding
// without speculation, for every drafter: a row's logits do not depend on how
// its tokens were cut into calls (Model::ForwardBatch), so row i of a verify
// step is bitwise the logits a one-token step at that position gives, and the
// argmax (lowest id on ties) is the same. Sampling draws from exactly the
// target's distribution (after repetition penalty, temperature, top-k, top-p
// and min-p, the same filters on both paths) but consumes the random stream
// differently, so a seed gives other tokens than without speculation.
//
// Drafts are proposed with certainty (argmax of a draft model, an n-gram's
// continuation): q is a point mass, for which Leviathan et al.'s rule accepts
// with probability p(draft).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvshare/model/gemma4_assistant.h"
#include "kvshare/model/model.h"

namespace kvshare {

class ThreadPool;

// What a drafter sees of one row when asked for drafts.
struct DraftContext {
  int row = 0;  // the row of the target's state
  // The row's sequence: every token in the target's cache (positions
  // 0 .. size - 2), then the pending token (last), which the verify step feeds
  // at position size - 1 together with the drafts.
  std::span<const std::int32_t> tokens;
  // The target's state (its cache holds tokens[0 .. size - 2]); read-only.
  const ModelState* target_state = nullptr;
  // The target's final hidden state [n_embd] at position size - 2 (the one
  // whose logits chose the pending token): ModelState::hidden(). Empty when
  // the target did not keep it.
  std::span<const float> target_hidden;
};

// Proposes continuations of a row's sequence. One drafter serves the rows of
// one target state; calls come from one thread at a time.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // "ngram", "draft-model", "gemma4-assistant".
  virtual std::string name() const = 0;
  // Appends up to max_tokens (>= 1) tokens that are likely to follow
  // ctx.tokens, in order, to `out`; may append none (then the round decodes
  // one token without speculation). A drafter with its own state works out
  // what changed in the row since its last call (accepted drafts, a rewind, a
  // new prompt) from ctx.tokens.
  virtual void Draft(const DraftContext& ctx, int max_tokens, std::vector<std::int32_t>& out) = 0;
  // The target's row restarts (any state the drafter keeps for it is dropped).
  virtual void Reset(int row) { (void)row; }
  // Whether Draft needs DraftContext::target_hidden.
  virtual bool needs_target_hidden() const { return false; }
};

// Prompt lookup (n-gram) drafting: the longest suffix of the sequence of
// ngram_max down to ngram_min tokens that occurred earlier in it (prompt and
// output), at its most recent earlier occurrence; the drafts are the tokens
// that followed there. No model.
struct NgramOptions {
  int ngram_min = 2;  // >= 1
  int ngram_max = 4;  // >= ngram_min, <= 64
};
// Throws kvshare::Error naming an option out of range.
std::unique_ptr<Drafter> MakeNgramDrafter(const NgramOptions& options = {});

// A separate draft model with the target's vocabulary (its own state and KV
// cache, max_batch rows of max_context positions): greedy drafts, one decode
// step per draft. Throws kvshare::Error when the draft's vocabulary is not
// the target's (size, or the first token whose text differs).
struct DraftModelOptions {
  int max_batch = 1;       // rows, as the target state's
  int max_context = 4096;  // positions per row, as the target state's
  DType kv_dtype = DType::kFloat32;
  ThreadPool* pool = nullptr;  // runs the draft model (null: the calling thread)
};
std::unique_ptr<Drafter> MakeDraftModelDrafter(const Model& draft, const Model& target,
                                               const DraftModelOptions& options);

// Gemma 4's assistant (kvshare/model/gemma4_assistant.h): each draft one assistant step
// that reads the target state's cache (no cache of its own), chained through
// the assistant's projected hidden state; greedy drafts. Needs the target's
// hidden state (DraftContext::target_hidden). Runs where the target's states
// live: `assistant` itself for a CPU target, the target's twin of it
// (Model::AssistantOnDevice, made here) for the GPU model. Throws
// kvshare::Error when the assistant does not fit `target`
// (AssistantModel::Sources on the target's own layer plan) or its twin
// cannot be made (device memory).
std::unique_ptr<Drafter> MakeAssistantDrafter(const AssistantModel& assistant, const Model& target, ThreadPool* pool);

// How many tokens a round drafts.
struct SpeculativeOptions {
  // k: most drafts per round, in [1, 64]; further capped per round by the
  // state's max_step - 1 (a verify step is one chunk), the context left and
  // the tokens still to generate.
  int draft_max = 16;
  // Choose k per round from the running acceptance rate alpha (decaying
  // counts of accepted and rejected drafts): the k <= draft_max that
  // maximizes the expected tokens per round, (1 - alpha^(k+1)) / (1 - alpha),
  // over the relative cost of verifying k drafts, 1 + verify_cost * k.
  // Off: always draft_max.
  bool adaptive = true;
  // Cost of each drafted position in a verify step relative to a one-token
  // step, > 0 (the adaptive choice above and the scheduler's draft bids).
  // The measurement behind the default: docs/speculative.md, "Draft length".
  double verify_cost = 0.06;
};

// Throws kvshare::Error naming an option out of range.
void CheckSpeculativeOptions(const SpeculativeOptions& options);

// Counters of speculative decoding.
struct SpeculativeStats {
  std::int64_t rounds = 0;    // verify steps (Forward calls with >= 1 draft)
  std::int64_t drafted = 0;   // drafts fed to verify steps
  std::int64_t accepted = 0;  // drafts accepted
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
};

}  // namespace kvshare
