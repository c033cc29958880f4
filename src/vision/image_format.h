// vision/image_format.h — what an encoded image is before any decoder runs:
// the format from its signature (naming the ones kvshare does not read) and a
// walk of the container that tells a truncated file from a corrupt one.
// Internal to vision/ (image_decode.cc; docs/vision.md "Decoding").
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kvshare::detail {

enum class ImageFormat { kJpeg, kPng, kGif, kBmp, kWebp, kOther };

struct SniffedFormat {
  ImageFormat format = ImageFormat::kOther;
  // "JPEG", "PNG", ... for the formats read; for kOther the format named by
  // its signature ("TIFF", "HEIC/HEIF", "SVG/XML", ...) or "" when unknown.
  std::string name;
};

SniffedFormat SniffImageFormat(std::span<const std::uint8_t> bytes);

// Walks the container structure of a JPEG, PNG, GIF, BMP or WebP file far
// enough to know that the data the decoder needs is all there (PNG: up to
// IEND; JPEG: an EOI after the first scan; GIF: the first frame's data;
// BMP: the uncompressed pixel array; WebP: the RIFF size). Throws
// kvshare::Error "truncated <format> ..." when the bytes end early. It does
// not judge the content: that is the decoder's job.
void CheckImageComplete(ImageFormat format, std::span<const std::uint8_t> bytes);

}  // namespace kvshare::detail
