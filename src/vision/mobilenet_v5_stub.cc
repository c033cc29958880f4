// Placeholder for Gemma 3n's MobileNet-V5 encoder until src/vision/
// mobilenet_v5.cc (branch vis-mnv5) replaces this file.
#include "kvshare/common/error.h"
#include "vision/mobilenet_v5.h"

namespace kvshare::detail {

std::unique_ptr<VisionEncoder> LoadMobileNetV5(GgufFile file, const VisionConfig& config) {
  (void)file;
  (void)config;
  throw Error("gemma3nv (Gemma 3n MobileNet-V5) encoder not built yet");
}

}  // namespace kvshare::detail
