// kvshare/vision/image.h — images as the vision encoders take them: decoding
// of the file formats clients send, and the resize the HF image processors do.
//
// Decoding goes through well-kept libraries (libjpeg-turbo for JPEG, as
// Pillow and torchvision decode it; stb_image for PNG, GIF, BMP; libwebp for
// WebP); every failure is a kvshare::Error that names what was wrong (a
// truncated or corrupt file, a format that is not one of these, an image
// over ImageLimits) before any pixel is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvshare {

// An 8-bit RGB image: rgb[(y * width + x) * 3 + c], row-major HWC.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> rgb;
};

// What DecodeImage and ReadImageFile accept. A file above max_bytes is
// refused before it is read, an image above max_pixels (width * height)
// before its pixels are decoded.
struct ImageLimits {
  std::size_t max_bytes = std::size_t{64} << 20;     // 64 MiB
  std::int64_t max_pixels = std::int64_t{64} << 20;  // 8192 x 8192
  // Appended to the max_pixels error after "; ": how the caller raises the
  // limit (a front end names its flag, e.g. "raise it with --image-max-pixels").
  std::string max_pixels_hint;
};

// Decodes JPEG, PNG, GIF (first frame), BMP or WebP (first frame) bytes to
// RGB (grey and palette images expanded; alpha dropped, as PIL's
// convert("RGB") does), turned upright by its EXIF orientation (JPEG, PNG,
// WebP), as transformers' image loading does (load_image calls
// exif_transpose). Throws kvshare::Error naming the problem: empty or
// truncated data, a corrupt file (the decoder's reason), a format it does not
// read (named by its signature where known, e.g. "TIFF", "HEIC"), a file or
// image over `limits`.
Image DecodeImage(std::span<const std::uint8_t> bytes, const ImageLimits& limits = {});

// The bytes of the image file `path`, the one file reader of every front end
// (kvshare generate --image, Python's images=[path], LoadImageFile). Throws
// kvshare::Error naming the path: "cannot open the file PATH (reason)", "the
// file PATH is N bytes, over the limit of M bytes (ImageLimits::max_bytes)"
// (checked on a regular file's size before it is read; a pipe or device is
// read to at most max_bytes + 1 bytes), or "reading the file PATH failed".
std::vector<std::uint8_t> ReadImageFile(const std::string& path, const ImageLimits& limits = {});

// Reads `path` (ReadImageFile) and decodes it (DecodeImage); the error names
// the path.
Image LoadImageFile(const std::string& path, const ImageLimits& limits = {});

// An image from raw 8-bit pixels, HWC row-major with `channels` 1 (grey),
// 3 (RGB) or 4 (RGBA, alpha dropped). Throws kvshare::Error on a size that
// does not match, a channel count out of that set, or more than
// limits.max_pixels pixels ("raw image of WxH = N pixels is over the limit").
Image ImageFromPixels(std::span<const std::uint8_t> pixels, int height, int width, int channels,
                      const ImageLimits& limits = {});

}  // namespace kvshare
