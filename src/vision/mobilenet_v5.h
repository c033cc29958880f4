// Gemma 3n's vision encoder (MobileNet-V5 with its multi-scale fusion and the
// vision embedder), projector type gemma3nv. Internal to src/vision.
#pragma once

#include <memory>

#include "kvshare/gguf/gguf.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare::detail {

// The gemma3nv encoder of `file`, with `config` from ReadVisionConfig
// (mmproj.h). Throws kvshare::Error naming a missing or ill-shaped tensor.
std::unique_ptr<VisionEncoder> LoadMobileNetV5(GgufFile file, const VisionConfig& config);

}  // namespace kvshare::detail
