// `kvshare info MODEL`: prints the GGUF summary (model/model_info.h).
#include <iostream>
#include <string>

#include "commands.h"
#include "kvshare/gguf.h"
#include "model/model_info.h"

namespace kvshare::cli {

void RegisterInfo(CLI::App& app) {
  static std::string path;
  auto* cmd = app.add_subcommand("info", "Print a GGUF model's metadata and tensor summary");
  cmd->add_option("model", path, "GGUF file")->required();
  cmd->callback([] { PrintModelInfo(GgufFile::Open(path), std::cout); });
}

}  // namespace kvshare::cli
