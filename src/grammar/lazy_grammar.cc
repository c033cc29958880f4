// Lazy grammars (kvshare/grammar/grammar.h LazyGrammar): free text until a trigger,
// then a body grammar. Tool calls under tool_choice "auto" use it so that
// the model may answer in prose, while a call it starts must be well-formed.
#include "grammar/lazy_grammar.h"

#include <algorithm>
#include <mutex>

#include "kvshare/common/error.h"

namespace kvshare {

std::shared_ptr<const Grammar> LiteralGrammar(std::string_view text) {
  if (text.empty()) throw Error("LiteralGrammar: the text is empty");
  detail::GrammarBuilder b;
  const std::uint32_t r = b.NewRule();
  b.Alt(r, b.Lit(text));
  return std::make_shared<const Grammar>(b.Finish(r));
}

std::shared_ptr<const Grammar> LazyGrammar(std::shared_ptr<const Grammar> body, LazyGrammarOptions options) {
  if (!body) throw Error("LazyGrammar: the body grammar is null");
  if (!options.trigger) throw Error("LazyGrammar: the trigger grammar is null");
  if (body->lazy || options.trigger->lazy) throw Error("LazyGrammar: the body and the trigger must not be lazy");
  detail::GrammarIr ir = body->ir;
  return std::make_shared<const Grammar>(std::move(ir), std::make_shared<const LazyGrammarOptions>(std::move(options)),
                                         std::move(body));
}

namespace detail {
namespace {

// The tokens holding a byte that can begin the trigger, per vocabulary,
// trigger start bytes and token overrides. Scanning Gemma's 262144 tokens
// took 3.9 ms per request with strict tools under "auto"
// (GrammarMatcherStartLazy); a server asks for the same few triggers on one
// vocabulary every time, so the scans are kept (the last kCached).
class StarterCache {
 public:
  using Bytes = std::vector<std::uint8_t>;  // per byte: can begin the trigger (LazyMatcher::starts_)
  using Overrides = std::vector<std::pair<std::int32_t, std::string>>;

  template <class Scan>
  std::shared_ptr<const std::vector<std::int32_t>> Get(const std::shared_ptr<const TokenTrie>& vocab,
                                                       const Bytes& bytes, const Overrides& overrides,
                                                       const Scan& scan) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      if (e.vocab.lock() == vocab && e.bytes == bytes && e.overrides == overrides) return e.starters;
    }
    auto starters = std::make_shared<const std::vector<std::int32_t>>(scan());
    if (entries_.size() == kCached) entries_.erase(entries_.begin());
    entries_.push_back({vocab, bytes, overrides, starters});
    return starters;
  }

 private:
  static constexpr std::size_t kCached = 8;
  struct Entry {
    std::weak_ptr<const TokenTrie> vocab;  // expired: never matches a live vocabulary
    Bytes bytes;
    Overrides overrides;
    std::shared_ptr<const std::vector<std::int32_t>> starters;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
};

StarterCache& Starters() {
  static StarterCache cache;
  return cache;
}

}  // namespace

LazyMatcher::LazyMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
                         std::vector<std::int32_t> end_tokens)
    : grammar_(std::move(grammar)),
      spec_(*grammar_->lazy),
      vocab_(std::move(vocab)),
      end_tokens_(std::move(end_tokens)),
      trigger_(spec_.trigger->ir),
      body_(std::make_unique<GrammarMatcher>(grammar_->body, vocab_, std::vector<std::int32_t>{})) {
  starts_.assign(256, 0);
  for (int b = 0; b < 256; ++b) {
    starts_[static_cast<std::size_t>(b)] =
        trigger_.Next(trigger_.initial(), static_cast<unsigned char>(b)) != GrammarAutomaton::kDead;
  }
  starters_ = Starters().Get(vocab_, starts_, spec_.token_text, [&] {
    std::vector<std::int32_t> ids;
    for (std::int32_t id = 0; id < vocab_->vocab_size(); ++id) {
      const std::string_view s = Bytes(id);
      if (std::any_of(s.begin(), s.end(), [&](char c) { return starts_[static_cast<unsigned char>(c)] != 0; })) {
        ids.push_back(id);
      }
    }
    return ids;
  });
}

std::string_view LazyMatcher::Bytes(std::int32_t id) const {
  for (const auto& [tid, text] : spec_.token_text) {
    if (tid == id) return text;
  }
  return vocab_->token_bytes(id);
}

bool LazyMatcher::IsEnd(std::int32_t id) const {
  return std::find(end_tokens_.begin(), end_tokens_.end(), id) != end_tokens_.end();
}

void LazyMatcher::EndBodyIfComplete() {
  // The bodies this is made for (a call ending in '}' or a closing marker)
  // take nothing after their last byte, so "complete" is "closed".
  if (!body_->CanEnd()) return;
  if (!spec_.repeat) {
    mode_ = Mode::kDone;
    return;
  }
  mode_ = Mode::kFree;
  body_ = std::make_unique<GrammarMatcher>(grammar_->body, vocab_, std::vector<std::int32_t>{});
  runs_.clear();
  recent_.clear();
}

