// The projector type names of llama.cpp's converter (vision_encoder.h).
#include "kvshare/vision/vision_encoder.h"

namespace kvshare {

const char* ProjectorTypeName(ProjectorType type) {
  switch (type) {
    case ProjectorType::kGemma3: return "gemma3";
    case ProjectorType::kGemma3nV: return "gemma3nv";
    case ProjectorType::kGemma4V: return "gemma4v";
    case ProjectorType::kGemma4UV: return "gemma4uv";
  }
  return "unknown";
}

}  // namespace kvshare
