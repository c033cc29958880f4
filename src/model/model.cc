// Model::Load (architecture dispatch) and the cache spec of a config.
#include "kvshare/model/model.h"

#include <algorithm>

#include "common/cpu_amx.h"
#include "kvshare/common/error.h"
#include "model/gemma3.h"
#include "model/gemma3n.h"
#include "model/gemma4.h"
#include "quant/bf16_tiles.h"

namespace kvshare {

std::string Bf16WeightsUnavailableReason() { return detail::AmxBf16UnusableReason(); }

std::unique_ptr<Model> Model::Load(const std::string& path, const ModelLoadOptions& options) {
  const PackOptions pack{.float_weights_bf16 = options.weight_precision == GqaMatMulPrecision::kBf16};
  if (pack.float_weights_bf16 && !detail::AmxBf16Usable()) {
    throw Error(
        "weight precision bf16 runs the F32 / F16 / BF16 weight matrices on Intel AMX tiles (AMX-BF16), and "
        "this process has none usable (" +
        Bf16WeightsUnavailableReason() + "); use weight precision f32");
  }
  GgufFile file = GgufFile::Open(path);
  const std::string arch(file.GetStringOpt("general.architecture").value_or(""));
  if (arch == "gemma3" || arch == "gemma-embedding") return LoadGemma3(std::move(file), arch, pack);
  if (arch == "gemma4") return LoadGemma4(std::move(file), pack);
  if (arch == "gemma3n") return LoadGemma3n(std::move(file), pack);
  if (arch == "gemma4-assistant") {
    throw Error(
        "model " + path +
        " is a Gemma 4 assistant (gemma4-assistant): a drafter that reads its target's "
        "KV cache, not a model of its own; give it as the draft model (--draft-model) next to its Gemma 4 target");
  }
  throw Error("model " + path + ": architecture '" + arch +
              "' is not supported (supported: gemma3, gemma3n, gemma4, gemma-embedding)");
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

}  // namespace kvshare
