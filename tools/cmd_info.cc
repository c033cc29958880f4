// `kvshare info [--model PATH]`: prints the GGUF summary (model/model_info.h)
// and the chat format the file selects (kvshare/chat_template.h).
#include <iostream>
#include <string>

#include "commands.h"
#include "kvshare/chat_template.h"
#include "kvshare/error.h"
#include "kvshare/gguf.h"
#include "model/model_info.h"
#include "model_path.h"

namespace kvshare::cli {
namespace {

struct InfoCliOptions {
  std::string model;       // --model PATH
  std::string positional;  // `kvshare info PATH`, the older form
};

void RunInfo(const InfoCliOptions& o) {
  if (!o.model.empty() && !o.positional.empty() && o.model != o.positional) {
    throw Error("two models given ('" + o.positional + "' and --model '" + o.model + "'); give one, with --model PATH");
  }
  const GgufFile file = GgufFile::Open(ResolveModel(o.model.empty() ? o.positional : o.model));
  PrintModelInfo(file, std::cout);
  const ChatFormatChoice chat = ChooseChatFormat(file);
  std::cout << "chat template: " << ChatFormatName(chat.format)
            << (chat.format == ChatFormat::kNone ? " (plain completion)" : "") << ": " << chat.reason << "\n";
}

}  // namespace

void RegisterInfo(CLI::App& app) {
  static InfoCliOptions o;
  auto* cmd = app.add_subcommand("info", "Print a GGUF model's metadata, tensor summary and chat template");
  AddModelOption(*cmd, o.model);
  cmd->add_option("model", o.positional, "GGUF file (same as --model; kept for older scripts)");
  cmd->callback([] { RunInfo(o); });
}

}  // namespace kvshare::cli
