// Image decoding (kvshare/vision/image.h): tiny files of every format against
// Pillow's exif_transpose + convert("RGB") (tests/tools/vision_image_fixtures.py), and every
// error path: empty, truncated (all prefixes of every fixture), corrupt,
// unsupported formats named by signature, limits, raw pixels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common_source_path.h"
#include "kvshare/common/error.h"
#include "kvshare/vision/image.h"

namespace kvshare {
namespace {

std::string ImageDir() { return testing::SourcePath("tests/fixtures/vision/images/"); }

std::vector<std::uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The message of the kvshare::Error that f() throws, or "" when it throws none.
template <typename F>
std::string ErrorFrom(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string ErrorOf(std::span<const std::uint8_t> bytes, const ImageLimits& limits = {}) {
  return ErrorFrom([&] { DecodeImage(bytes, limits); });
}

std::vector<std::uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

struct Fixture {
  const char* file;
  bool turned;  // EXIF orientation 5..8: stored 7x5, decoded 5x7
};

// All decode exactly as Pillow does (JPEG too: both use libjpeg-turbo's
// accurate integer IDCT and fancy upsampling).
constexpr Fixture kFixtures[] = {
    {"rgb.png", false},     {"rgba.png", false},      {"grey.png", false},   {"grey_alpha.png", false},
    {"palette.png", false}, {"bilevel.png", false},   {"rgb.jpg", false},    {"progressive.jpg", false},
    {"grey.jpg", false},    {"cmyk.jpg", false},      {"anim.gif", false},   {"rgb.bmp", false},
    {"palette.bmp", false}, {"lossless.webp", false}, {"lossy.webp", false}, {"alpha.webp", false},
    {"anim.webp", false},   {"exif6.jpg", true},      {"exif5.jpg", true},   {"exif3.png", false},
    {"exif8.webp", true},
};

std::string ExpectedName(const std::string& file) {
  const auto dot = file.rfind('.');
  return file.substr(0, dot) + "_" + file.substr(dot + 1) + ".rgb";
}

TEST(VisionImage, DecodesEveryFormatAsPillowDoes) {
  for (const Fixture& f : kFixtures) {
    SCOPED_TRACE(f.file);
    const Image image = LoadImageFile(ImageDir() + f.file);
    const std::vector<std::uint8_t> expected = ReadFile(ImageDir() + ExpectedName(f.file));
    EXPECT_EQ(image.width, f.turned ? 5 : 7);
    EXPECT_EQ(image.height, f.turned ? 7 : 5);
    EXPECT_EQ(image.rgb, expected);
  }
}

TEST(VisionImage, EveryTruncationIsACleanErrorOrAnImage) {
  for (const Fixture& f : kFixtures) {
    SCOPED_TRACE(f.file);
    const std::vector<std::uint8_t> bytes = ReadFile(ImageDir() + f.file);
    int truncated = 0;
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      try {
        const Image image = DecodeImage(std::span(bytes).first(n));
        EXPECT_GT(image.width, 0);
        EXPECT_EQ(image.rgb.size(), std::size_t(image.width) * image.height * 3);
      } catch (const Error& e) {
        truncated += std::string(e.what()).find("truncated") != std::string::npos;
      }
    }
    // The container walk names most cuts as truncations (the rest: cuts
    // inside the signature, or after the data a decoder needs, such as a
    // GIF's later frames).
    EXPECT_GT(truncated, static_cast<int>(bytes.size() / 2));
  }
}

TEST(VisionImage, CorruptBytesNeverCrash) {
  std::mt19937 rng(46);
  for (const Fixture& f : kFixtures) {
    SCOPED_TRACE(f.file);
    const std::vector<std::uint8_t> bytes = ReadFile(ImageDir() + f.file);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<std::uint8_t> bad = bytes;
      const int flips = 1 + trial % 4;
      for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] ^= static_cast<std::uint8_t>(1 + rng() % 255);
      try {
        const Image image = DecodeImage(bad);
        EXPECT_EQ(image.rgb.size(), std::size_t(image.width) * image.height * 3);
      } catch (const Error&) {
      }
    }
  }
}

TEST(VisionImage, NamesTruncationAndCorruption) {
  const std::vector<std::uint8_t> png = ReadFile(ImageDir() + "rgb.png");
  EXPECT_NE(ErrorOf(std::span(png).first(png.size() - 20)).find("truncated PNG image"), std::string::npos);
  const std::vector<std::uint8_t> jpg = ReadFile(ImageDir() + "rgb.jpg");
  EXPECT_NE(ErrorOf(std::span(jpg).first(jpg.size() - 2)).find("truncated JPEG image"), std::string::npos);
  const std::vector<std::uint8_t> webp = ReadFile(ImageDir() + "lossy.webp");
  EXPECT_NE(ErrorOf(std::span(webp).first(40)).find("truncated WebP image"), std::string::npos);
  // A PNG whose compressed data is garbage: the decoder's reason.
  std::vector<std::uint8_t> bad = png;
  for (std::size_t i = 41; i < 60; ++i) bad[i] = 0xAB;
  const std::string corrupt = ErrorOf(bad);
  EXPECT_NE(corrupt.find("corrupt PNG image: "), std::string::npos) << corrupt;
}

