// Speculative decoding flags of the subcommands that decode (generate, bench,
// serve): registered on a CLI11 command, then turned into a Drafter and the
// runtime's SpeculativeOptions (include/kvshare/runtime/speculative.h).
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "kvshare/model/model.h"
#include "kvshare/runtime/speculative.h"

namespace kvshare::cli {

struct SpecFlags {
  std::string spec;         // --spec: "" (none) or "ngram"
  std::string draft_model;  // --draft-model PATH
  int draft_max = 16;       // --draft-max
  bool draft_fixed = false; // --draft-fixed: always --draft-max drafts
  int ngram_min = 2;        // --ngram-min
  int ngram_max = 4;        // --ngram-max
  bool enabled() const { return !spec.empty() || !draft_model.empty(); }
};

// Adds --spec, --draft-model, --draft-max, --draft-fixed, --ngram-min and
// --ngram-max to `cmd` (flags must outlive parsing).
void AddSpecFlags(CLI::App& cmd, SpecFlags& flags);

// What the flags ask for: the drafter (null when speculation is off), the draft
// model it runs (when --draft-model), and the options.
struct Speculation {
  std::unique_ptr<Model> draft_model;
  std::unique_ptr<AssistantModel> assistant;  // when --draft-model is a Gemma 4 assistant
  std::unique_ptr<Drafter> drafter;
  SpeculativeOptions options;
};

// The target state's shape the drafter serves.
struct SpecTarget {
  int max_batch = 1;
  int max_context = 4096;
  DType kv_dtype = DType::kFloat32;
  ThreadPool* pool = nullptr;
  std::string device = "cpu";  // --device of the command
};

// The checks that need no model: throws kvshare::Error for --spec together
// with --draft-model, options out of range, and speculation on a device where
// a verify step is not bitwise a one-token step (cuda).
void CheckSpecFlags(const SpecFlags& flags, const std::string& device);

// Builds the drafter for `target` (CheckSpecFlags first). Throws
// kvshare::Error as CheckSpecFlags, then for a draft model that does not fit
// the target.
Speculation MakeSpeculation(const SpecFlags& flags, const Model& target, const SpecTarget& where);

}  // namespace kvshare::cli
