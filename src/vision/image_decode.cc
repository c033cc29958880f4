// Image decoding (kvshare/vision/image.h): libjpeg-turbo for JPEG
// (image_jpeg.h), stb_image for PNG, GIF and BMP, libwebp (with its demuxer,
// for animated files) for WebP. The format is sniffed and the container
// walked first (image_format.h), so a wrong format or a truncated file is
// named before a decoder runs, and the pixel limit is checked on the
// header's size before any pixel is decoded. The EXIF orientation is applied
// last (image_orientation.h).
#include <stb/stb_image.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "common/read_file.h"
#include "kvshare/common/error.h"
#include "kvshare/vision/image.h"
#include "vision/image_format.h"
#include "vision/image_jpeg.h"
#include "vision/image_orientation.h"

namespace kvshare {
namespace {

using detail::ImageFormat;
using Bytes = std::span<const std::uint8_t>;

void CheckPixels(const char* format, std::int64_t width, std::int64_t height, const ImageLimits& limits) {
  if (width <= 0 || height <= 0) {
    throw Error("corrupt " + std::string(format) + " image: its header gives a size of " + std::to_string(width) + "x" +
                std::to_string(height));
  }
  if (width * height > limits.max_pixels) {
    throw Error(std::string(format) + " image of " + std::to_string(width) + "x" + std::to_string(height) + " = " +
                std::to_string(width * height) + " pixels is over the limit of " + std::to_string(limits.max_pixels) +
                " pixels" + (limits.max_pixels_hint.empty() ? "" : "; " + limits.max_pixels_hint));
  }
}

Image DecodeStb(Bytes bytes, ImageFormat kind, const char* format, const ImageLimits& limits) {
  const int size = static_cast<int>(bytes.size());
  // stb_image's PNG reader refuses images over 2^30 decoded bytes, and its
  // info call then reports the last reader's "unknown image type": the
  // limit is checked on IHDR's size first, so such a file is named by size.
  if (kind == ImageFormat::kPng && bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0) {
    const auto be32 = [&](std::size_t at) {
      return (std::int64_t{bytes[at]} << 24) | (bytes[at + 1] << 16) | (bytes[at + 2] << 8) | bytes[at + 3];
    };
    CheckPixels(format, be32(16), be32(20), limits);
  }
  int width = 0, height = 0, channels = 0;
  if (!stbi_info_from_memory(bytes.data(), size, &width, &height, &channels)) {
    throw Error("corrupt " + std::string(format) + " image: " + stbi_failure_reason());
  }
  // A top-down BMP (rows stored first to last, as Windows' DIB sections
  // write them) has a negative height in its header; stbi_info passes it
  // on, stbi_load decodes it upright.
  if (kind == ImageFormat::kBmp && height < 0) height = -height;
  CheckPixels(format, width, height, limits);
  // Asking for 3 channels expands grey and palette images and drops alpha
  // without blending, as PIL's convert("RGB") does; GIF gives its first frame.
  std::unique_ptr<stbi_uc, decltype(&stbi_image_free)> pixels(
      stbi_load_from_memory(bytes.data(), size, &width, &height, &channels, 3), &stbi_image_free);
  if (!pixels) throw Error("corrupt " + std::string(format) + " image: " + stbi_failure_reason());
  Image image{width, height, {}};
  image.rgb.assign(pixels.get(), pixels.get() + std::size_t(width) * height * 3);
  return image;
}

const char* WebpStatusName(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data";
  }
  return "unknown error";
}

// WebP through the demuxer: a still file is one frame covering the canvas;
// of an animated file the first frame is drawn onto a transparent black
// canvas at its offset (the first frame is a key frame: no blending), as
// libwebp's animation decoder, which PIL uses, does. Alpha is then dropped.
Image DecodeWebp(Bytes bytes, const ImageLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode info = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (info != VP8_STATUS_OK) throw Error(std::string("corrupt WebP image: ") + WebpStatusName(info));
  CheckPixels("WebP", features.width, features.height, limits);

  const WebPData data{bytes.data(), bytes.size()};
  std::unique_ptr<WebPDemuxer, decltype(&WebPDemuxDelete)> demux(WebPDemux(&data), &WebPDemuxDelete);
  if (!demux) throw Error("corrupt WebP image: its chunks do not parse");
  const int width = static_cast<int>(WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_WIDTH));
  const int height = static_cast<int>(WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_HEIGHT));
  CheckPixels("WebP", width, height, limits);
  WebPIterator frame;
  if (!WebPDemuxGetFrame(demux.get(), 1, &frame)) throw Error("corrupt WebP image: it has no frame");
  std::unique_ptr<WebPIterator, decltype(&WebPDemuxReleaseIterator)> release(&frame, &WebPDemuxReleaseIterator);
  if (frame.x_offset < 0 || frame.y_offset < 0 || frame.x_offset + frame.width > width ||
      frame.y_offset + frame.height > height) {
    throw Error("corrupt WebP image: its first frame lies outside the canvas");
  }

  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) throw Error("WebP: libwebp version mismatch");
  config.output.colorspace = MODE_RGB;
  const VP8StatusCode status = WebPDecode(frame.fragment.bytes, frame.fragment.size, &config);
  std::unique_ptr<WebPDecBuffer, decltype(&WebPFreeDecBuffer)> output(&config.output, &WebPFreeDecBuffer);
  if (status != VP8_STATUS_OK) throw Error(std::string("corrupt WebP image: ") + WebpStatusName(status));
  if (config.output.width != frame.width || config.output.height != frame.height) {
    throw Error("corrupt WebP image: its first frame's size disagrees with its header");
  }

  Image image{width, height, std::vector<std::uint8_t>(std::size_t(width) * height * 3, 0)};
  const WebPRGBABuffer& rgb = config.output.u.RGBA;
  for (int y = 0; y < frame.height; ++y) {
    std::memcpy(&image.rgb[(std::size_t(frame.y_offset + y) * width + frame.x_offset) * 3],
                rgb.rgba + std::size_t(y) * rgb.stride, std::size_t(frame.width) * 3);
  }
  return image;
}

}  // namespace

