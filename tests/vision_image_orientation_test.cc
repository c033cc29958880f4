// Orientation outside the EXIF block (src/vision/image_orientation.cc):
// Pillow's getexif, which exif_transpose reads, also takes ImageMagick's
// "Raw profile type exif" PNG text chunk and, when the EXIF block has no
// orientation tag, XMP's tiff:Orientation (JPEG APP1, PNG text, WebP
// "XMP "). Each case rewrites a fixture whose EXIF turns it (exif6.jpg,
// exif3.png, exif8.webp) to carry the same orientation another way; it must
// decode to the same pixels. Checked against Pillow 13's exif_transpose on
// such files by hand (every orientation 2..8, EXIF-then-XMP precedence).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common_source_path.h"
#include "kvshare/vision/image.h"
#include "vision/image_orientation.h"

namespace kvshare {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes ReadFixture(const std::string& name) {
  std::ifstream in(testing::SourcePath("tests/fixtures/vision/images/" + name), std::ios::binary);
  EXPECT_TRUE(in) << name;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Bytes Str(const std::string& s) { return {s.begin(), s.end()}; }
Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
void PutBe32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}
void PutLe32(Bytes& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

std::uint32_t Crc32(const Bytes& b) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::uint8_t x : b) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

Bytes PngChunk(const std::string& type, const Bytes& data) {
  Bytes out;
  PutBe32(out, static_cast<std::uint32_t>(data.size()));
  const Bytes body = Cat({Str(type), data});
  out.insert(out.end(), body.begin(), body.end());
  PutBe32(out, Crc32(body));
  return out;
}

// A zlib stream of one stored (uncompressed) deflate block: compressed
// text without a compressor.
Bytes ZlibStored(const Bytes& data) {
  Bytes out = {0x78, 0x01, 0x01};
  const std::uint16_t n = static_cast<std::uint16_t>(data.size());
  out.insert(out.end(), {static_cast<std::uint8_t>(n), static_cast<std::uint8_t>(n >> 8), static_cast<std::uint8_t>(~n),
                         static_cast<std::uint8_t>(~n >> 8)});
  out.insert(out.end(), data.begin(), data.end());
  std::uint32_t a = 1, b = 0;
  for (std::uint8_t x : data) {
    a = (a + x) % 65521;
    b = (b + a) % 65521;
  }
  PutBe32(out, (b << 16) | a);
  return out;
}

// The PNG with its eXIf chunk (after IHDR) replaced by `chunk`.
Bytes PngWithout_eXIf(const Bytes& png, const Bytes& chunk) {
  const std::size_t exif_at = 8 + 12 + 13;  // signature, IHDR
  EXPECT_EQ(std::string(png.begin() + exif_at + 4, png.begin() + exif_at + 8), "eXIf");
  const std::size_t length =
      (png[exif_at] << 24) | (png[exif_at + 1] << 16) | (png[exif_at + 2] << 8) | png[exif_at + 3];
  Bytes out(png.begin(), png.begin() + exif_at);
  out.insert(out.end(), chunk.begin(), chunk.end());
  out.insert(out.end(), png.begin() + exif_at + 12 + length, png.end());
  return out;
}

std::string Xmp(int orientation) {
  return "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"><rdf:Description tiff:Orientation=\"" + std::to_string(orientation) +
         "\"/></x:xmpmeta>";
}

void ExpectSame(const Image& got, const Image& want) {
  EXPECT_EQ(got.width, want.width);
  EXPECT_EQ(got.height, want.height);
  EXPECT_EQ(got.rgb, want.rgb);
}

TEST(VisionImageOrientation, JpegXmpWhenExifHasNoTag) {
  const Bytes jpeg = ReadFixture("exif6.jpg");
  const Image want = DecodeImage(jpeg);
  ASSERT_EQ(want.width, 5);  // stored 7x5, turned
  // The APP1 Exif segment follows APP0 (at 20): replace it by an XMP one.
  ASSERT_EQ(jpeg[20], 0xFF);
  ASSERT_EQ(jpeg[21], 0xE1);
  const std::size_t exif_end = 22 + ((jpeg[22] << 8) | jpeg[23]);
  const Bytes packet = Cat({Str(std::string("http://ns.adobe.com/xap/1.0/") + '\0'), Str(Xmp(6))});
  const std::size_t length = packet.size() + 2;
  const Bytes app1 =
      Cat({{0xFF, 0xE1, static_cast<std::uint8_t>(length >> 8), static_cast<std::uint8_t>(length)}, packet});
  const Bytes xmp_only =
      Cat({Bytes(jpeg.begin(), jpeg.begin() + 20), app1, Bytes(jpeg.begin() + exif_end, jpeg.end())});
  ExpectSame(DecodeImage(xmp_only), want);
  // An EXIF orientation tag wins over XMP (here 1 against XMP's 6): as stored.
  const Bytes both = Cat({Bytes(jpeg.begin(), jpeg.begin() + 20), app1, Bytes(jpeg.begin() + 20, jpeg.end())});
  Bytes exif1 = both;
  // The tag's value: the SHORT at the end of the 26-byte EXIF block ("MM", IFD at 8, one entry).
  const std::size_t value_at = 20 + app1.size() + 4 + 6 + 8 + 2 + 8;
  ASSERT_EQ(exif1[value_at + 1], 6);
  exif1[value_at + 1] = 1;
  EXPECT_EQ(DecodeImage(exif1).width, 7);
  // A tag outside 1..8 (exif_transpose leaves such an image as stored) is 1,
  // as the header promises, not the raw value or XMP's.
  exif1[value_at + 1] = 9;
  EXPECT_EQ(detail::ExifOrientation(detail::ImageFormat::kJpeg, exif1), 1);
  EXPECT_EQ(DecodeImage(exif1).width, 7);
}

TEST(VisionImageOrientation, PngXmpAndImageMagickRawProfile) {
  const Bytes png = ReadFixture("exif3.png");
  const Image want = DecodeImage(png);
  const Bytes xmp = Str(Xmp(3));
  // iTXt "XML:com.adobe.xmp", plain and compressed (flag 1, method 0).
  const Bytes key = Str(std::string("XML:com.adobe.xmp") + '\0');
  ExpectSame(DecodeImage(PngWithout_eXIf(png, PngChunk("iTXt", Cat({key, {0, 0, 0, 0}, xmp})))), want);
  ExpectSame(DecodeImage(PngWithout_eXIf(png, PngChunk("iTXt", Cat({key, {1, 0, 0, 0}, ZlibStored(xmp)})))), want);
  // "Raw profile type exif": the 26-byte EXIF block as hex lines after three
  // header lines, in tEXt and in zTXt.
  const std::size_t exif_at = 8 + 12 + 13;
  const Bytes exif(png.begin() + exif_at + 8, png.begin() + exif_at + 8 + 26);
  std::string hex = "\nexif\n      26\n";
  for (std::size_t i = 0; i < exif.size(); ++i) {
    static const char* kDigits = "0123456789abcdef";
    hex += kDigits[exif[i] >> 4];
    hex += kDigits[exif[i] & 15];
    if (i % 16 == 15) hex += '\n';
  }
  hex += '\n';
  const Bytes raw_key = Str(std::string("Raw profile type exif") + '\0');
  ExpectSame(DecodeImage(PngWithout_eXIf(png, PngChunk("tEXt", Cat({raw_key, Str(hex)})))), want);
  ExpectSame(DecodeImage(PngWithout_eXIf(png, PngChunk("zTXt", Cat({raw_key, {0}, ZlibStored(Str(hex))})))), want);
  // Text that is not hex is no EXIF (Pillow's bytes.fromhex fails): as stored.
  const Image stored = DecodeImage(PngWithout_eXIf(png, PngChunk("tEXt", Cat({raw_key, Str("\nexif\n 2\nzz\n")}))));
  EXPECT_NE(stored.rgb, want.rgb);
}

TEST(VisionImageOrientation, WebpXmpChunk) {
  const Bytes webp = ReadFixture("exif8.webp");
  const Image want = DecodeImage(webp);
  ASSERT_EQ(want.width, 5);
  // Chunks: VP8X (flags at 20: EXIF 0x08), VP8L, then EXIF (last): put XMP in its place.
  const std::size_t exif_at = webp.size() - 8 - 26;
  ASSERT_EQ(std::string(webp.begin() + exif_at, webp.begin() + exif_at + 4), "EXIF");
  const Bytes xmp = Str(Xmp(8) + " ");  // even length: no pad byte
  Bytes out = Cat({Bytes(webp.begin(), webp.begin() + exif_at), Str("XMP "), Bytes(4, 0), xmp});
  PutLe32(out, exif_at + 4, static_cast<std::uint32_t>(xmp.size()));
  PutLe32(out, 4, static_cast<std::uint32_t>(out.size() - 8));
  out[20] = (out[20] & ~0x08) | 0x04;  // XMP, no EXIF
  ExpectSame(DecodeImage(out), want);
}

}  // namespace
}  // namespace kvshare
