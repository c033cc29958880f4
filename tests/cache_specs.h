// Model KV specs of the reference models (docs/architecture.md §5, §7).
#pragma once

#include "kvshare/cache/kv_cache.h"

namespace kvshare::testing {

// Layers full when (i + 1) % period == 0, sliding otherwise.
inline ModelKvSpec PatternSpec(int layers, int period, int shared, LayerSpec sliding, LayerSpec full) {
  ModelKvSpec spec;
  for (int i = 0; i < layers; ++i) spec.layers.push_back((i + 1) % period == 0 ? full : sliding);
  spec.num_kv_shared_layers = shared;
  return spec;
}

// Gemma 3n: full when (i+1) % 5 == 0, W 512, 2 KV heads, H 256. E2B: 30 layers,
// 10 shared; E4B: 35 layers, 15 shared.
inline ModelKvSpec Gemma3nSpec(int layers, int shared) {
  return PatternSpec(layers, 5, shared, LayerSpec{AttentionType::kSliding, 512, 2, 256, 1e4f},
                     LayerSpec{AttentionType::kFull, 0, 2, 256, 1e6f});
}

// Gemma 4 E2B: 35 layers (4 sliding + 1 full), 20 shared, W 512, N_kv 1,
// H 256 sliding / 512 full.
inline ModelKvSpec Gemma4E2bSpec() {
  return PatternSpec(35, 5, 20, LayerSpec{AttentionType::kSliding, 512, 1, 256, 1e4f},
                     LayerSpec{AttentionType::kFull, 0, 1, 512, 1e6f});
}

}  // namespace kvshare::testing
