// The --model option shared by every subcommand that loads a model, and the load itself.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "kvshare/model.h"

namespace kvshare::cli {

// Relative to the working directory; scripts/fetch_model.py writes it there.
inline constexpr const char* kDefaultModel = "models/gemma-3-270m-q4_k_m.gguf";

// Adds `--model PATH` to `cmd`, writing into `path` (which must outlive
// parsing); left empty, ResolveModel picks the default model.
CLI::Option* AddModelOption(CLI::App& cmd, std::string& path);

// `given` if non-empty (it must exist), else the default model, fetched with
// scripts/fetch_model.py into ./models when missing. Throws kvshare::Error
// naming the path and what to do when there is no model file.
std::string ResolveModel(const std::string& given);

// Model::Load(path), then its warnings() on stderr ("kvshare: warning: ...").
std::unique_ptr<Model> LoadModel(const std::string& path);

}  // namespace kvshare::cli
