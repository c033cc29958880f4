// The default model's path for the C++ tests: $KVSHARE_MODEL if set, else
// where the CLI looks for it (tools/model_path.cc's rule: $KVSHARE_MODEL_DIR,
// else an absolute $XDG_CACHE_HOME/kvshare, else $HOME/.cache/kvshare). Tests
// that need the file skip, naming this path, when it is absent.
#pragma once

#include <cstdlib>
#include <string>

namespace kvshare::testing {

inline std::string DefaultModelPath() {
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  if (const std::string model = env("KVSHARE_MODEL"); !model.empty()) return model;
  std::string dir = env("KVSHARE_MODEL_DIR");
  if (dir.empty()) {
    const std::string xdg = env("XDG_CACHE_HOME");
    dir = !xdg.empty() && xdg[0] == '/' ? xdg + "/kvshare" : env("HOME") + "/.cache/kvshare";
  }
  return dir + "/gemma-3-270m-q4_k_m.gguf";
}

}  // namespace kvshare::testing
