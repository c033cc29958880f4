#include "kvshare/common/encoder_precision.h"

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare {

const char* EncoderPrecisionName(EncoderPrecision precision) {
  switch (precision) {
    case EncoderPrecision::kAuto: return "auto";
    case EncoderPrecision::kF32: return "f32";
    case EncoderPrecision::kBF16: return "bf16";
  }
  return "?";
}

EncoderPrecision EncoderPrecisionFromName(const std::string& name, std::string_view what) {
  for (EncoderPrecision p : {EncoderPrecision::kAuto, EncoderPrecision::kF32, EncoderPrecision::kBF16}) {
    if (name == EncoderPrecisionName(p)) return p;
  }
  throw Error(detail::Str(what, " precision '", name, "' is not one of auto, f32, bf16"));
}

}  // namespace kvshare
