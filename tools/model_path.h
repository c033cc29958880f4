// The --model option shared by every subcommand that loads a model, where the
// default model lives, and the load itself.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "kvshare/model/model.h"

namespace kvshare::cli {

// The default model's file name; scripts/fetch_model.py writes it into
// DefaultModelDir().
inline constexpr const char* kDefaultModelName = "gemma-3-270m-q4_k_m.gguf";

// Where the default model lives, the same from any working directory:
// $KVSHARE_MODEL_DIR if set, else $XDG_CACHE_HOME/kvshare (the XDG base
// directory spec; a relative XDG_CACHE_HOME is ignored, as the spec says),
// else $HOME/.cache/kvshare. Throws kvshare::Error when none of these is set.
std::filesystem::path DefaultModelDir();
std::filesystem::path DefaultModelPath();  // DefaultModelDir() / kDefaultModelName

// Adds `--model PATH` to `cmd`, writing into `path` (which must outlive
// parsing); left empty, ResolveModel picks the default model.
CLI::Option* AddModelOption(CLI::App& cmd, std::string& path);

// `given` if non-empty (it must exist), else the default model, fetched with
// scripts/fetch_model.py (with a progress display) when missing. Throws
// kvshare::Error naming the path and what to do when there is no model file.
std::string ResolveModel(const std::string& given);

// Model::Load(path, options), then its warnings() on stderr (PrintWarning).
std::unique_ptr<Model> LoadModel(const std::string& path, const ModelLoadOptions& options = {});

// "kvshare: warning: <warning>" on stderr.
void PrintWarning(std::string_view warning);

}  // namespace kvshare::cli
