// The --kv-dtype option shared by the subcommands that size or run a KV cache.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kvshare/tensor.h"

namespace kvshare::cli {

// Adds `--kv-dtype f32|f16|bf16|q8_0` (default: the value `dtype` holds) to cmd.
void AddKvDtypeOption(CLI::App& cmd, std::string& dtype);
// "f32" / "f16" / "bf16" / "q8_0" as a DType; throws kvshare::Error naming the
// choices.
DType ParseKvDtype(const std::string& name);

}  // namespace kvshare::cli
