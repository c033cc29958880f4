// The HF image processors' arithmetic (vision/image_resize.h,
// vision/preprocess.h): the fixed-point resize against a plain double
// reference (within 1 level) and against torchvision's own output (bit for
// bit, tests/fixtures/vision/resize_torch.txt from
// tests/tools/vision_resize_fixture.py); the float conversions as HF orders
// them; Gemma 4's target sizes and Gemma 3's pan-and-scan crops against the
// values transformers 5.23 computes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common_source_path.h"
#include "kvshare/common/error.h"
#include "vision/image_resize.h"
#include "vision/preprocess.h"

namespace kvshare::detail {
namespace {

Image RandomImage(int height, int width, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Image image{width, height, std::vector<std::uint8_t>(std::size_t(width) * height * 3)};
  for (auto& v : image.rgb) v = static_cast<std::uint8_t>(rng() & 255);
  return image;
}

// The plain reference: the same windows and kernel in double, each pass
// rounded and clamped to 8 bits (the uint8 image between passes is part of
// what torch computes), no fixed point.
std::vector<double> ReferencePass(const std::vector<double>& in, int outer, int in_len, int out_len, int inner,
                                  ResizeFilter filter) {
  const double scale = static_cast<double>(in_len) / out_len;
  const double half_taps = filter == ResizeFilter::kBilinear ? 1.0 : 2.0;
  const double support = scale >= 1 ? half_taps * scale : half_taps;
  const double stretch = scale >= 1 ? scale : 1.0;
  std::vector<double> out(std::size_t(outer) * out_len * inner);
  for (int i = 0; i < out_len; ++i) {
    const double center = scale * (i + 0.5);
    const int lo = std::max(0, static_cast<int>(center - support + 0.5));
    const int hi = std::min(in_len, static_cast<int>(center + support + 0.5));
    std::vector<double> w;
    double total = 0;
    for (int j = lo; j < hi; ++j) {
      w.push_back(ResizeKernel(filter, (j - center + 0.5) / stretch));
      total += w.back();
    }
    for (int o = 0; o < outer; ++o) {
      for (int k = 0; k < inner; ++k) {
        double acc = 0;
        for (int j = lo; j < hi; ++j) acc += w[j - lo] / total * in[(std::size_t(o) * in_len + j) * inner + k];
        out[(std::size_t(o) * out_len + i) * inner + k] = std::clamp(std::round(acc), 0.0, 255.0);
      }
    }
  }
  return out;
}

// One pass at a time: the horizontal pass of the image, then the vertical
// pass of kvshare's own horizontal result, so each compares with the double
// math on the same 8-bit input.
double MaxPassDiff(const Image& image, const Image& got, int out_h, int out_w, ResizeFilter filter) {
  std::vector<double> ref(image.rgb.begin(), image.rgb.end());
  if (out_w != image.width) ref = ReferencePass(ref, image.height, image.width, out_w, 3, filter);
  if (out_h != image.height) {
    const Image wide = ResizeImage(image, image.height, out_w, filter);
    ref =
        ReferencePass(std::vector<double>(wide.rgb.begin(), wide.rgb.end()), 1, image.height, out_h, out_w * 3, filter);
  }
  double max_diff = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) max_diff = std::max(max_diff, std::abs(got.rgb[i] - ref[i]));
  return max_diff;
}

TEST(VisionResize, Kernels) {
  EXPECT_EQ(ResizeKernel(ResizeFilter::kBilinear, 0.0), 1.0);
  EXPECT_EQ(ResizeKernel(ResizeFilter::kBilinear, -0.25), 0.75);
  EXPECT_EQ(ResizeKernel(ResizeFilter::kBilinear, 1.0), 0.0);
  EXPECT_EQ(ResizeKernel(ResizeFilter::kBicubic, 0.0), 1.0);
  EXPECT_EQ(ResizeKernel(ResizeFilter::kBicubic, 1.0), 0.0);
  EXPECT_EQ(ResizeKernel(ResizeFilter::kBicubic, 2.0), 0.0);
  EXPECT_EQ(ResizeKernel(ResizeFilter::kBicubic, 0.5), 0.5625);  // Keys, a = -0.5
  EXPECT_EQ(ResizeKernel(ResizeFilter::kBicubic, -1.5), -0.0625);
}

TEST(VisionResize, TapsAreNormalizedInt16) {
  for (ResizeFilter filter : {ResizeFilter::kBilinear, ResizeFilter::kBicubic}) {
    for (auto [in, out] : {std::pair{1000, 7}, {7, 1000}, {896, 896}, {3, 1}, {1, 5}, {4032, 896}, {33, 32}}) {
      const ResizeTaps taps = ComputeResizeTaps(in, out, filter);
      ASSERT_EQ(taps.start.size(), std::size_t(out));
      for (int i = 0; i < out; ++i) {
        ASSERT_GE(taps.start[i], 0);
        ASSERT_LE(taps.start[i] + taps.count[i], in);
        ASSERT_LE(taps.count[i], taps.max_taps);
        std::int64_t sum = 0;
        for (int j = 0; j < taps.max_taps; ++j) sum += taps.weights[std::size_t(i) * taps.max_taps + j];
        // Each weight rounds by at most 1/2 unit.
        EXPECT_LE(std::abs(sum - (std::int64_t{1} << taps.precision)), (taps.count[i] + 1) / 2) << in << "->" << out;
      }
    }
  }
}

TEST(VisionResize, MatchesTheDoubleReferenceWithinOneLevel) {
  const std::pair<int, int> sizes[] = {{1, 1}, {1, 9}, {13, 1}, {5, 7}, {37, 29}, {64, 48}, {96, 17}, {29, 37}};
  std::uint32_t seed = 1;
  for (ResizeFilter filter : {ResizeFilter::kBilinear, ResizeFilter::kBicubic}) {
    for (auto [h, w] : sizes) {
      const Image image = RandomImage(h, w, seed++);
      for (auto [oh, ow] : sizes) {
        const Image got = ResizeImage(image, oh, ow, filter);
        ASSERT_EQ(got.height, oh);
        ASSERT_EQ(got.width, ow);
        // Fixed-point weights move a sum near .5 across the rounding point.
        EXPECT_LE(MaxPassDiff(image, got, oh, ow, filter), 1.0) << h << "x" << w << " -> " << oh << "x" << ow;
      }
    }
  }
}

std::vector<std::uint8_t> FromHex(const std::string& hex) {
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

TEST(VisionResize, EqualsTorchvisionBitForBit) {
  std::ifstream in(testing::SourcePath("tests/fixtures/vision/resize_torch.txt"));
  ASSERT_TRUE(in);
  std::map<std::string, Image> images;
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind, name, hex;
    fields >> kind >> name;
    if (kind == "image") {
      Image image;
      fields >> image.height >> image.width >> hex;
      image.rgb = FromHex(hex);
      ASSERT_EQ(image.rgb.size(), std::size_t(image.width) * image.height * 3);
      images[name] = image;
      continue;
    }
    std::string filter;
    int h = 0, w = 0;
    fields >> filter >> h >> w >> hex;
    const Image got =
        ResizeImage(images.at(name), h, w, filter == "bilinear" ? ResizeFilter::kBilinear : ResizeFilter::kBicubic);
    EXPECT_EQ(got.rgb, FromHex(hex)) << name << " " << filter << " -> " << h << "x" << w;
    ++cases;
  }
  EXPECT_EQ(cases, 36);
}

TEST(VisionResize, SameSizeIsACopyAndBadSizesThrow) {
  const Image image = RandomImage(4, 6, 9);
  EXPECT_EQ(ResizeImage(image, 4, 6, ResizeFilter::kBicubic).rgb, image.rgb);
  EXPECT_THROW(ResizeImage(image, 0, 6, ResizeFilter::kBicubic), Error);
  EXPECT_THROW(ResizeImage(Image{}, 4, 6, ResizeFilter::kBicubic), Error);
}

TEST(VisionPreprocess, FixedSizeNormalizesAsHfFuses) {
  const Image image = RandomImage(30, 20, 3);
  FixedResizeParams params{.size = 16, .filter = ResizeFilter::kBilinear, .normalize = true};
  const PixelTensor px = PreprocessFixed(image, params);
  ASSERT_EQ(px.height, 16);
  ASSERT_EQ(px.width, 16);
  ASSERT_EQ(px.chw.size(), 3u * 16 * 16);
  const Image resized = ResizeImage(image, 16, 16, ResizeFilter::kBilinear);
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 256; ++i) {
      // (x - 0.5·255) / (0.5·255) in float32: HF's fused rescale + normalize.
      const float want = (static_cast<float>(resized.rgb[i * 3 + c]) - 127.5f) / 127.5f;
      ASSERT_EQ(px.chw[c * 256 + i], want);
    }
  }
  params.normalize = false;  // Gemma 3n: x · float(1/255)
  const PixelTensor raw = PreprocessFixed(image, params);
  const float factor = static_cast<float>(1.0 / 255.0);
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 256; ++i) ASSERT_EQ(raw.chw[c * 256 + i], static_cast<float>(resized.rgb[i * 3 + c]) * factor);
  }
  params.std[1] = 0.0f;
  params.normalize = true;
  EXPECT_THROW(PreprocessFixed(image, params), Error);
}

