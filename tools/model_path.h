// The --model argument shared by the subcommands that load a model.
#pragma once

#include <string>

namespace kvshare::cli {

// Relative to the working directory; scripts/fetch_model.py writes it there.
inline constexpr const char* kDefaultModel = "models/gemma-3-270m-q4_k_m.gguf";

// `given` if non-empty (it must exist), else the default model, fetched with
// scripts/fetch_model.py into ./models when missing. Throws kvshare::Error
// naming the path and what to do when there is no model file.
std::string ResolveModel(const std::string& given);

}  // namespace kvshare::cli