TEST(VisionImage, NamesUnsupportedFormats) {
  EXPECT_EQ(ErrorOf({}), "image data is empty");
  const std::vector<std::uint8_t> tiff = ReadFile(ImageDir() + "unsupported.tiff");
  EXPECT_EQ(ErrorOf(tiff), "unsupported image format: TIFF (kvshare reads JPEG, PNG, GIF, BMP and WebP)");
  const std::pair<std::string_view, const char*> cases[] = {
      {std::string_view("\0\0\0\x18"
                        "ftypheic\0\0\0\0",
                        16),
       "HEIC/HEIF"},
      {std::string_view("\0\0\0\x1C"
                        "ftypavif\0\0\0\0",
                        16),
       "AVIF"},
      {"%PDF-1.7\n", "PDF"},
      {"\xEF\xBB\xBF  <?xml version=\"1.0\"?><svg/>", "SVG/XML"},
      {"<svg xmlns=\"http://www.w3.org/2000/svg\"/>", "SVG/XML"},
      {"<!DOCTYPE html><html></html>", "HTML"},
      {"data:image/png;base64,iVBORw0KGgo=", "a data: URL"},
      {"iVBORw0KGgoAAAANSUhEUg", "base64 text"},
      {"RIFF\x10\0\0\0WAVEfmt ", "RIFF (not WebP)"},
      {std::string_view("\0\1\2 not an image", 15), "an unknown format"},
  };
  for (const auto& [bytes, name] : cases) {
    const std::string error = ErrorOf(Bytes(bytes));
    EXPECT_NE(error.find(std::string("unsupported image format: ") + name), std::string::npos) << error;
  }
}

TEST(VisionImage, RefusesImagesOverTheLimitsBeforeDecoding) {
  for (const char* file : {"rgb.png", "rgb.jpg", "anim.gif", "rgb.bmp", "lossy.webp", "anim.webp"}) {
    SCOPED_TRACE(file);
    const std::vector<std::uint8_t> bytes = ReadFile(ImageDir() + file);
    EXPECT_NE(ErrorOf(bytes, {.max_pixels = 34}).find("image of 7x5 = 35 pixels is over the limit of 34 pixels"),
              std::string::npos);
    EXPECT_EQ(ErrorOf(bytes, {.max_pixels = 35}), "");
    // A front end's hint on raising the limit follows the numbers.
    EXPECT_NE(ErrorOf(bytes, {.max_pixels = 34, .max_pixels_hint = "raise it with --x"})
                  .find("over the limit of 34 pixels; raise it with --x"),
              std::string::npos);
    EXPECT_NE(ErrorOf(bytes, {.max_bytes = bytes.size() - 1}).find("is over the limit of"), std::string::npos);
  }
  // A PNG header claiming 100000 x 100000 is refused from its header alone.
  std::vector<std::uint8_t> png = ReadFile(ImageDir() + "rgb.png");
  for (int at : {16, 20}) {
    png[at] = 0;
    png[at + 1] = 0x01;
    png[at + 2] = 0x86;
    png[at + 3] = 0xA0;
  }
  // Named by its size and the limit (stb_image's own check, which comes
  // first otherwise, gave "corrupt PNG image: unknown image type").
  const std::string error = ErrorOf(png);
  EXPECT_NE(error.find("PNG image of 100000x100000 = 10000000000 pixels is over the limit"), std::string::npos)
      << error;
  // 20000 x 20000 (4e8 pixels: over stb's 2^30 bytes, under a raised limit
  // of 1e9) is still named by size under the default limit.
  for (int at : {16, 20}) {
    png[at] = 0;
    png[at + 1] = 0;
    png[at + 2] = 0x4E;
    png[at + 3] = 0x20;
  }
  EXPECT_NE(ErrorOf(png).find("PNG image of 20000x20000 = 400000000 pixels is over the limit of 67108864"),
            std::string::npos)
      << ErrorOf(png);
}