TEST(VisionPreprocess, PanAndScanCropsAsHf) {
  // {height, width} -> crop sizes, from transformers 5.23's
  // Gemma3ImageProcessor.pan_and_scan_batched(min 256, max 4 crops, ratio 1.2).
  struct Case {
    int h, w;
    std::vector<std::pair<int, int>> crops;  // {height, width}
  };
  const Case cases[] = {
      {500, 1000, {{500, 500}, {500, 500}}},
      {1000, 500, {{500, 500}, {500, 500}}},
      {200, 300, {}},
      {400, 479, {}},
      {400, 480, {}},
      {300, 1000, {{300, 334}, {300, 334}, {300, 332}}},
      {257, 2000, {{257, 500}, {257, 500}, {257, 500}, {257, 500}}},
      {600, 1000, {{600, 500}, {600, 500}}},
      {256, 1024, {{256, 256}, {256, 256}, {256, 256}, {256, 256}}},
      {255, 1024, {}},
      {512, 2600, {{512, 650}, {512, 650}, {512, 650}, {512, 650}}},
      {1000, 1000, {}},
  };
  for (const Case& c : cases) {
    const std::vector<CropRect> crops = PanAndScanCrops(c.h, c.w, {});
    ASSERT_EQ(crops.size(), c.crops.size()) << c.h << "x" << c.w;
    int along = 0;
    for (std::size_t i = 0; i < crops.size(); ++i) {
      EXPECT_EQ(crops[i].height, c.crops[i].first);
      EXPECT_EQ(crops[i].width, c.crops[i].second);
      EXPECT_EQ(c.w >= c.h ? crops[i].x : crops[i].y, along);
      along += c.w >= c.h ? crops[i].width : crops[i].height;
    }
  }
}

