// EXIF orientation (image_orientation.h).
#include "vision/image_orientation.h"

#include <stb/stb_image.h>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kvshare::detail {
namespace {

using Bytes = std::span<const std::uint8_t>;

// Tag 0x0112 in IFD0 of a TIFF block ("II*\0" or "MM\0*" + IFD offset).
// 0 when the block has no such tag (or does not parse), else its value.
int TiffOrientation(Bytes tiff) {
  // Pillow's Exif.load drops JPEG's "Exif\0\0" prefix, up to twice, wherever
  // the block came from (some writers double it).
  for (int i = 0; i < 2 && tiff.size() >= 6 && std::memcmp(tiff.data(), "Exif\0\0", 6) == 0; ++i) {
    tiff = tiff.subspan(6);
  }
  if (tiff.size() < 8) return 0;
  const bool little = tiff[0] == 'I' && tiff[1] == 'I';
  if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 0;
  auto u16 = [&](std::size_t at) -> std::uint32_t {
    return little ? tiff[at] | (tiff[at + 1] << 8) : (tiff[at] << 8) | tiff[at + 1];
  };
  auto u32 = [&](std::size_t at) -> std::uint32_t {
    return little ? u16(at) | (u16(at + 2) << 16) : (u16(at) << 16) | u16(at + 2);
  };
  const std::size_t ifd = u32(4);
  if (ifd + 2 > tiff.size()) return 0;
  const std::size_t entries = u16(ifd);
  for (std::size_t i = 0; i < entries; ++i) {
    const std::size_t at = ifd + 2 + i * 12;
    if (at + 12 > tiff.size()) return 0;
    if (u16(at) == 0x0112 && u16(at + 2) == 3) return static_cast<int>(u16(at + 8));  // SHORT
  }
  return 0;
}

// Pillow's getexif falls back on XMP's orientation when the EXIF block has
// none: the first match of tiff:Orientation(="|>)([0-9]). 0 when none.
int XmpOrientation(std::string_view xmp) {
  constexpr std::string_view kTag = "tiff:Orientation";
  for (std::size_t at = xmp.find(kTag); at != std::string_view::npos; at = xmp.find(kTag, at + 1)) {
    std::size_t v = at + kTag.size();
    if (v < xmp.size() && xmp[v] == '=' && v + 1 < xmp.size() && xmp[v + 1] == '"') {
      v += 2;
    } else if (v < xmp.size() && xmp[v] == '>') {
      v += 1;
    } else {
      continue;
    }
    if (v < xmp.size() && xmp[v] >= '0' && xmp[v] <= '9') return xmp[v] - '0';
  }
  return 0;
}

std::string_view Text(Bytes b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// What a file says about orientation: its EXIF block and its XMP packet.
struct Metadata {
  Bytes exif;
  std::string xmp;
  int Orientation() const {
    int o = TiffOrientation(exif);
    if (o == 0) o = XmpOrientation(xmp);
    return o >= 1 && o <= 8 ? o : 1;  // another value: exif_transpose leaves the image as stored
  }
};

// The first APP1 "Exif" segment (as Pillow keeps the first) and the last
// APP1 XMP packet (as Pillow keeps the last).
Metadata JpegMetadata(Bytes b) {
  constexpr char kXmp[] = "http://ns.adobe.com/xap/1.0/";  // then a NUL
  Metadata m;
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
    if (marker == 0xE1 && length >= 8 && m.exif.empty() && std::memcmp(&b[at + 4], "Exif\0\0", 6) == 0) {
      m.exif = b.subspan(at + 10, length - 8);
    } else if (marker == 0xE1 && length >= 2 + sizeof kXmp && std::memcmp(&b[at + 4], kXmp, sizeof kXmp) == 0) {
      m.xmp = Text(b.subspan(at + 4 + sizeof kXmp, length - 2 - sizeof kXmp));
    }
    at += 2 + length;
  }
  return m;
}

// The text of a PNG tEXt, zTXt or iTXt chunk keyed `key` ("" when it is
// another key or does not parse). Compressed text over Pillow's
// MAX_TEXT_CHUNK (1 MiB) is skipped: Pillow refuses such a file.
std::string PngText(const std::string& type, Bytes data, std::string_view key) {
  const std::size_t nul = Text(data).find('\0');
  if (nul == std::string_view::npos || Text(data).substr(0, nul) != key) return "";
  Bytes rest = data.subspan(nul + 1);
  bool compressed = type == "zTXt";
  if (type == "zTXt") {
    if (rest.empty()) return "";
    rest = rest.subspan(1);  // compression method
  } else if (type == "iTXt") {
    if (rest.size() < 2) return "";
    compressed = rest[0] != 0;
    rest = rest.subspan(2);
    for (int field = 0; field < 2; ++field) {  // language tag, translated keyword
      const std::size_t end = Text(rest).find('\0');
      if (end == std::string_view::npos) return "";
      rest = rest.subspan(end + 1);
    }
  } else if (type != "tEXt") {
    return "";
  }
  if (!compressed) return std::string(Text(rest));
  std::string out(std::size_t{1} << 20, '\0');
  const int n = stbi_zlib_decode_buffer(out.data(), static_cast<int>(out.size()),
                                        reinterpret_cast<const char*>(rest.data()), static_cast<int>(rest.size()));
  if (n < 0) return "";
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// ImageMagick's "Raw profile type exif" text: a blank line, "exif", the
// length, then hex digits over several lines (Pillow reads lines 3 on).
std::vector<std::uint8_t> RawProfileBytes(std::string_view text) {
  std::size_t at = 0;
  for (int line = 0; line < 3 && at != std::string_view::npos; ++line) {
    at = text.find('\n', at);
    if (at != std::string_view::npos) ++at;
  }
  std::vector<std::uint8_t> out;
  if (at == std::string_view::npos) return out;
  int high = -1;
  for (; at < text.size(); ++at) {
    const char c = text[at];
    const int v = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (c == '\n') continue;
    if (v < 0) return {};  // not hex: bytes.fromhex fails and Pillow reads no EXIF
    if (high < 0) {
      high = v;
    } else {
      out.push_back(static_cast<std::uint8_t>(high * 16 + v));
      high = -1;
    }
  }
  return out;
}

// eXIf, else a "Raw profile type exif" text chunk (ImageMagick's; kept
// in `raw`), and an "XML:com.adobe.xmp" text chunk, anywhere before IEND
// (Pillow reads the chunks after IDAT too before it transposes).
Metadata PngMetadata(Bytes b, std::vector<std::uint8_t>& raw) {
  Metadata m;
  std::size_t at = 8;
  while (at + 12 <= b.size()) {
    const std::size_t length = (std::size_t{b[at]} << 24) | (b[at + 1] << 16) | (b[at + 2] << 8) | b[at + 3];
    if (length > b.size() - at - 12) break;
    const std::string type(reinterpret_cast<const char*>(&b[at + 4]), 4);
    const Bytes data = b.subspan(at + 8, length);
    if (type == "IEND") break;
    if (type == "eXIf" && m.exif.empty()) m.exif = data;
    if (type == "tEXt" || type == "zTXt" || type == "iTXt") {
      if (std::string x = PngText(type, data, "XML:com.adobe.xmp"); !x.empty()) m.xmp = std::move(x);
      if (std::string r = PngText(type, data, "Raw profile type exif"); !r.empty()) raw = RawProfileBytes(r);
    }
    at += 12 + length;
  }
  if (m.exif.empty() && !raw.empty()) m.exif = raw;
  return m;
}

Metadata WebpMetadata(Bytes b) {
  Metadata m;
  std::size_t at = 12;
  while (at + 8 <= b.size()) {
    const std::size_t length = b[at + 4] | (b[at + 5] << 8) | (b[at + 6] << 16) | (std::size_t{b[at + 7]} << 24);
    if (length > b.size() - at - 8) break;
    // Some writers keep JPEG's "Exif\0\0" prefix in EXIF: TiffOrientation drops it.
    if (std::memcmp(&b[at], "EXIF", 4) == 0 && m.exif.empty()) m.exif = b.subspan(at + 8, length);
    if (std::memcmp(&b[at], "XMP ", 4) == 0) m.xmp = Text(b.subspan(at + 8, length));
    at += 8 + length + (length & 1);
  }
  return m;
}

}  // namespace

int ExifOrientation(ImageFormat format, std::span<const std::uint8_t> bytes) {
  switch (format) {
    case ImageFormat::kJpeg: return JpegMetadata(bytes).Orientation();
    case ImageFormat::kPng: {
      std::vector<std::uint8_t> raw;  // holds a raw profile's bytes while they are read
      return PngMetadata(bytes, raw).Orientation();
    }
    case ImageFormat::kWebp: return WebpMetadata(bytes).Orientation();
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
