// Image signatures and container walks (image_format.h).
#include "vision/image_format.h"

#include <cctype>
#include <cstring>
#include <string_view>

#include "kvshare/common/error.h"

namespace kvshare::detail {
namespace {

using Bytes = std::span<const std::uint8_t>;

// `sig` is a string literal whose embedded NULs count (the terminator does not).
template <std::size_t N>
bool StartsWith(Bytes b, std::size_t at, const char (&sig)[N]) {
  return b.size() >= at + N - 1 && std::memcmp(b.data() + at, sig, N - 1) == 0;
}

std::uint32_t Be32(Bytes b, std::size_t at) {
  return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) | (std::uint32_t{b[at + 2]} << 8) | b[at + 3];
}
std::uint32_t Le32(Bytes b, std::size_t at) {
  return std::uint32_t{b[at]} | (std::uint32_t{b[at + 1]} << 8) | (std::uint32_t{b[at + 2]} << 16) |
         (std::uint32_t{b[at + 3]} << 24);
}
std::uint16_t Le16(Bytes b, std::size_t at) { return static_cast<std::uint16_t>(b[at] | (b[at + 1] << 8)); }

// ISO base media files (HEIF, AVIF, MP4) say what they are in the ftyp box's brand.
std::string IsoMediaName(Bytes b) {
  if (!StartsWith(b, 4, "ftyp") || b.size() < 12) return "";
  const std::string brand(reinterpret_cast<const char*>(b.data()) + 8, 4);
  for (const char* heif : {"heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1"}) {
    if (brand == heif) return "HEIC/HEIF";
  }
  if (brand == "avif" || brand == "avis") return "AVIF";
  return "ISO media ('" + brand + "', e.g. MP4/MOV video)";
}

// Text formats: skip a UTF-8 byte-order mark and leading white space.
std::string TextFormatName(Bytes b) {
  std::size_t i = StartsWith(b, 0, "\xEF\xBB\xBF") ? 3 : 0;
  while (i < b.size() && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n')) ++i;
  const std::string_view s(reinterpret_cast<const char*>(b.data()) + i, b.size() - i);
  auto starts_nocase = [&](std::string_view p) {
    if (s.size() < p.size()) return false;
    for (std::size_t k = 0; k < p.size(); ++k) {
      if (std::tolower(static_cast<unsigned char>(s[k])) != p[k]) return false;
    }
    return true;
  };
  if (starts_nocase("<svg") || starts_nocase("<?xml")) return "SVG/XML";
  if (starts_nocase("<!doctype html") || starts_nocase("<html")) return "HTML";
  if (starts_nocase("data:")) return "a data: URL (decode its base64 payload first)";
  // Base64 text of a PNG or JPEG: the bytes were never decoded.
  if (s.starts_with("iVBORw0KGgo") || s.starts_with("/9j/")) return "base64 text (decode it first)";
  return "";
}

std::string OtherFormatName(Bytes b) {
  if (StartsWith(b, 0, "II*\0") || StartsWith(b, 0, "MM\0*")) return "TIFF";
  if (StartsWith(b, 0, "II+\0") || StartsWith(b, 0, "MM\0+")) return "BigTIFF";
  if (std::string iso = IsoMediaName(b); !iso.empty()) return iso;
  if (StartsWith(b, 0, "\0\0\0\x0CjP  ") || StartsWith(b, 0, "\xFF\x4F\xFF\x51")) return "JPEG 2000";
  if (StartsWith(b, 0, "\0\0\0\x0CJXL ") || StartsWith(b, 0, "\xFF\x0A")) return "JPEG XL";
  if (StartsWith(b, 0, "%PDF")) return "PDF";
  if (StartsWith(b, 0, "8BPS")) return "PSD";
  if (StartsWith(b, 0, "\0\0\1\0") || StartsWith(b, 0, "\0\0\2\0")) return "ICO/CUR";
  if (StartsWith(b, 0, "qoif")) return "QOI";
  if (StartsWith(b, 0, "\x76\x2F\x31\x01")) return "OpenEXR";
  if (StartsWith(b, 0, "#?RADIANCE") || StartsWith(b, 0, "#?RGBE")) return "Radiance HDR";
  if (StartsWith(b, 0, "RIFF")) return "RIFF (not WebP)";
  if (StartsWith(b, 0, "\x1F\x8B")) return "gzip";
  if (StartsWith(b, 0, "PK\3\4")) return "ZIP";
  if (b.size() >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7' && (b[2] == '\n' || b[2] == ' ' || b[2] == '\r'))
    return "PNM";
  return TextFormatName(b);
}

[[noreturn]] void Truncated(const char* format, std::size_t size, const std::string& where) {
  throw Error("truncated " + std::string(format) + " image: the data ends at byte " + std::to_string(size) + ", " +
              where);
}

void CheckPng(Bytes b) {
  std::size_t at = 8;
  while (true) {
    if (at + 8 > b.size()) Truncated("PNG", b.size(), at == 8 ? "before its header chunk" : "before the IEND chunk");
    const std::uint32_t length = Be32(b, at);
    const std::string type(reinterpret_cast<const char*>(b.data()) + at + 4, 4);
    if (length > 0x7FFFFFFFu)
      throw Error("corrupt PNG image: chunk '" + type + "' claims " + std::to_string(length) + " bytes");
    if (b.size() - at - 8 < std::size_t{length} + 4) Truncated("PNG", b.size(), "inside chunk '" + type + "'");
    if (type == "IEND") return;
    at += 12 + std::size_t{length};
  }
}

void CheckJpeg(Bytes b) {
  // Marker segments up to the first scan (SOS); entropy-coded data holds no
  // unstuffed 0xFF other than restart markers, so an EOI after the first SOS
  // means the last scan ended.
  std::size_t at = 2;
  while (true) {
    if (at + 2 > b.size()) Truncated("JPEG", b.size(), "before its first scan");
    if (b[at] != 0xFF) return;  // not a marker: the decoder will say what is wrong
    const std::uint8_t marker = b[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
      at += 2;
      continue;
    }
    if (marker == 0xD9) return;  // EOI before any scan: corrupt, the decoder's call
    if (at + 4 > b.size()) Truncated("JPEG", b.size(), "inside a marker segment");
    const std::size_t length = (std::size_t{b[at + 2]} << 8) | b[at + 3];
    if (at + 2 + length > b.size()) Truncated("JPEG", b.size(), "inside a marker segment");
    at += 2 + length;
    if (marker == 0xDA) break;
  }
  for (std::size_t i = at; i + 1 < b.size(); ++i) {
    if (b[i] == 0xFF && b[i + 1] == 0xD9) return;
  }
  Truncated("JPEG", b.size(), "inside the image data (no end-of-image marker)");
}

void CheckGif(Bytes b) {
  std::size_t at = 13;
  if (b.size() < at) Truncated("GIF", b.size(), "inside its header");
  if (b[10] & 0x80) at += 3u << ((b[10] & 7) + 1);  // global color table
  auto skip_sub_blocks = [&] {
    while (true) {
      if (at >= b.size()) Truncated("GIF", b.size(), "inside the first frame");
      const std::size_t n = b[at++];
      if (n == 0) return;
      at += n;
    }
  };
  while (true) {
    if (at >= b.size()) Truncated("GIF", b.size(), "before the first frame");
    const std::uint8_t block = b[at];
    if (block == 0x21) {  // extension: label then sub-blocks
      at += 2;
      skip_sub_blocks();
    } else if (block == 0x2C) {  // image descriptor, local color table, LZW code size, data
      if (at + 10 > b.size()) Truncated("GIF", b.size(), "inside the first frame");
      const std::uint8_t flags = b[at + 9];
      at += 10;
      if (flags & 0x80) at += 3u << ((flags & 7) + 1);
      at += 1;
      skip_sub_blocks();
      return;
    } else {
      return;  // trailer or garbage before any frame: the decoder's call
    }
  }
}

void CheckBmp(Bytes b) {
  if (b.size() < 30) Truncated("BMP", b.size(), "inside its header");
  const std::uint32_t offset = Le32(b, 10);
  const std::uint32_t header = Le32(b, 14);
  std::int64_t width = 0, height = 0;
  std::uint32_t bpp = 0, compression = 0;
  if (header == 12) {
    width = Le16(b, 18);
    height = Le16(b, 20);
    bpp = Le16(b, 24);
  } else if (header >= 40 && b.size() >= 34) {
    width = static_cast<std::int32_t>(Le32(b, 18));
    height = static_cast<std::int32_t>(Le32(b, 22));
    bpp = Le16(b, 28);
    compression = Le32(b, 30);
  } else {
    return;
  }
  if (height < 0) height = -height;
  // Uncompressed (BI_RGB, BI_BITFIELDS) pixel arrays have a known size; RLE
  // data is left to the decoder. Nonsense sizes too.
  if ((compression != 0 && compression != 3) || width <= 0 || width > (1 << 24) || height > (1 << 24) || bpp == 0 ||
      bpp > 32)
    return;
  const std::int64_t stride = (width * bpp + 31) / 32 * 4;
  if (static_cast<std::int64_t>(offset) + stride * height > static_cast<std::int64_t>(b.size()))
    Truncated("BMP", b.size(), "inside the pixel rows (" + std::to_string(offset + stride * height) + " needed)");
}

void CheckWebp(Bytes b) {
  const std::uint64_t riff = Le32(b, 4);
  if (riff + 8 > b.size())
    Truncated("WebP", b.size(), "inside the RIFF container (" + std::to_string(riff + 8) + " bytes)");
}

}  // namespace

SniffedFormat SniffImageFormat(std::span<const std::uint8_t> b) {
  if (StartsWith(b, 0, "\xFF\xD8\xFF")) return {ImageFormat::kJpeg, "JPEG"};
  if (StartsWith(b, 0, "\x89PNG\r\n\x1A\n")) return {ImageFormat::kPng, "PNG"};
  if (StartsWith(b, 0, "GIF87a") || StartsWith(b, 0, "GIF89a")) return {ImageFormat::kGif, "GIF"};
  if (StartsWith(b, 0, "BM")) return {ImageFormat::kBmp, "BMP"};
  if (StartsWith(b, 0, "RIFF") && StartsWith(b, 8, "WEBP")) return {ImageFormat::kWebp, "WebP"};
  return {ImageFormat::kOther, OtherFormatName(b)};
}

void CheckImageComplete(ImageFormat format, std::span<const std::uint8_t> bytes) {
  switch (format) {
    case ImageFormat::kJpeg: return CheckJpeg(bytes);
    case ImageFormat::kPng: return CheckPng(bytes);
    case ImageFormat::kGif: return CheckGif(bytes);
    case ImageFormat::kBmp: return CheckBmp(bytes);
    case ImageFormat::kWebp: return CheckWebp(bytes);
    case ImageFormat::kOther: return;
  }
}

}  // namespace kvshare::detail