TEST(VisionPreprocess, Gemma3FullImageThenCrops) {
  const Image image = RandomImage(260, 600, 5);
  const FixedResizeParams params{.size = 32};
  const PanAndScanParams pas;
  EXPECT_EQ(PreprocessGemma3(image, params, nullptr).size(), 1u);
  const std::vector<PixelTensor> tensors = PreprocessGemma3(image, params, &pas);
  ASSERT_EQ(tensors.size(), 3u);  // ratio 2.3: two crops of 300 columns
  EXPECT_EQ(tensors[0].chw, PreprocessFixed(image, params).chw);
  EXPECT_EQ(tensors[2].chw, PreprocessFixed(CropImage(image, {300, 0, 300, 260}), params).chw);
  EXPECT_THROW(CropImage(image, {600, 0, 10, 10}), Error);
}

TEST(VisionPreprocess, Gemma4TargetSizesAsHf) {
  // {height, width} -> {budget: {height, width}} from transformers 5.23's
  // get_aspect_ratio_preserving_size (patch 16, pooling 3).
  struct Case {
    int h, w;
    int sizes[5][2];  // budgets 70, 140, 280, 560, 1120
  };
  const Case cases[] = {
      {480, 640, {{336, 432}, {480, 624}, {672, 912}, {960, 1296}, {1344, 1824}}},
      {1080, 1920, {{288, 528}, {384, 720}, {576, 1056}, {816, 1488}, {1200, 2112}}},
      {896, 896, {{384, 384}, {528, 528}, {768, 768}, {1104, 1104}, {1584, 1584}}},
      {1, 1, {{384, 384}, {528, 528}, {768, 768}, {1104, 1104}, {1584, 1584}}},
      {7, 5, {{432, 336}, {672, 480}, {912, 672}, {1344, 960}, {1872, 1344}}},
      {333, 1000, {{192, 672}, {288, 960}, {432, 1344}, {624, 1968}, {912, 2736}}},
      {20, 4000, {{48, 3360}, {48, 6720}, {48, 11328}, {48, 16032}, {96, 22704}}},
      {4000, 20, {{3360, 48}, {6720, 48}, {11328, 48}, {16032, 48}, {22704, 96}}},
      {2, 100000, {{48, 3360}, {48, 6720}, {48, 13440}, {48, 26880}, {48, 53760}}},
  };
  const int budgets[] = {70, 140, 280, 560, 1120};
  for (const Case& c : cases) {
    for (int b = 0; b < 5; ++b) {
      const TargetSize size = Gemma4TargetSize(c.h, c.w, budgets[b]);
      EXPECT_EQ(size.height, c.sizes[b][0]) << c.h << "x" << c.w << " @" << budgets[b];
      EXPECT_EQ(size.width, c.sizes[b][1]) << c.h << "x" << c.w << " @" << budgets[b];
      EXPECT_LE((size.height / 48) * (size.width / 48), budgets[b]);
    }
  }
  EXPECT_THROW(Gemma4TargetSize(480, 640, 100), Error);
  EXPECT_THROW(Gemma4TargetSize(0, 640, 280), Error);
}

TEST(VisionPreprocess, Gemma4ResizesBicubicAndRescales) {
  const Image image = RandomImage(50, 70, 7);
  const PixelTensor px = PreprocessGemma4(image, 70);
  const TargetSize size = Gemma4TargetSize(50, 70, 70);
  ASSERT_EQ(px.height, size.height);
  ASSERT_EQ(px.width, size.width);
  const Image resized = ResizeImage(image, size.height, size.width, ResizeFilter::kBicubic);
  const std::size_t plane = std::size_t(px.height) * px.width;
  const float factor = static_cast<float>(1.0 / 255.0);
  for (int c = 0; c < 3; ++c) {
    for (std::size_t i = 0; i < plane; ++i) {
      ASSERT_EQ(px.chw[c * plane + i], static_cast<float>(resized.rgb[i * 3 + c]) * factor);
    }
  }
  EXPECT_THROW(PreprocessGemma4(Image{}, 280), Error);
  EXPECT_THROW(PreprocessGemma4(image, 281), Error);
}

}  // namespace
}  // namespace kvshare::detail
