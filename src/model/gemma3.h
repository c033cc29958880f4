// Gemma 3 family (general.architecture = "gemma3"), any size; see
// reference/model_perf.md §2 for the graph. Hyperparameters come from metadata.
#pragma once

#include <memory>

#include "kvshare/model.h"

namespace kvshare {

// Builds a Gemma 3 model over an opened file. Throws kvshare::Error naming the
// missing key or tensor.
std::unique_ptr<Model> LoadGemma3(GgufFile file);

}  // namespace kvshare
