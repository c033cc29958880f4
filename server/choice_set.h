// The choices of one completion request (n, best_of, a list of prompts):
// one scheduler request and one CompletionFormatter per candidate, merged
// into one response. Choice index = prompt_index * n + i (OpenAI's
// numbering); candidate i of a prompt samples with the request's seed + i
// (openai_request.h). Usage counts each prompt's tokens once and every
// candidate's completion tokens (best_of's discarded ones included, as
// OpenAI bills them). Streaming interleaves the choices' chunks, each with
// its index, and ends once all have finished (usage chunk, [DONE]).
// best_of > n (not streamed): the n candidates of a prompt with the highest
// mean token logprob, best first (ties: the earlier candidate).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/runtime/scheduler.h"
#include "openai_response.h"

namespace kvshare::server {

class ChoiceSet {
 public:
  // Copies what it needs of `request`: a stream's set outlives the handler's request.
  explicit ChoiceSet(const CompletionRequest& request)
      : n_(request.n), best_of_(request.best_of), max_tokens_zero_(request.max_tokens_zero) {}

  // Adds candidate `candidate` of prompt `prompt` (submitted; `fmt` built
  // with ChoiceOptions::ends_stream false unless it is the only one).
  void Add(std::shared_ptr<RequestHandle> handle, std::unique_ptr<CompletionFormatter> fmt, std::size_t prompt);

  std::size_t size() const { return choices_.size(); }
  bool finished() const;
  void CancelAll();

  // Takes the events ready now, waiting up to `timeout` for the first when
  // none is; feeds them to the formatters (non-streaming, Add) or returns
  // their SSE text (streaming). `last` is set to a finished event's (for
  // the log: an error one first).
  void Collect(std::chrono::milliseconds timeout);
  std::string CollectStream(std::chrono::milliseconds timeout);

  // Streaming: every choice's StreamStart; the end (usage, [DONE]) once all
  // have finished (CollectStream appends it itself).
  std::string StreamStart() const;

  // Non-streaming: the response object once finished.
  nlohmann::json Final() const;
  // The usage over all choices (prompt tokens of each prompt once).
  RequestUsage Usage() const;
  // An event for the log line: the first error, else the last finished one.
  const RequestEvent& last() const;

 private:
  struct Choice {
    std::shared_ptr<RequestHandle> handle;
    std::unique_ptr<CompletionFormatter> fmt;
    std::size_t prompt = 0;
    bool done = false;
    RequestEvent last;
  };
  // Takes one choice's events; appends streamed text to `sse` when non-null.
  bool Take(Choice& c, std::chrono::milliseconds timeout, std::string* sse);

  int n_;
  int best_of_;
  bool max_tokens_zero_;
  std::vector<Choice> choices_;
  bool ended_ = false;
};

}  // namespace kvshare::server
