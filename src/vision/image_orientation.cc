// EXIF orientation (image_orientation.h).
#include "vision/image_orientation.h"

#include <cstring>

namespace kvshare::detail {
namespace {

using Bytes = std::span<const std::uint8_t>;

// Tag 0x0112 in IFD0 of a TIFF block ("II*\0" or "MM\0*" + IFD offset).
int TiffOrientation(Bytes tiff) {
  if (tiff.size() < 8) return 1;
  const bool little = tiff[0] == 'I' && tiff[1] == 'I';
  if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
  auto u16 = [&](std::size_t at) -> std::uint32_t {
    return little ? tiff[at] | (tiff[at + 1] << 8) : (tiff[at] << 8) | tiff[at + 1];
  };
  auto u32 = [&](std::size_t at) -> std::uint32_t {
    return little ? u16(at) | (u16(at + 2) << 16) : (u16(at) << 16) | u16(at + 2);
  };
  const std::size_t ifd = u32(4);
  if (ifd + 2 > tiff.size()) return 1;
  const std::size_t entries = u16(ifd);
  for (std::size_t i = 0; i < entries; ++i) {
    const std::size_t at = ifd + 2 + i * 12;
    if (at + 12 > tiff.size()) return 1;
    if (u16(at) == 0x0112 && u16(at + 2) == 3) {  // SHORT
      const int value = static_cast<int>(u16(at + 8));
      return value >= 1 && value <= 8 ? value : 1;
    }
  }
  return 1;
}

Bytes JpegExif(Bytes b) {
  std::size_t at = 2;
  while (at + 4 <= b.size() && b[at] == 0xFF) {
    const std::uint8_t marker = b[at + 1];
    if (marker == 0xDA || marker == 0xD9) break;  // the scan: no metadata after it matters
    if (marker == 0xFF) {
      ++at;
      continue;
    }
    const std::size_t length = (std::size_t{b[at + 2]} << 8) | b[at + 3];
    if (length < 2 || at + 2 + length > b.size()) break;
    if (marker == 0xE1 && length >= 8 && std::memcmp(&b[at + 4], "Exif\0\0", 6) == 0) {
      return b.subspan(at + 10, length - 8);
    }
    at += 2 + length;
  }
  return {};
}

Bytes PngExif(Bytes b) {
  std::size_t at = 8;
  while (at + 12 <= b.size()) {
    const std::size_t length = (std::size_t{b[at]} << 24) | (b[at + 1] << 16) | (b[at + 2] << 8) | b[at + 3];
    if (length > b.size() - at - 12) break;
    if (std::memcmp(&b[at + 4], "eXIf", 4) == 0) return b.subspan(at + 8, length);
    if (std::memcmp(&b[at + 4], "IEND", 4) == 0) break;
    at += 12 + length;
  }
  return {};
}

Bytes WebpExif(Bytes b) {
  std::size_t at = 12;
  while (at + 8 <= b.size()) {
    const std::size_t length = b[at + 4] | (b[at + 5] << 8) | (b[at + 6] << 16) | (std::size_t{b[at + 7]} << 24);
    if (length > b.size() - at - 8) break;
    if (std::memcmp(&b[at], "EXIF", 4) == 0) {
      Bytes exif = b.subspan(at + 8, length);
      // Some writers keep JPEG's "Exif\0\0" prefix.
      if (exif.size() >= 6 && std::memcmp(exif.data(), "Exif\0\0", 6) == 0) exif = exif.subspan(6);
      return exif;
    }
    at += 8 + length + (length & 1);
  }
  return {};
}

}  // namespace

int ExifOrientation(ImageFormat format, std::span<const std::uint8_t> bytes) {
  switch (format) {
    case ImageFormat::kJpeg: return TiffOrientation(JpegExif(bytes));
    case ImageFormat::kPng: return TiffOrientation(PngExif(bytes));
    case ImageFormat::kWebp: return TiffOrientation(WebpExif(bytes));
    default: return 1;
  }
}

Image ApplyOrientation(Image image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int w = image.width, h = image.height;
  const bool swap = orientation >= 5;  // the 90° family: width and height trade places
  Image out{swap ? h : w, swap ? w : h, std::vector<std::uint8_t>(image.rgb.size())};
  for (int r = 0; r < out.height; ++r) {
    for (int c = 0; c < out.width; ++c) {
      int sr = r, sc = c;  // the source row and column of output (r, c)
      switch (orientation) {
        case 2: sc = w - 1 - c; break;                  // mirror left-right
        case 3: sr = h - 1 - r, sc = w - 1 - c; break;  // 180°
        case 4: sr = h - 1 - r; break;                  // flip top-bottom
        case 5: sr = c, sc = r; break;                  // transpose
        case 6: sr = h - 1 - c, sc = r; break;          // 90° clockwise
        case 7: sr = h - 1 - c, sc = w - 1 - r; break;  // transverse
        case 8: sr = c, sc = w - 1 - r; break;          // 90° counter-clockwise
      }
      std::memcpy(&out.rgb[(std::size_t(r) * out.width + c) * 3], &image.rgb[(std::size_t(sr) * w + sc) * 3], 3);
    }
  }
  return out;
}

}  // namespace kvshare::detail
