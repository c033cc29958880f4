// vision/image_jpeg.h — JPEG through libjpeg-turbo, the decoder Pillow and
// torchvision use, with their settings (accurate integer IDCT, fancy chroma
// upsampling), so decoded pixels equal what HF's load_image gives.
// Internal to vision/ (image_decode.cc).
#pragma once

#include <cstdint>
#include <span>

#include "kvshare/vision/image.h"

namespace kvshare::detail {

// Decodes JPEG bytes to RGB: grey replicated, Adobe CMYK / YCCK converted as
// Pillow's convert("RGB") does. Throws
// kvshare::Error "corrupt JPEG image: <libjpeg's message>" or for an image
// over `limits` (checked on the header before decoding).
Image DecodeJpeg(std::span<const std::uint8_t> bytes, const ImageLimits& limits);

}  // namespace kvshare::detail