// A top-down BMP (negative height in its header: rows first to last, as
// Windows' DIB sections and some screenshot tools write them) decodes to the
// same pixels as the bottom-up file it was made from. It was refused as
// "corrupt BMP image: its header gives a size of 7x-5".
TEST(VisionImage, DecodesTopDownBmp) {
  std::vector<std::uint8_t> bmp = ReadFile(ImageDir() + "rgb.bmp");
  const Image bottom_up = DecodeImage(bmp);
  ASSERT_EQ(bmp[14], 40);  // BITMAPINFOHEADER: height at 22, int32 little-endian
  const std::uint32_t offset = bmp[10] | (bmp[11] << 8) | (bmp[12] << 16) | (std::uint32_t{bmp[13]} << 24);
  const int width = bottom_up.width, height = bottom_up.height;
  const std::size_t stride = (std::size_t(width) * 3 + 3) / 4 * 4;
  std::vector<std::uint8_t> top_down = bmp;
  for (int r = 0; r < height; ++r) {
    std::copy_n(bmp.begin() + offset + std::size_t(height - 1 - r) * stride, stride,
                top_down.begin() + offset + std::size_t(r) * stride);
  }
  const std::int32_t negative = -height;
  std::memcpy(&top_down[22], &negative, 4);
  const Image decoded = DecodeImage(top_down);
  EXPECT_EQ(decoded.width, width);
  EXPECT_EQ(decoded.height, height);
  EXPECT_EQ(decoded.rgb, bottom_up.rgb);
  EXPECT_NE(ErrorOf(top_down, {.max_pixels = 34}).find("BMP image of 7x5 = 35 pixels is over the limit"),
            std::string::npos);
}

TEST(VisionImage, LoadImageFileNamesThePath) {
  try {
    LoadImageFile(ImageDir() + "no_such_file.png");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_file.png"), std::string::npos);
  }
  try {
    LoadImageFile(ImageDir() + "unsupported.tiff");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported.tiff': unsupported image format: TIFF"), std::string::npos)
        << e.what();
  }
}

std::string ReadError(const std::string& path, const ImageLimits& limits = {}) {
  return ErrorFrom([&] { ReadImageFile(path, limits); });
}

// The one file reader of the front ends: the size limit is checked before the
// file is read (a regular file by its size; a pipe by reading one byte past
// the limit, never the whole stream), and the errors name the path.
TEST(VisionImage, ReadImageFileChecksTheSizeFirst) {
  const std::string png = ImageDir() + "rgb.png";
  const std::vector<std::uint8_t> bytes = ReadFile(png);
  EXPECT_EQ(ReadImageFile(png, {.max_bytes = bytes.size()}), bytes);
  EXPECT_EQ(ReadError(png, {.max_bytes = bytes.size() - 1}),
            "the file " + png + " is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                std::to_string(bytes.size() - 1) + " bytes (ImageLimits::max_bytes)");
  EXPECT_EQ(ReadImageFile(png, {.max_bytes = ~std::size_t{0}}), bytes);  // no overflow at the largest limit
  EXPECT_NE(
      ReadError(ImageDir() + "no_such_file.png").find("cannot open the file " + ImageDir() + "no_such_file.png ("),
      std::string::npos);
  EXPECT_NE(ReadError(ImageDir()).find("(a directory)"), std::string::npos);
  // /dev/zero has no size and no end: refused after max_bytes + 1 bytes.
  EXPECT_EQ(ReadError("/dev/zero", {.max_bytes = 3000000}),
            "the file /dev/zero is more than 3000000 bytes, over the limit of 3000000 bytes (ImageLimits::max_bytes)");
  // LoadImageFile reads through it.
  EXPECT_NE(ReadError(png, {.max_bytes = 10}).find("over the limit of 10 bytes"), std::string::npos);
  EXPECT_NE(ErrorFrom([&] { LoadImageFile(png, {.max_bytes = 10}); }).find("rgb.png': the file "), std::string::npos);
}

TEST(VisionImage, FromPixels) {
  const std::vector<std::uint8_t> grey = {1, 2, 3, 4, 5, 6};
  const Image g = ImageFromPixels(grey, 2, 3, 1);
  EXPECT_EQ(g.width, 3);
  EXPECT_EQ(g.height, 2);
  EXPECT_EQ(g.rgb, (std::vector<std::uint8_t>{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6}));
  const std::vector<std::uint8_t> rgba = {10, 20, 30, 0, 40, 50, 60, 255};
  EXPECT_EQ(ImageFromPixels(rgba, 1, 2, 4).rgb, (std::vector<std::uint8_t>{10, 20, 30, 40, 50, 60}));
  const std::vector<std::uint8_t> rgb = {7, 8, 9};
  EXPECT_EQ(ImageFromPixels(rgb, 1, 1, 3).rgb, rgb);
  EXPECT_THROW(ImageFromPixels(rgb, 1, 1, 2), Error);
  EXPECT_THROW(ImageFromPixels(rgb, 1, 2, 3), Error);
  EXPECT_THROW(ImageFromPixels(rgb, 0, 1, 3), Error);
  EXPECT_THROW(ImageFromPixels({}, 1, 1, 3), Error);
  // The pixel limit holds for raw pixels too (Python's numpy images).
  const std::vector<std::uint8_t> six(18, 7);
  EXPECT_EQ(ImageFromPixels(six, 2, 3, 3, {.max_pixels = 6}).rgb, six);
  EXPECT_EQ(
      ErrorFrom([&] { ImageFromPixels(six, 2, 3, 3, {.max_pixels = 5, .max_pixels_hint = "raise it with --x"}); }),
      "raw image of 3x2 = 6 pixels is over the limit of 5 pixels; raise it with --x");
}

}  // namespace
}  // namespace kvshare
