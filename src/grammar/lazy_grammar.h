// The matcher of a lazy grammar (kvshare::LazyGrammar): free text watched
// for the trigger, then the body's matcher, then free text again or only the
// end. Internal to src/runtime (GrammarMatcher forwards to it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar_automaton.h"
#include "grammar/grammar_ir.h"
#include "kvshare/grammar/grammar.h"

namespace kvshare::detail {

class LazyMatcher {
 public:
  // `grammar` must be lazy; ids were checked by the caller.
  LazyMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
              std::vector<std::int32_t> end_tokens);

  bool AcceptToken(std::int32_t id);
  bool AcceptBytes(std::string_view bytes) { return Step(bytes, true); }
  bool CanAcceptBytes(std::string_view bytes) { return Step(bytes, false); }
  void FillNextTokenMask(std::span<std::uint64_t> mask);
  bool CanEnd() const { return !terminated_ && mode_ != Mode::kBody; }
  bool Terminated() const { return terminated_; }
  int Triggered() const { return triggered_; }

 private:
  enum class Mode { kFree, kBody, kDone };
  // A trigger match in progress: where it started in recent_, its DFA state.
  struct Run {
    std::size_t start;
    std::uint32_t state;
  };

  // Feeds bytes of output; commit false only tells whether it would succeed.
  bool Step(std::string_view bytes, bool commit);
  bool StepFree(std::string_view bytes, bool commit);
  void EndBodyIfComplete();
  std::string_view Bytes(std::int32_t id) const;
  bool IsEnd(std::int32_t id) const;

  std::shared_ptr<const Grammar> grammar_;
  const LazyGrammarOptions& spec_;
  std::shared_ptr<const TokenTrie> vocab_;
  std::vector<std::int32_t> end_tokens_;
  GrammarAutomaton trigger_;
  std::unique_ptr<GrammarMatcher> body_;  // fresh at each trigger
  Mode mode_ = Mode::kFree;
  bool terminated_ = false;
  int triggered_ = 0;
  std::vector<Run> runs_;
  std::string recent_;  // free text from the oldest run's start on
  // Free text: only tokens holding a byte that can begin a trigger can fire
  // one while no match is in progress, so only they are checked then.
  std::vector<std::uint8_t> starts_;                           // per byte: can begin a trigger
  std::shared_ptr<const std::vector<std::int32_t>> starters_;  // shared between matchers (lazy_grammar.cc)
  std::vector<Run> scratch_runs_;
  std::string scratch_recent_;
};

}  // namespace kvshare::detail