bool LazyMatcher::Step(std::string_view bytes, bool commit) {
  if (terminated_) return false;
  switch (mode_) {
    case Mode::kDone: return bytes.empty();
    case Mode::kBody:
      if (!commit) return body_->CanAcceptBytes(bytes);
      if (!body_->AcceptBytes(bytes)) return false;
      EndBodyIfComplete();
      return true;
    case Mode::kFree: return StepFree(bytes, commit);
  }
  return false;
}

bool LazyMatcher::StepFree(std::string_view bytes, bool commit) {
  // Works on scratch copies so that a trial (commit false) leaves no trace.
  std::vector<Run>& runs = scratch_runs_;
  std::string& recent = scratch_recent_;
  runs.assign(runs_.begin(), runs_.end());
  recent.assign(recent_);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (runs.empty() && std::none_of(bytes.begin() + static_cast<std::ptrdiff_t>(i), bytes.end(),
                                     [&](char c) { return starts_[static_cast<unsigned char>(c)] != 0; })) {
      break;  // no match in progress and none can start: plain text
    }
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    recent.push_back(static_cast<char>(c));
    std::size_t live = 0;
    for (Run& r : runs) {
      r.state = trigger_.Next(r.state, c);
      if (r.state != GrammarAutomaton::kDead) runs[live++] = r;
    }
    runs.resize(live);
    if (starts_[c]) runs.push_back({recent.size() - 1, trigger_.Next(trigger_.initial(), c)});
    for (const Run& r : runs) {
      if (!trigger_.Accepting(r.state)) continue;
      // Fired: the body reads from the trigger's first byte, through the
      // rest of this piece.
      const std::string text = recent.substr(r.start) + std::string(bytes.substr(i + 1));
      if (!commit) return body_->CanAcceptBytes(text);
      if (!body_->AcceptBytes(text)) return false;
      ++triggered_;
      mode_ = Mode::kBody;
      runs_.clear();
      recent_.clear();
      EndBodyIfComplete();
      return true;
    }
    if (runs.empty()) {
      recent.clear();
    } else if (runs.front().start > 0) {
      const std::size_t drop = runs.front().start;
      recent.erase(0, drop);
      for (Run& r : runs) r.start -= drop;
    }
  }
  if (commit) {
    runs_.swap(runs);
    recent_.swap(recent);
  }
  return true;
}

bool LazyMatcher::AcceptToken(std::int32_t id) {
  if (terminated_) return false;
  if (IsEnd(id)) {
    if (!CanEnd()) return false;
    terminated_ = true;
    return true;
  }
  const std::string_view b = Bytes(id);
  // A token with no text (a control token of free text) only passes there.
  if (b.empty()) return mode_ == Mode::kFree;
  return Step(b, true);
}

void LazyMatcher::FillNextTokenMask(std::span<std::uint64_t> mask) {
  const std::int32_t vocab = vocab_->vocab_size();
  const std::size_t words = (static_cast<std::size_t>(vocab) + 63) / 64;
  if (mask.size() != words) {
    throw Error("GrammarMatcher::FillNextTokenMask: the mask has " + std::to_string(mask.size()) + " words, expected " +
                std::to_string(words) + " for " + std::to_string(vocab) + " tokens");
  }
  auto set = [&](std::int32_t id, bool on) {
    const std::uint64_t bit = std::uint64_t{1} << (id & 63);
    std::uint64_t& w = mask[static_cast<std::size_t>(id) >> 6];
    w = on ? (w | bit) : (w & ~bit);
  };
  std::fill(mask.begin(), mask.end(), 0);
  if (terminated_) return;
  switch (mode_) {
    case Mode::kDone: break;
    case Mode::kBody:
      body_->FillNextTokenMask(mask);
      for (const auto& [id, text] : spec_.token_text) set(id, body_->CanAcceptBytes(text));
      break;
    case Mode::kFree: {
      std::fill(mask.begin(), mask.end(), ~std::uint64_t{0});
      if (vocab % 64 != 0) mask.back() = (std::uint64_t{1} << (vocab % 64)) - 1;
      // Only a token that fires the trigger can be refused: one holding a
      // byte that can begin a trigger (starters_) and, with a match in
      // progress, also the tokens whose first byte continues it (the trie
      // keeps them together) and the control tokens given text.
      for (std::int32_t id : *starters_) {
        if (!StepFree(Bytes(id), false)) set(id, false);
      }
      if (!runs_.empty()) {
        for (int b = 0; b < 256; ++b) {
          const auto c = static_cast<unsigned char>(b);
          if (starts_[c] || std::none_of(runs_.begin(), runs_.end(), [&](const Run& r) {
                return trigger_.Next(r.state, c) != GrammarAutomaton::kDead;
              })) {
            continue;  // starters are checked above; a byte that ends every match starts plain text
          }
          for (std::int32_t id : vocab_->tokens_starting_with(c)) {
            if (!StepFree(Bytes(id), false)) set(id, false);
          }
        }
        for (const auto& [id, text] : spec_.token_text) {
          if (!StepFree(text, false)) set(id, false);
        }
      }
      break;
    }
  }
  for (std::int32_t id : end_tokens_) set(id, CanEnd());
}

}  // namespace detail
}  // namespace kvshare
