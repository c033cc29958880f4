// vision/image_resize.h — the antialiased resize of the HF image processors,
// bit for bit. transformers 5.23's processors (TorchvisionBackend) call
// torchvision's resize on the uint8 image with antialias=True; on CPUs with
// AVX2 / AVX-512 (and on ARM) torch resizes uint8 natively, with PIL-SIMD's
// fixed-point arithmetic (docs/vision.md "Preprocessing"):
//   - per axis, output i has centre c = s(i + 0.5), s = in/out; support
//     r = s·k/2 when downscaling (k: 2 taps bilinear, 4 bicubic), else k/2;
//     taps j in [trunc(c - r + 0.5) clipped at 0, trunc(c + r + 0.5) clipped
//     at in), weights f((j - c + 0.5)·min(1, 1/s)) normalized to sum 1, f the
//     triangle or Keys' cubic with a = -0.5;
//   - weights rounded (half away from zero) to int16 at the most fractional
//     bits p <= 22 that keep the largest weight of the axis under 2^15;
//   - out = clamp((2^(p-1) + sum w_j·x_j) >> p, 0, 255), the horizontal pass
//     first into a uint8 image, then the vertical pass; an axis whose size
//     does not change is not resampled.
// Internal to vision/ (preprocess.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "kvshare/vision/image.h"

namespace kvshare::detail {

enum class ResizeFilter {
  kBilinear,  // PIL resample 2: triangle kernel
  kBicubic,   // PIL resample 3: Keys' cubic, a = -0.5
};

// The kernel value f(x) (0 outside its support).
double ResizeKernel(ResizeFilter filter, double x);

// One axis's taps: output i reads input start[i] .. start[i] + count[i] - 1
// with int16 weights weights[i * max_taps + j] at `precision` fractional bits.
struct ResizeTaps {
  int precision = 0;
  int max_taps = 0;
  std::vector<int> start;             // [out]
  std::vector<int> count;             // [out]
  std::vector<std::int16_t> weights;  // [out * max_taps], zero past count[i]
};

// Taps for resizing an axis of `in` pixels to `out` (both >= 1).
ResizeTaps ComputeResizeTaps(int in, int out, ResizeFilter filter);

// The image resized to out_height x out_width (>= 1). Returns a copy when the
// size does not change. Throws kvshare::Error on an empty image or a size
// below 1.
Image ResizeImage(const Image& image, int out_height, int out_width, ResizeFilter filter);

}  // namespace kvshare::detail
