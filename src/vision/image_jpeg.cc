// JPEG decoding through libjpeg-turbo (image_jpeg.h). libjpeg reports fatal
// errors through a callback that must not return: it longjmps back to
// DecodeJpegInto, whose frame holds nothing with a destructor after setjmp.
#include "vision/image_jpeg.h"

// clang-format off
#include <csetjmp>
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <string>

#include "kvshare/common/error.h"

namespace kvshare::detail {
namespace {

struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnFatal(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings (extraneous bytes, a premature end: truncation is caught before
// decoding) are ignored, as Pillow ignores them.
void OnMessage(j_common_ptr, int) {}

enum class Status { kOk, kError, kTooLarge };

// Pillow opens Adobe CMYK JPEGs as inverted CMYK ("CMYK;I": c = 255 - raw);
// convert("RGB") then gives nk - MULDIV255(c, nk) with nk = 255 - k.
std::uint8_t CmykChannel(int raw_c, int raw_k) {
  const int nk = raw_k;
  const int t = (255 - raw_c) * nk + 128;
  return static_cast<std::uint8_t>(nk - (((t >> 8) + t) >> 8));
}

struct Decoded {
  int width = 0, height = 0;
  std::vector<std::uint8_t>* rgb = nullptr;
  std::vector<std::uint8_t>* row = nullptr;  // one row of CMYK
};

Status DecodeJpegInto(std::span<const std::uint8_t> bytes, std::int64_t max_pixels, Decoded* out, JpegErrors* errors) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&errors->mgr);
  errors->mgr.error_exit = OnFatal;
  errors->mgr.emit_message = OnMessage;
  errors->message[0] = '\0';
  if (setjmp(errors->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return Status::kError;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  out->width = static_cast<int>(cinfo.image_width);
  out->height = static_cast<int>(cinfo.image_height);
  if (out->width <= 0 || out->height <= 0 || std::int64_t{out->width} * out->height > max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return Status::kTooLarge;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&cinfo);
  const std::size_t stride = std::size_t(out->width) * 3;
  out->rgb->resize(stride * out->height);
  if (cmyk) out->row->resize(std::size_t(out->width) * 4);
  while (cinfo.output_scanline < cinfo.output_height) {
    const std::size_t y = cinfo.output_scanline;
    JSAMPROW dst = cmyk ? out->row->data() : out->rgb->data() + y * stride;
    jpeg_read_scanlines(&cinfo, &dst, 1);
    if (cmyk) {
      // Adobe files store CMYK inverted (libjpeg passes it through as is).
      const bool inverted = cinfo.saw_Adobe_marker;
      for (int x = 0; x < out->width; ++x) {
        const std::uint8_t* p = out->row->data() + x * 4;
        auto raw = [&](int c) { return inverted ? p[c] : 255 - p[c]; };
        for (int c = 0; c < 3; ++c) (*out->rgb)[y * stride + x * 3 + c] = CmykChannel(raw(c), raw(3));
      }
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return Status::kOk;
}

}  // namespace

Image DecodeJpeg(std::span<const std::uint8_t> bytes, const ImageLimits& limits) {
  Image image;
  std::vector<std::uint8_t> row;
  Decoded out{0, 0, &image.rgb, &row};
  JpegErrors errors;
  const Status status = DecodeJpegInto(bytes, limits.max_pixels, &out, &errors);
  if (status == Status::kError) throw Error(std::string("corrupt JPEG image: ") + errors.message);
  if (status == Status::kTooLarge) {
    if (out.width <= 0 || out.height <= 0) {
      throw Error("corrupt JPEG image: its header gives a size of " + std::to_string(out.width) + "x" +
                  std::to_string(out.height));
    }
    throw Error("JPEG image of " + std::to_string(out.width) + "x" + std::to_string(out.height) + " = " +
                std::to_string(std::int64_t{out.width} * out.height) + " pixels is over the limit of " +
                std::to_string(limits.max_pixels) + " pixels" +
                (limits.max_pixels_hint.empty() ? "" : "; " + limits.max_pixels_hint));
  }
  image.width = out.width;
  image.height = out.height;
  return image;
}

}  // namespace kvshare::detail
