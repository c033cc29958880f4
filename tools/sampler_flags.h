// Sampling flags of the subcommands that generate text (kvshare generate):
// registered on a CLI11 command with range checks, then turned into the
// runtime's SamplerOptions (include/kvshare/runtime/sampler.h has the pipeline).
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

#include "kvshare/runtime/sampler.h"

namespace kvshare::cli {

// The parsed flags. Defaults equal SamplerOptions' (greedy, every filter off,
// penalty window 64).
struct SamplerFlags {
  float temperature = 0.0f;        // --temp, [0, 100]
  int top_k = 0;                   // --top-k, [0, 2^30]
  float top_p = 1.0f;              // --top-p, (0, 1]
  float min_p = 0.0f;              // --min-p, [0, 1]
  float repeat_penalty = 1.0f;     // --repeat-penalty, (0, 100]
  int repeat_last_n = 64;          // --repeat-last-n, [-1, 2^30]
  float presence_penalty = 0.0f;   // --presence-penalty, [-2, 2]
  float frequency_penalty = 0.0f;  // --frequency-penalty, [-2, 2]
  std::uint64_t seed = 0;          // --seed
};

// Adds --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty and --seed to `cmd`, writing into `flags` (both must outlive parsing). An
// out-of-range value fails parsing with a CLI::ValidationError that names the
// flag and the allowed range.
void AddSamplerFlags(CLI::App& cmd, SamplerFlags& flags);

// The flags as SamplerOptions (field by field).
SamplerOptions ToSamplerOptions(const SamplerFlags& flags);

}  // namespace kvshare::cli
