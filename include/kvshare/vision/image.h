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

// What DecodeImage accepts. A file above max_bytes or an image above
// max_pixels (width * height) is refused before its pixels are decoded.
struct ImageLimits {
  std::size_t max_bytes = std::size_t{64} << 20;
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

// Reads `path` and decodes it (DecodeImage); the error names the path.
Image LoadImageFile(const std::string& path, const ImageLimits& limits = {});

// An image from raw 8-bit pixels, HWC row-major with `channels` 1 (grey),
// 3 (RGB) or 4 (RGBA, alpha dropped). Throws kvshare::Error on a size that
// does not match or a channel count out of that set.
Image ImageFromPixels(std::span<const std::uint8_t> pixels, int height, int width, int channels);

}  // namespace kvshare
