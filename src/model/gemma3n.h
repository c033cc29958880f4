// Gemma 3n family (general.architecture = "gemma3n"), text decoder: AltUp
// streams, Laurel, per-layer embeddings, activation sparsity, KV-shared
// trailing layers. Every hyperparameter comes from metadata and from the
// tensors (docs/gemma3n.md).
#pragma once

#include <memory>

#include "kvshare/model/model.h"

namespace kvshare {

// Builds a Gemma 3n model over an opened file. Throws kvshare::Error naming
// the missing or ill-shaped key or tensor (an AltUp count that does not match
// the projections, a sparsity array of the wrong length).
std::unique_ptr<Model> LoadGemma3n(GgufFile file);

}  // namespace kvshare
