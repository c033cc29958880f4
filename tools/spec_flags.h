// Speculative decoding flags of the subcommands that decode (generate, bench,
// serve): registered on a CLI11 command, then turned into the runtime's
// SpeculationRequest, whose drafter and SpeculativeOptions the runtime's
// factory makes (include/kvshare/runtime/drafter_factory.h).
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "kvshare/model/model.h"
#include "kvshare/runtime/drafter_factory.h"

namespace kvshare::cli {

// Defaults are the runtime's (SpeculativeOptions, NgramOptions).
struct SpecFlags {
  std::string spec;                                   // --spec: "" (none) or "ngram"
  std::string draft_model;                            // --draft-model PATH
  int draft_max = SpeculativeOptions{}.draft_max;     // --draft-max
  bool draft_fixed = !SpeculativeOptions{}.adaptive;  // --draft-fixed: always --draft-max drafts
  int ngram_min = NgramOptions{}.ngram_min;           // --ngram-min
  int ngram_max = NgramOptions{}.ngram_max;           // --ngram-max
  std::string draft_device;                           // --draft-device: "" (the target's --device), cpu, cuda
};

// Adds --spec, --draft-model, --draft-max, --draft-fixed, --ngram-min,
// --ngram-max and --draft-device to `cmd` (flags must outlive parsing).
void AddSpecFlags(CLI::App& cmd, SpecFlags& flags);

// The request the flags make (kvshare/runtime/drafter_factory.h), worded
// with the CLI's flag names; `device` is the command's --device ("cpu",
// "cuda"); a draft model goes to --draft-device, by default the same. The
// draft model path is taken as given (MakeSpeculation below resolves it).
SpeculationRequest SpecRequest(const SpecFlags& flags, const std::string& device = "cpu");

// The checks that need no model (CheckSpeculation): throws kvshare::Error for
// --spec together with --draft-model and options out of range.
void CheckSpecFlags(const SpecFlags& flags, const std::string& device);

// The drafter the flags ask for, serving `target` on a state of the shape
// `state` gives (runtime MakeSpeculation); --draft-model is resolved first
// (ResolveModel) and a loaded draft model's warnings go to stderr. Throws
// kvshare::Error as CheckSpecFlags, then for a draft model that does not fit
// the target.
Speculation MakeSpeculation(const SpecFlags& flags, const Model& target, const DraftModelOptions& state,
                            const std::string& device = "cpu");

}  // namespace kvshare::cli
