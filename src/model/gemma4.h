// Gemma 4 family (general.architecture = "gemma4"), text decoder: E2B / E4B
// (per-layer embeddings, KV-shared trailing layers, double-wide MLP), 31B
// (k_eq_v, per-layer KV heads), 26B-A4B (MoE layers). Every hyperparameter comes
// from metadata and from which tensors exist (docs/architecture.md §5).
#pragma once

#include <memory>

#include "kvshare/model/model.h"

namespace kvshare {

// Builds a Gemma 4 model over an opened file. Throws kvshare::Error naming the
// missing or ill-shaped key or tensor, or the unsupported variant.
std::unique_ptr<Model> LoadGemma4(GgufFile file);

}  // namespace kvshare
