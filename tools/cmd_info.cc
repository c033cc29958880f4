// `kvshare info [--model PATH]`: prints the GGUF summary (kvshare/gguf/model_info.h),
// the chat format the file selects (kvshare/runtime/chat_template.h) and, for a
// supported architecture, the layer plan with the KV memory it takes.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "kv_options.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/gguf/model_info.h"
#include "kvshare/gguf/vocab.h"
#include "kvshare/model/gemma4_assistant.h"
#include "kvshare/model/model.h"
#include "kvshare/quant/kernel_level.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/runtime/speculative.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "kvshare/vision/vision_encoder.h"
#include "model_path.h"

namespace kvshare::cli {
namespace {

struct InfoCliOptions {
  std::string model;       // --model PATH
  std::string positional;  // `kvshare info PATH`, the older form
  int max_context = 4096;  // --max-context: positions the KV report assumes
  std::string kv_dtype = "f32";
  std::string draft_model;  // --draft-model: how it drafts for this target
  std::string mmproj;       // --mmproj: the vision encoder's geometry, and whether it fits the model
};

// An mmproj's encoder geometry; with `text`, whether it fits that model and
// how the model attends among an image's tokens.
void PrintMmproj(const std::string& path, const Model* text) {
  const std::unique_ptr<VisionEncoder> enc = VisionEncoder::Load(path);
  const VisionConfig& v = enc->config();
  std::cout << "vision encoder " << path << ": " << ProjectorTypeName(v.projector) << "\n  input: ";
  if (v.image_size > 0) {
    std::cout << v.image_size << " x " << v.image_size << " px";
  } else {
    std::cout << "variable size, sides multiples of " << v.patch_size * v.pool
              << " px, within a soft-token budget (70 / 140 / 280 / 560 / 1120; default 280)";
  }
  std::cout << "\n  patch " << v.patch_size << " px, pool " << v.pool << ", width " << v.n_embd;
  if (v.n_layer > 0) std::cout << ", " << v.n_layer << " layers, " << v.n_head << " heads of " << v.head_dim;
  if (v.n_ff > 0) std::cout << ", feed-forward " << v.n_ff;
  std::cout << "\n  output: " << v.n_embd_text << " wide soft tokens\n";
  if (text == nullptr) return;
  CheckMmprojFitsText(v, text->config().n_embd);
  const Tokenizer tok(ReadVocab(text->gguf()));
  // Throws when the vocabulary lacks the image markers (or, Gemma 3n, the end
  // marker lies outside the mmproj's vision vocabulary).
  const ImageSplicer splicer(tok, *enc);
  const ImageAttention mode = text->config().image_attention;
  std::cout << "  fits this model (width " << text->config().n_embd << ", image markers in its vocabulary); an "
            << "image's tokens see each other "
            << (mode == ImageAttention::kCausal      ? "on no layer (causal)"
                : mode == ImageAttention::kAllLayers ? "on every layer"
                                                     : "on sliding layers")
            << "\n";
  if (splicer.hard_vocab() > 0) {
    std::cout << "  ids [" << splicer.hard_offset() << ", " << splicer.hard_offset() + splicer.hard_vocab()
              << ") (the vision vocabulary, <end_of_image> included) are embedded by the mmproj's mm.embedding, as "
              << "HF does (llama.cpp: the text table)\n";
  }
}

// --draft-model next to the target: a Gemma 4 assistant's layer map onto the
// target's cache, or a draft model's own cache.
void PrintDrafter(const std::string& path, const Model& target) {
  std::cout << "draft model " << path << ":\n";
  if (!IsAssistantGguf(path)) {
    const std::unique_ptr<Model> draft = LoadModel(path);
    MakeDraftModelDrafter(*draft, target, {});  // throws when the vocabularies differ
    std::cout << "  a separate " << draft->config().architecture << " model (" << draft->config().n_layer
              << " layers) with the target's vocabulary; it keeps its own KV cache\n";
    return;
  }
  const std::unique_ptr<AssistantModel> a = AssistantModel::Load(path);
  const ModelConfig& tc = target.config();
  const LayerPlan plan = BuildLayerPlan(KvSpecOf(tc, tc.num_kv_shared_layers));
  const AssistantConfig& ac = a->config();
  std::cout << "  Gemma 4 assistant: " << ac.n_layer << " layers, width " << ac.n_embd << " (target width "
            << ac.n_embd_backbone << "), " << (ac.ordered_embeddings ? "centroid-masked" : "tied") << " LM head; "
            << "every layer reads the target's KV cache (no cache of its own):\n";
  for (const AssistantLayerSource& s : a->Sources(target, plan)) {
    const std::size_t l = static_cast<std::size_t>(s.layer);
    std::cout << "    drafter layer " << s.layer << " (" << AttentionTypeName(s.type) << ", H " << ac.layer_head_dim[l]
              << ", " << ac.layer_n_head_kv[l] << " KV head" << (ac.layer_n_head_kv[l] == 1 ? "" : "s")
              << ") reads target layer " << s.target_layer;
    if (s.cache_layer != s.target_layer) std::cout << " (KV-shared: the cache of layer " << s.cache_layer << ")";
    std::cout << "\n";
  }
}

void RunInfo(const InfoCliOptions& o) {
  if (!o.model.empty() && !o.positional.empty() && o.model != o.positional) {
    throw Error("two models given ('" + o.positional + "' and --model '" + o.model + "'); give one, with --model PATH");
  }
  const GgufFile file = GgufFile::Open(ResolveModel(o.model.empty() ? o.positional : o.model));
  PrintModelInfo(file, std::cout);
  if (file.GetStringOpt("general.architecture").value_or("") == "clip") {  // an mmproj given as the model
    PrintMmproj(file.name(), nullptr);
    return;
  }
  std::cout << "matmul kernel: " << MatMulKernelDescription() << "\n";
  // Whether the bf16 tile products (--weight-precision / --attention-precision bf16) run here.
  const std::string no_bf16 = Bf16WeightsUnavailableReason();
  std::cout << "bf16 tiles (--weight-precision, --attention-precision bf16): "
            << (no_bf16.empty() ? std::string("usable") : "not usable (" + no_bf16 + ")") << "\n";
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
  if (!o.draft_model.empty()) PrintDrafter(ResolveModel(o.draft_model), *model);
  if (!o.mmproj.empty()) PrintMmproj(o.mmproj, model.get());
}

}  // namespace

void RegisterInfo(CLI::App& app) {
  static InfoCliOptions o;
  auto* cmd = app.add_subcommand(
      "info", "Print a GGUF model's metadata, tensor summary, chat template, layer plan and KV cache bytes");
  AddModelOption(*cmd, o.model);
  cmd->add_option("model", o.positional, "GGUF file (same as --model; kept for older scripts)");
  cmd->add_option("--max-context", o.max_context, "Positions the KV memory report assumes")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  AddKvDtypeOption(*cmd, o.kv_dtype);
  cmd->add_option("--draft-model", o.draft_model,
                  "A draft model or Gemma 4 assistant GGUF: also print how it drafts for this model (for an assistant, "
                  "which target cache each of its layers reads)");
  cmd->add_option("--mmproj", o.mmproj,
                  "An mmproj GGUF (vision encoder): also print its geometry and whether it fits this model");
  cmd->callback([] { RunInfo(o); });
}

}  // namespace kvshare::cli
