// A completion request's choices, merged into one response (choice_set.h).
#include "choice_set.h"

#include <algorithm>
#include <map>

namespace kvshare::server {

using nlohmann::json;

void ChoiceSet::Add(std::shared_ptr<RequestHandle> handle, std::unique_ptr<CompletionFormatter> fmt,
                    std::size_t prompt) {
  choices_.push_back({std::move(handle), std::move(fmt), prompt, false, {}});
}

bool ChoiceSet::finished() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.done; });
}

void ChoiceSet::CancelAll() {
  for (Choice& c : choices_) {
    if (!c.done) c.handle->Cancel();
  }
}

bool ChoiceSet::Take(Choice& c, std::chrono::milliseconds timeout, std::string* sse) {
  if (c.done) return false;
  std::vector<RequestEvent> events;
  if (!c.handle->Wait(events, timeout)) return false;
  for (const RequestEvent& e : events) {
    if (sse != nullptr) {
      *sse += c.fmt->StreamEvent(e);
    } else {
      c.fmt->Add(e);
    }
    if (e.finished) {
      c.done = true;
      c.last = e;
    }
  }
  return true;
}

void ChoiceSet::Collect(std::chrono::milliseconds timeout) {
  bool any = false;
  for (Choice& c : choices_) any = Take(c, std::chrono::milliseconds(0), nullptr) || any;
  if (any) return;
  for (Choice& c : choices_) {
    if (!c.done) {
      Take(c, timeout, nullptr);
      return;
    }
  }
}

std::string ChoiceSet::CollectStream(std::chrono::milliseconds timeout) {
  std::string out;
  bool any = false;
  for (Choice& c : choices_) any = Take(c, std::chrono::milliseconds(0), &out) || any;
  if (!any) {
    for (Choice& c : choices_) {
      if (!c.done) {
        Take(c, timeout, &out);
        break;
      }
    }
  }
  // One choice alone ends the stream itself (ChoiceOptions::ends_stream).
  if (choices_.size() > 1 && !ended_ && finished()) {
    ended_ = true;
    out += choices_.front().fmt->StreamEnd(Usage());
  }
  return out;
}

std::string ChoiceSet::StreamStart() const {
  std::string out;
  for (const Choice& c : choices_) out += c.fmt->StreamStart();
  return out;
}

RequestUsage ChoiceSet::Usage() const {
  RequestUsage total;
  std::map<std::size_t, bool> seen;
  for (const Choice& c : choices_) {
    RequestUsage u = c.done ? c.last.usage : RequestUsage{};
    if (max_tokens_zero_) u.completion_tokens = 0;  // the one token run is not output
    if (!seen[c.prompt] && c.done) {
      seen[c.prompt] = true;
      total.prompt_tokens += u.prompt_tokens;
      total.cached_tokens += u.cached_tokens;
    }
    total.completion_tokens += u.completion_tokens;
  }
  return total;
}

const RequestEvent& ChoiceSet::last() const {
  for (const Choice& c : choices_) {
    if (c.last.error) return c.last;
  }
  return choices_.back().last;
}

json ChoiceSet::Final() const {
  const int n = n_;
  std::vector<const Choice*> order;
  for (const Choice& c : choices_) order.push_back(&c);
  // Candidates of a prompt, best mean logprob first (best_of > n), stable.
  auto mean = [](const Choice* c) {
    const std::size_t k = c->fmt->TokenCount();
    return k == 0 ? -1e300 : c->fmt->LogprobSum() / static_cast<double>(k);
  };
  if (best_of_ > n) {
    std::stable_sort(order.begin(), order.end(), [&](const Choice* a, const Choice* b) {
      return a->prompt != b->prompt ? a->prompt < b->prompt : mean(a) > mean(b);
    });
  }
  json list = json::array();
  std::map<std::size_t, int> taken;
  for (const Choice* c : order) {
    int& rank = taken[c->prompt];
    if (rank >= n) continue;
    c->fmt->set_index(static_cast<int>(c->prompt) * n + rank);
    ++rank;
    list.push_back(c->fmt->Choice());
  }
  json out = choices_.front().fmt->Final();
  out["choices"] = std::move(list);
  out["usage"] = CompletionFormatter::UsageJson(Usage());
  return out;
}

}  // namespace kvshare::server
