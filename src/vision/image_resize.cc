// The fixed-point antialiased resize of torch's uint8 kernel (image_resize.h).
#include "vision/image_resize.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kvshare/common/error.h"

namespace kvshare::detail {
namespace {

std::uint8_t Clamp8(std::int32_t v) { return static_cast<std::uint8_t>(std::clamp(v, 0, 255)); }

// Resamples along the row direction: `in` is [rows, in_width, 3].
std::vector<std::uint8_t> Horizontal(const std::vector<std::uint8_t>& in, int rows, int in_width,
                                     const ResizeTaps& taps) {
  const int out_width = static_cast<int>(taps.start.size());
  std::vector<std::uint8_t> out(std::size_t(rows) * out_width * 3);
  const std::int32_t half = std::int32_t{1} << (taps.precision - 1);
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* row = &in[std::size_t(y) * in_width * 3];
    std::uint8_t* dst = &out[std::size_t(y) * out_width * 3];
    for (int x = 0; x < out_width; ++x) {
      const std::int16_t* w = &taps.weights[std::size_t(x) * taps.max_taps];
      const std::uint8_t* src = row + std::size_t(taps.start[x]) * 3;
      std::int32_t r = half, g = half, b = half;
      for (int j = 0; j < taps.count[x]; ++j) {
        r += w[j] * src[j * 3 + 0];
        g += w[j] * src[j * 3 + 1];
        b += w[j] * src[j * 3 + 2];
      }
      dst[x * 3 + 0] = Clamp8(r >> taps.precision);
      dst[x * 3 + 1] = Clamp8(g >> taps.precision);
      dst[x * 3 + 2] = Clamp8(b >> taps.precision);
    }
  }
  return out;
}

// Resamples along the column direction: `in` is [in_rows, width, 3].
std::vector<std::uint8_t> Vertical(const std::vector<std::uint8_t>& in, int width, const ResizeTaps& taps) {
  const int out_rows = static_cast<int>(taps.start.size());
  const std::size_t row_len = std::size_t(width) * 3;
  std::vector<std::uint8_t> out(out_rows * row_len);
  std::vector<std::int32_t> acc(row_len);
  const std::int32_t half = std::int32_t{1} << (taps.precision - 1);
  for (int y = 0; y < out_rows; ++y) {
    std::fill(acc.begin(), acc.end(), half);
    const std::int16_t* w = &taps.weights[std::size_t(y) * taps.max_taps];
    for (int j = 0; j < taps.count[y]; ++j) {
      const std::uint8_t* src = &in[std::size_t(taps.start[y] + j) * row_len];
      const std::int32_t wj = w[j];
      for (std::size_t i = 0; i < row_len; ++i) acc[i] += wj * src[i];
    }
    std::uint8_t* dst = &out[y * row_len];
    for (std::size_t i = 0; i < row_len; ++i) dst[i] = Clamp8(acc[i] >> taps.precision);
  }
  return out;
}

}  // namespace

double ResizeKernel(ResizeFilter filter, double x) {
  x = std::abs(x);
  if (filter == ResizeFilter::kBilinear) return x < 1.0 ? 1.0 - x : 0.0;
  constexpr double a = -0.5;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

ResizeTaps ComputeResizeTaps(int in, int out, ResizeFilter filter) {
  if (in < 1 || out < 1) {
    throw Error("image resize: sizes must be at least 1, got " + std::to_string(in) + " -> " + std::to_string(out));
  }
  const double taps_at_unit_scale = filter == ResizeFilter::kBilinear ? 2.0 : 4.0;
  const double scale = static_cast<double>(in) / out;
  const double support = scale >= 1.0 ? taps_at_unit_scale * 0.5 * scale : taps_at_unit_scale * 0.5;
  const double inv_scale = scale >= 1.0 ? 1.0 / scale : 1.0;
  ResizeTaps taps;
  taps.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.start.resize(out);
  taps.count.resize(out);
  std::vector<double> w(std::size_t(out) * taps.max_taps, 0.0);
  double w_max = 0.0;
  for (int i = 0; i < out; ++i) {
    const double center = scale * (i + 0.5);
    // Truncation toward zero, as the int64 casts of the reference do.
    const std::int64_t lo = std::max<std::int64_t>(static_cast<std::int64_t>(center - support + 0.5), 0);
    const std::int64_t hi = std::min<std::int64_t>(static_cast<std::int64_t>(center + support + 0.5), in);
    const int count = static_cast<int>(std::clamp<std::int64_t>(hi - lo, 0, taps.max_taps));
    double* wi = &w[std::size_t(i) * taps.max_taps];
    double total = 0.0;
    for (int j = 0; j < count; ++j) {
      wi[j] = ResizeKernel(filter, (j + lo - center + 0.5) * inv_scale);
      total += wi[j];
    }
    if (total != 0.0) {
      for (int j = 0; j < count; ++j) {
        wi[j] /= total;
        w_max = std::max(w_max, wi[j]);
      }
    }
    taps.start[i] = static_cast<int>(lo);
    taps.count[i] = count;
  }
  // The most fractional bits that keep the largest weight an int16.
  int precision = 0;
  for (; precision < 22; ++precision) {
    if (static_cast<int>(0.5 + w_max * (1 << (precision + 1))) >= (1 << 15)) break;
  }
  taps.precision = precision;
  taps.weights.resize(w.size());
  for (std::size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * (1 << precision);
    taps.weights[k] = static_cast<std::int16_t>(v < 0 ? static_cast<int>(v - 0.5) : static_cast<int>(v + 0.5));
  }
  return taps;
}

Image ResizeImage(const Image& image, int out_height, int out_width, ResizeFilter filter) {
  if (image.width < 1 || image.height < 1 || image.rgb.size() != std::size_t(image.width) * image.height * 3) {
    throw Error("image resize: the image is empty or its pixel buffer does not match " + std::to_string(image.width) +
                "x" + std::to_string(image.height));
  }
  if (out_height < 1 || out_width < 1) {
    throw Error("image resize: the target size must be at least 1x1, got " + std::to_string(out_width) + "x" +
                std::to_string(out_height));
  }
  Image out{image.width, image.height, image.rgb};
  if (out_width != image.width) {
    out.rgb = Horizontal(out.rgb, out.height, out.width, ComputeResizeTaps(image.width, out_width, filter));
    out.width = out_width;
  }
  if (out_height != image.height) {
    out.rgb = Vertical(out.rgb, out.width, ComputeResizeTaps(image.height, out_height, filter));
    out.height = out_height;
  }
  return out;
}

}  // namespace kvshare::detail
