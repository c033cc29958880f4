// vision/image_orientation.h — the EXIF orientation tag, applied after
// decoding as HF's image loading does (transformers' load_image calls
// PIL.ImageOps.exif_transpose; its torchvision loader decodes with
// apply_exif_orientation=True), so a phone photo stored sideways reaches
// the encoder upright. Internal to vision/ (image_decode.cc).
#pragma once

#include <cstdint>
#include <span>

#include "kvshare/vision/image.h"
#include "vision/image_format.h"

namespace kvshare::detail {

// The orientation (1..8) that PIL's exif_transpose applies: the tag of the
// file's EXIF block (JPEG APP1 "Exif", PNG eXIf or else ImageMagick's "Raw
// profile type exif" text chunk, WebP EXIF); when that has none, the XMP
// packet's tiff:Orientation (JPEG APP1, PNG "XML:com.adobe.xmp" text,
// WebP "XMP "). 1 (as stored) when there is none or it does not parse.
int ExifOrientation(ImageFormat format, std::span<const std::uint8_t> bytes);

// The image turned upright for `orientation` (2..8: mirror, 180°, flip,
// transpose, 90° clockwise, transverse, 90° counter-clockwise, as
// exif_transpose maps them); 1 and unknown values leave it as it is.
Image ApplyOrientation(Image image, int orientation);

}  // namespace kvshare::detail