Image DecodeImage(std::span<const std::uint8_t> bytes, const ImageLimits& limits) {
  if (bytes.empty()) throw Error("image data is empty");
  if (bytes.size() > limits.max_bytes) {
    throw Error("image data of " + std::to_string(bytes.size()) + " bytes is over the limit of " +
                std::to_string(limits.max_bytes) + " bytes");
  }
  const detail::SniffedFormat sniffed = detail::SniffImageFormat(bytes);
  if (sniffed.format == ImageFormat::kOther) {
    const std::string what = sniffed.name.empty() ? "an unknown format" : sniffed.name;
    throw Error("unsupported image format: " + what + " (kvshare reads JPEG, PNG, GIF, BMP and WebP)");
  }
  detail::CheckImageComplete(sniffed.format, bytes);
  Image image;
  if (sniffed.format == ImageFormat::kJpeg) {
    image = detail::DecodeJpeg(bytes, limits);
  } else if (sniffed.format == ImageFormat::kWebp) {
    image = DecodeWebp(bytes, limits);
  } else {
    if (bytes.size() > std::size_t{0x7FFFFFFF}) throw Error("image data over 2 GiB is not supported");
    image = DecodeStb(bytes, sniffed.format, sniffed.name.c_str(), limits);
  }
  return detail::ApplyOrientation(std::move(image), detail::ExifOrientation(sniffed.format, bytes));
}

std::vector<std::uint8_t> ReadImageFile(const std::string& path, const ImageLimits& limits) {
  return detail::ReadFileLimited(
      path, limits.max_bytes,
      {.over =
           [&](const std::string& size) {
             return Error("the file " + path + " is " + size + " bytes, over the limit of " +
                          std::to_string(limits.max_bytes) + " bytes (ImageLimits::max_bytes)");
           },
       .unreadable =
           [&](const std::string& reason) { return Error("cannot open the file " + path + " (" + reason + ")"); }});
}

Image LoadImageFile(const std::string& path, const ImageLimits& limits) {
  try {
    return DecodeImage(ReadImageFile(path, limits), limits);
  } catch (const Error& e) {
    throw Error("image '" + path + "': " + e.what());
  }
}

Image ImageFromPixels(std::span<const std::uint8_t> pixels, int height, int width, int channels,
                      const ImageLimits& limits) {
  if (channels != 1 && channels != 3 && channels != 4) {
    throw Error("image pixels: channels must be 1 (grey), 3 (RGB) or 4 (RGBA), got " + std::to_string(channels));
  }
  if (height <= 0 || width <= 0) {
    throw Error("image pixels: height and width must be positive, got " + std::to_string(height) + "x" +
                std::to_string(width));
  }
  CheckPixels("raw", width, height, limits);
  const std::size_t n = std::size_t(height) * std::size_t(width);
  if (pixels.size() / channels != n || pixels.size() % channels != 0) {
    throw Error("image pixels: " + std::to_string(pixels.size()) + " bytes do not match height " +
                std::to_string(height) + " x width " + std::to_string(width) + " x channels " +
                std::to_string(channels) + " = " + std::to_string(n * channels));
  }
  Image image{width, height, std::vector<std::uint8_t>(n * 3)};
  for (std::size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) image.rgb[i * 3 + c] = pixels[i * channels + (channels == 1 ? 0 : c)];
  }
  return image;
}

}  // namespace kvshare
