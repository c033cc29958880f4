// Gemma 3n's MobileNet-V5 encoder against its peers: a tiny tower built from
// timm's own MobileNetV5 blocks and HF transformers' Gemma3nMultimodalEmbedder
// (tests/tools/gemma3n_vision_fixtures.py wrote the mmproj and HF's float32
// features for one pixel tensor into tests/fixtures/vision/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "common_source_path.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/gguf/gguf.h"
#include "vision/mobilenet_v5.h"

namespace kvshare {
namespace {

// HF runs float32 (its own float32 vs float64 error: 1.8e-6); measured here
// 1.3e-6 (docs/vision_mobilenet_v5.md).
constexpr double kRelTol = 1e-5;

std::string FixturePath(const std::string& name) { return testing::SourcePath("tests/fixtures/vision/") + name; }

std::vector<float> Floats(const GgufFile& f, const std::string& name) {
  const GgufTensor& t = f.Tensor(name);
  EXPECT_EQ(t.type, GgmlType::kF32);
  const float* p = reinterpret_cast<const float*>(t.data);
  return std::vector<float>(p, p + t.NumElements());
}

TEST(VisionMobileNetV5Peer, MatchesTimmAndTransformers) {
  const GgufFile expected = GgufFile::Open(FixturePath("gemma3n_tiny_features.gguf"));
  const GgufTensor& ft = expected.Tensor("features");
  const GgufTensor& pt = expected.Tensor("pixels");
  VisionConfig config;
  config.projector = ProjectorType::kGemma3nV;
  config.image_size = static_cast<int>(pt.ne[0]);
  // patch_size, eps and the text width come from the file (the loader's job
  // once VisionEncoder::Load dispatches here).
  GgufFile mmproj = GgufFile::Open(FixturePath("gemma3n_tiny_mmproj.gguf"));
  config.patch_size = static_cast<int>(mmproj.GetU32("clip.vision.patch_size"));
  config.eps = mmproj.GetF32("clip.vision.attention.layer_norm_epsilon");
  const auto encoder = detail::LoadMobileNetV5(std::move(mmproj), config);
  PixelTensor px{static_cast<int>(pt.ne[1]), static_cast<int>(pt.ne[0]), Floats(expected, "pixels")};
  ASSERT_EQ(encoder->TokensFor(px), ft.ne[1]);
  ASSERT_EQ(encoder->config().n_embd_text, ft.ne[0]);
  const std::vector<float> want = Floats(expected, "features");
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const std::vector<float> got = encoder->Encode(px, p);
    ASSERT_EQ(got.size(), want.size());
    double err = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, static_cast<double>(std::abs(got[i] - want[i])));
      scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    }
    std::printf("max relative error against HF: %.3g\n", err / scale);
    EXPECT_LT(err / scale, kRelTol);
  }
}

}  // namespace
}  // namespace kvshare
