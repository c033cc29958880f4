// Streaming a row's tokens and ending requests (scheduler/completion.h).
#include "runtime/scheduler/completion.h"

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

namespace kvshare::detail {
namespace {

// A released piece of no token: a decoder flush.
constexpr std::size_t kNoToken = static_cast<std::size_t>(-1);

// Moves released pieces into e (text and tokens). A piece of kNoToken adds
// its text to the last token of e, if any.
void Emit(Request& r, std::vector<ReleasedPiece>& pieces, RequestEvent& e) {
  for (ReleasedPiece& p : pieces) {
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

}  // namespace

void Finish(SchedulerShared& shared, Request& r, FinishReason reason, std::string detail, RequestEvent e, bool error) {
  e.finished = true;
  e.reason = reason;
  e.detail = std::move(detail);
  e.error = error;
  e.usage = {static_cast<std::int64_t>(r.opt.prompt.size()), r.generated, r.cached};
  {
    // Counted before the client can see its last event (and with the slot or
    // queue place it leaves: SchedulerShared).
    std::lock_guard<std::mutex> lock(shared.mu);
    --(r.seated() ? shared.active : shared.queued);
    ++shared.stats.requests_finished;
    if (reason == FinishReason::kAbort) ++shared.stats.requests_cancelled;
  }
  r.handle->Push(std::move(e));
}

void FailRow(SchedulerShared& shared, SlotTable& rows, Slot& s, const std::string& what) {
  Finish(shared, rows.Free(s), FinishReason::kAbort, "internal error: " + what, {}, true);
}

void StreamToken(const Tokenizer& tok, SchedulerShared& shared, SlotTable& rows, Slot& s, Sampled& sampled) {
  Request& r = *s.req;
  const std::int32_t t = sampled.token;
  ++r.generated;
  RequestEvent e;
  e.prompt_logprobs = std::move(r.prompt_info);  // the first event's
  r.prompt_info.clear();
  std::vector<ReleasedPiece> pieces;
  const bool stop_token = std::find(r.opt.stop_tokens.begin(), r.opt.stop_tokens.end(), t) != r.opt.stop_tokens.end();
  if (!r.opt.ignore_eos && (tok.IsEndOfGeneration(t) || stop_token)) {
    // The end token adds no text; bytes of an unfinished character become U+FFFD.
    r.releaser.Add(kNoToken, r.decoder.Flush(), pieces);
    r.releaser.Flush(pieces);
    Emit(r, pieces, e);
    rows.Free(s);
    Finish(shared, r, FinishReason::kStop,
           t == tok.eos_id()           ? "eos"
           : t == tok.end_of_turn_id() ? "end_of_turn"
                                       : "stop token",
           std::move(e));
    return;
  }
  r.token_info.push_back(std::move(sampled.info));
  r.releaser.Add(r.token_info.size() - 1, r.decoder.Feed(t), pieces);
  if (!r.releaser.stopped() && r.generated >= r.opt.max_tokens) {
    r.releaser.Add(kNoToken, r.decoder.Flush(), pieces);
    r.releaser.Flush(pieces);
    Emit(r, pieces, e);
    rows.Free(s);
    Finish(shared, r, r.releaser.stopped() ? FinishReason::kStop : FinishReason::kLength,
           r.releaser.stopped() ? "stop string" : "max_tokens", std::move(e));
    return;
  }
  Emit(r, pieces, e);
  if (r.releaser.stopped()) {
    rows.Free(s);
    Finish(shared, r, FinishReason::kStop, "stop string", std::move(e));
    return;
  }
  r.next_token = t;
  if (!e.tokens.empty() || !e.text.empty() || !e.prompt_logprobs.empty()) r.handle->Push(std::move(e));
}

}  // namespace kvshare::detail
