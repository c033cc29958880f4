// kvshare/common/encoder_precision.h — the arithmetic of the matrix products
// in an mmproj's encoders, the image ones (vision/vision_encoder.h) and the
// audio ones (audio/audio_encoder.h) alike.
#pragma once

#include <string>
#include <string_view>

namespace kvshare {

enum class EncoderPrecision {
  kAuto,  // kBF16 where the encoder's block matrices are all F16 / BF16 and the
          // CPU has native bf16 dot products (AVX512_BF16 or AMX), else kF32
          // (docs/vision.md and docs/audio.md "Precision" name the matrices)
  kF32,
  kBF16,  // needs AVX-512 (oneDNN's bf16 matmul; emulated, slowly, without AVX512_BF16)
};

// "auto", "f32", "bf16".
const char* EncoderPrecisionName(EncoderPrecision precision);
// The inverse; throws kvshare::Error "<what> precision 'x' is not one of
// auto, f32, bf16" (what: "vision", "audio", ...).
EncoderPrecision EncoderPrecisionFromName(const std::string& name, std::string_view what);

}  // namespace kvshare
