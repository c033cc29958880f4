// Gemma 3n's image encoder: MobileNet-V5 with its multi-scale fusion and the
// vision embedder (projector type gemma3nv; docs/vision_mobilenet_v5.md). Internal to
// src/vision: VisionEncoder::Load dispatches here.
#pragma once

#include <memory>

#include "kvshare/gguf/gguf.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare::detail {

// The encoder of a gemma3nv mmproj. `config` comes from the loader
// (projector kGemma3nV, image_size; n_embd_text 0 or the projection's output
// width); the structure (stages, blocks, kernels, channels, attention heads)
// comes from the tensor names and shapes. Throws kvshare::Error for missing,
// unknown or ill-shaped tensors and for a geometry the fusion cannot pool.
std::unique_ptr<VisionEncoder> LoadMobileNetV5(GgufFile file, const VisionConfig& config);

}  // namespace kvshare::detail
