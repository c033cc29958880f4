#include "model_path.h"

#include <cstdio>
#include <cstdlib>

#include "kvshare/common/error.h"

namespace kvshare::cli {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

std::filesystem::path DefaultModelDir() {
  if (const std::string dir = Env("KVSHARE_MODEL_DIR"); !dir.empty()) return dir;
  if (const std::string xdg = Env("XDG_CACHE_HOME"); !xdg.empty() && std::filesystem::path(xdg).is_absolute()) {
    return std::filesystem::path(xdg) / "kvshare";
  }
  if (const std::string home = Env("HOME"); !home.empty()) return std::filesystem::path(home) / ".cache" / "kvshare";
  throw Error(
      "no place for the default model: set KVSHARE_MODEL_DIR (or XDG_CACHE_HOME, or HOME), or pass --model PATH");
}

std::filesystem::path DefaultModelPath() { return DefaultModelDir() / kDefaultModelName; }

CLI::Option* AddModelOption(CLI::App& cmd, std::string& path) {
  return cmd.add_option("--model", path,
                        std::string("GGUF model file (default: ") + kDefaultModelName +
                            " in $KVSHARE_MODEL_DIR, else $XDG_CACHE_HOME/kvshare, else ~/.cache/kvshare; fetched if "
                            "missing)");
}

std::string ResolveModel(const std::string& given) {
  if (!given.empty()) {
    if (!std::filesystem::exists(given)) throw Error("model file '" + given + "' does not exist (check --model)");
    return given;
  }
  const std::filesystem::path model = DefaultModelPath();
  if (std::filesystem::exists(model)) return model.string();
  const std::string script = std::string(KVSHARE_SOURCE_DIR) + "/scripts/fetch_model.py";
  const std::string out_dir = model.parent_path().string();
  std::fprintf(stderr, "kvshare: %s not found; fetching it with %s --out %s\n", model.c_str(), script.c_str(),
               out_dir.c_str());
  const std::string cmd = "python3 '" + script + "' --out '" + out_dir + "'";
  if (std::system(cmd.c_str()) != 0 || !std::filesystem::exists(model)) {
    throw Error("could not fetch the default model (ran: " + cmd + "); download it or pass --model PATH");
  }
  return model.string();
}

std::unique_ptr<Model> LoadModel(const std::string& path, const ModelLoadOptions& options) {
  std::unique_ptr<Model> model = Model::Load(path, options);
  for (const std::string& w : model->warnings()) PrintWarning(w);
  return model;
}

void PrintWarning(std::string_view warning) {
  std::fprintf(stderr, "kvshare: warning: %.*s\n", static_cast<int>(warning.size()), warning.data());
}

}  // namespace kvshare::cli
