// `kvshare info [--model PATH]`: prints the GGUF summary (model/model_info.h),
// the chat format the file selects (kvshare/chat_template.h) and, for a
// supported architecture, the layer plan with the KV memory it takes.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "kvshare/chat_template.h"
#include "kvshare/error.h"
#include "kvshare/gguf.h"
#include "kvshare/model.h"
#include "model/model_info.h"
#include "kv_options.h"
#include "model_path.h"

namespace kvshare::cli {
namespace {

struct InfoCliOptions {
  std::string model;       // --model PATH
  std::string positional;  // `kvshare info PATH`, the older form
  int max_context = 4096;  // --max-context: positions the KV report assumes
  std::string kv_dtype = "f32";
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
  // The layer plan (sharing, per-layer geometry) and its KV memory, as generate allocates it.
  std::unique_ptr<Model> model;
  try {
    model = Model::Load(file.name());
  } catch (const Error& e) {
    std::cout << "layer plan: not available (" << e.what() << ")\n";
    return;
  }
  for (const std::string& w : model->warnings()) std::cout << "warning: " << w << "\n";
  const ModelConfig& c = model->config();
  const KvCacheOptions kv{.max_seq = o.max_context,
                          .max_step = std::min(ModelStateOptions{}.max_step, o.max_context),
                          .dtype = ParseKvDtype(o.kv_dtype)};
  std::cout << "layer plan and KV cache at " << o.max_context << " positions, " << o.kv_dtype << " ("
            << c.num_kv_shared_layers << " of " << c.n_layer << " layers KV-shared):\n"
            << EstimateKvMemory(KvSpecOf(c, c.num_kv_shared_layers), kv).ToString();
}

}  // namespace

void RegisterInfo(CLI::App& app) {
  static InfoCliOptions o;
  auto* cmd = app.add_subcommand("info", "Print a GGUF model's metadata, tensor summary and chat template");
  AddModelOption(*cmd, o.model);
  cmd->add_option("model", o.positional, "GGUF file (same as --model; kept for older scripts)");
  cmd->add_option("--max-context", o.max_context, "Positions the KV memory report assumes")
      ->check(CLI::Range(1, 1 << 24));
  AddKvDtypeOption(*cmd, o.kv_dtype);
  cmd->callback([] { RunInfo(o); });
}

}  // namespace kvshare::cli
