#include "model_path.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "kvshare/error.h"

namespace kvshare::cli {

CLI::Option* AddModelOption(CLI::App& cmd, std::string& path) {
  return cmd.add_option("--model", path,
                        std::string("GGUF model file (default: ") + kDefaultModel + ", fetched if missing)");
}

std::string ResolveModel(const std::string& given) {
  if (!given.empty()) {
    if (!std::filesystem::exists(given)) throw Error("model file '" + given + "' does not exist (check --model)");
    return given;
  }
  if (std::filesystem::exists(kDefaultModel)) return kDefaultModel;
  const std::string script = std::string(KVSHARE_SOURCE_DIR) + "/scripts/fetch_model.py";
  const std::string out_dir = std::filesystem::absolute("models").string();
  std::fprintf(stderr, "kvshare: %s not found; fetching it with %s --out %s\n", kDefaultModel, script.c_str(),
               out_dir.c_str());
  const std::string cmd = "python3 '" + script + "' --out '" + out_dir + "'";
  if (std::system(cmd.c_str()) != 0 || !std::filesystem::exists(kDefaultModel)) {
    throw Error("could not fetch the default model (ran: " + cmd + "); download it or pass --model PATH");
  }
  return kDefaultModel;
}

std::unique_ptr<Model> LoadModel(const std::string& path) {
  std::unique_ptr<Model> model = Model::Load(path);
  for (const std::string& w : model->warnings()) std::fprintf(stderr, "kvshare: warning: %s\n", w.c_str());
  return model;
}

}  // namespace kvshare::cli
