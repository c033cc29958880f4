// Model::Load (architecture dispatch), the cache spec of a config, and ReadVocab.
#include "kvshare/model.h"

#include <algorithm>

#include "kvshare/error.h"
#include "model/gemma3.h"
#include "model/gemma3n.h"
#include "model/gemma4.h"

namespace kvshare {

std::unique_ptr<Model> Model::Load(const std::string& path) {
  GgufFile file = GgufFile::Open(path);
  const std::string arch(file.GetStringOpt("general.architecture").value_or(""));
  if (arch == "gemma3") return LoadGemma3(std::move(file));
  if (arch == "gemma4") return LoadGemma4(std::move(file));
  if (arch == "gemma3n") return LoadGemma3n(std::move(file));
  if (arch == "gemma4-assistant") {
    throw Error("model " + path + " is a Gemma 4 assistant (gemma4-assistant): a drafter that reads its target's "
                "KV cache, not a model of its own; give it as the draft model (--draft-model) next to its Gemma 4 target");
  }
  throw Error("model " + path + ": architecture '" + arch +
              "' is not supported (supported: gemma3, gemma3n, gemma4)");
}

ModelKvSpec KvSpecOf(const ModelConfig& c, int num_kv_shared_layers) {
  ModelKvSpec spec;
  spec.num_kv_shared_layers = num_kv_shared_layers;
  for (int i = 0; i < c.n_layer; ++i) {
    const bool swa = c.is_sliding[static_cast<std::size_t>(i)];
    spec.layers.push_back(LayerSpec{.type = swa ? AttentionType::kSliding : AttentionType::kFull,
                                    .window = swa ? c.sliding_window : 0,
                                    .kv_heads = c.layer_n_head_kv[static_cast<std::size_t>(i)],
                                    .head_size = c.layer_head_dim[static_cast<std::size_t>(i)],
                                    .rope_base = swa ? c.rope_base_sliding : c.rope_base_full});
  }
  return spec;
}

int MaxKvSharedLayers(const ModelConfig& c) {
  // Valid n form a prefix [0, max]: raising n only moves the first shared
  // layer down, so a source that is missing for n stays missing for n + 1
  // (layers of one type share N_kv and H in the families supported).
  int best = 0;
  for (int n = 1; n < c.n_layer; ++n) {
    try {
      BuildLayerPlan(KvSpecOf(c, n));
    } catch (const Error&) {
      break;
    }
    best = n;
  }
  return best;
}

VocabData ReadVocab(const GgufFile& file) {
  VocabData v;
  for (std::string_view t : file.GetStringArray("tokenizer.ggml.tokens")) v.tokens.emplace_back(t);
  if (file.Has("tokenizer.ggml.scores")) {
    v.scores = file.GetF32Array("tokenizer.ggml.scores");
  } else {
    v.scores.assign(v.tokens.size(), 0.0f);
  }
  v.token_types = file.GetI32Array("tokenizer.ggml.token_type");
  auto id = [&](const char* key) { return file.GetI32Opt(key).value_or(-1); };
  v.bos = id("tokenizer.ggml.bos_token_id");
  v.eos = id("tokenizer.ggml.eos_token_id");
  v.pad = id("tokenizer.ggml.padding_token_id");
  v.unk = id("tokenizer.ggml.unknown_token_id");
  if (v.unk < 0) {  // files whose converter left the key out: the "<unk>" piece, as llama.cpp's SPM default
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), "<unk>");
    if (it != v.tokens.end()) v.unk = static_cast<int32_t>(it - v.tokens.begin());
  }
  v.add_bos = file.GetBoolOr("tokenizer.ggml.add_bos_token", true);
  v.add_eos = file.GetBoolOr("tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = file.GetBoolOr("tokenizer.ggml.add_space_prefix", false);
  v.model = std::string(file.GetStringOpt("tokenizer.ggml.model").value_or("llama"));
  if (v.model == "gemma4") {
    if (!file.Has("tokenizer.ggml.merges")) {
      throw Error("tokenizer.ggml.merges is missing; it is required for tokenizer.ggml.model = "
                  "\"gemma4\"");
    }
    for (std::string_view m : file.GetStringArray("tokenizer.ggml.merges")) v.merges.emplace_back(m);
    // As llama.cpp loads it: BOS always (PR 21500), no space prefix (BPE), and
    // its Gemma 4 end-of-generation tokens are CONTROL: the converter makes
    // <|tool_response> USER_DEFINED, llama.cpp then parses it only as special
    // text and hides it when decoding without special tokens.
    v.add_bos = true;
    v.add_space_prefix = false;
    for (std::size_t i = 0; i < v.tokens.size() && i < v.token_types.size(); ++i) {
      const std::string& t = v.tokens[i];
      if (t == "<eos>" || t == "<turn|>" || t == "<|tool_response>") {
        v.token_types[i] = static_cast<std::int32_t>(TokenType::kControl);
      }
    }
  } else if (v.model != "llama") {
    throw Error("tokenizer.ggml.model = \"" + v.model +
                "\" is not supported (supported: \"llama\", \"gemma4\")");
  }
  return v;
}

}  // namespace kvshare
