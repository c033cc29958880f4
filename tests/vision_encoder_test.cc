// The transformer-style vision encoders (gemma3, gemma4v, gemma4uv) on tiny
// random mmproj files against float64 references written from the HF models'
// steps (vision_tiny_mmproj.h, vision_tiny_gemma4.h), at F32 weights and at
// Q8_0 / F16 weights; the f32 and bf16 precisions; thread-count
// independence; the mmproj geometry.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/vision/vision_encoder.h"
#include "vision/bf16_matmul.h"
#include "vision_tiny_gemma4.h"

namespace kvshare::testing {
namespace {

std::string Path(const std::string& name) { return ::testing::TempDir() + "kvshare_vision_" + name + ".gguf"; }

template <typename Tiny>
std::unique_ptr<VisionEncoder> Write(Tiny& m, const std::string& name, const VisionEncoderOptions& options = {}) {
  const std::string path = Path(name);
  WriteFile(path, m.Build().Build());
  return VisionEncoder::Load(path, options);
}

// max |got - want| relative to max |want|.
double RelErr(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

// Tolerances, relative to the largest output. F32 / F16 weights: fp32
// matmuls and norms (measured 1e-7 .. 7e-7 on these files; 5e-6 leaves
// room for other SIMD levels). Q8_0 weights: MatMul rounds the activations to
// int8 per block of 32 (relative error up to 1/254 per element), compounded
// through the layers and the standardize scale (measured 0.6 .. 2.4e-2).
constexpr double kTolFloat = 5e-6;
constexpr double kTolQ8 = 6e-2;

// The config fields every transformer-style encoder has, against the tiny model.
template <typename Tiny>
void ExpectGeometry(const VisionConfig& c, const Tiny& m, int pool) {
  EXPECT_EQ(c.patch_size, m.patch);
  EXPECT_EQ(c.n_embd, m.d);
  EXPECT_EQ(c.n_ff, m.ff);
  EXPECT_EQ(c.n_layer, m.layers);
  EXPECT_EQ(c.n_head, m.heads);
  EXPECT_EQ(c.head_dim, m.d / m.heads);
  EXPECT_EQ(c.pool, pool);
  EXPECT_EQ(c.n_embd_text, m.text);
}

TEST(VisionEncoderTest, Gemma3MatchesReference) {
  for (const auto& [mat, proj, swapped, tol] : {std::tuple{GgmlType::kF32, GgmlType::kF32, false, kTolFloat},
                                                std::tuple{GgmlType::kF32, GgmlType::kF16, true, kTolFloat},
                                                std::tuple{GgmlType::kQ8_0, GgmlType::kF16, false, kTolQ8}}) {
    TinySiglip m;
    m.mat = mat;
    m.proj = proj;
    m.swapped_ffn = swapped;
    auto enc = Write(m, "gemma3");
    const VisionConfig& c = enc->config();
    EXPECT_EQ(c.projector, ProjectorType::kGemma3);
    EXPECT_EQ(c.image_size, m.side * m.patch);
    ExpectGeometry(c, m, m.pool);
    EXPECT_FLOAT_EQ(c.image_mean[1], 0.5f);
    EXPECT_FLOAT_EQ(c.image_std[2], 0.5f);
    const PixelTensor px = RandomPixels(c.image_size, c.image_size, -1.0, 1.0, 11);
    EXPECT_EQ(enc->TokensFor(px), 4);
    const double err = RelErr(enc->Encode(px, nullptr), m.Reference(px));
    EXPECT_LT(err, tol) << GgmlTypeName(mat) << " swapped " << swapped;
  }
}

TEST(VisionEncoderTest, Gemma4MatchesReference) {
  for (const auto& [mat, clamps, standardize, tol] :
       {std::tuple{GgmlType::kF32, false, false, kTolFloat}, std::tuple{GgmlType::kF32, true, false, kTolFloat},
        std::tuple{GgmlType::kF32, false, true, kTolFloat}, std::tuple{GgmlType::kQ8_0, true, true, kTolQ8}}) {
    TinyGemma4V m;
    m.mat = mat;
    m.clamps = clamps;
    m.standardize = standardize;
    auto enc = Write(m, "gemma4v");
    const VisionConfig& c = enc->config();
    EXPECT_EQ(c.projector, ProjectorType::kGemma4V);
    EXPECT_EQ(c.image_size, 0);  // the file's 224 is a dummy
    ExpectGeometry(c, m, 3);
    // 2 x 3 tokens from a 6 x 9 patch grid: rows and columns differ, so the
    // RoPE halves and the position tables are told apart.
    const PixelTensor px = RandomPixels(24, 36, 0.0, 1.0, 12);
    EXPECT_EQ(enc->TokensFor(px), 6);
    const double err = RelErr(enc->Encode(px, nullptr), m.Reference(px));
    EXPECT_LT(err, tol) << GgmlTypeName(mat) << " clamps " << clamps << " standardize " << standardize;
  }
}

TEST(VisionEncoderTest, Gemma4UnifiedMatchesReference) {
  for (const auto& [mat, tol] : {std::pair{GgmlType::kF32, kTolFloat}, std::pair{GgmlType::kQ8_0, kTolQ8}}) {
    TinyGemma4UV m;
    m.mat = mat;
    auto enc = Write(m, "gemma4uv");
    const VisionConfig& c = enc->config();
    EXPECT_EQ(c.projector, ProjectorType::kGemma4UV);
    EXPECT_EQ(c.patch_size, m.patch);
    EXPECT_EQ(c.pool, 1);
    EXPECT_EQ(c.n_layer, 0);  // the file's keys are dummies
    EXPECT_EQ(c.n_embd, m.d);
    EXPECT_EQ(c.n_embd_text, m.text);
    const PixelTensor px = RandomPixels(16, 24, 0.0, 1.0, 13);
    EXPECT_EQ(enc->TokensFor(px), 6);
    const double err = RelErr(enc->Encode(px, nullptr), m.Reference(px));
    EXPECT_LT(err, tol) << GgmlTypeName(mat);
  }
}

// F16 block matrices at each precision. kF32: the float tolerance; kBF16
// (bf16 inputs to every matrix product, src/vision/bf16_matmul.h): measured
// 2.7e-2 relative to the largest output here (each rounded product ~2^-7,
// through 2 layers, the clamps and the norms of a tiny random model), as
// kTolQ8 allows int8 activations; kAuto: bf16
// exactly where the CPU has native bf16 dot products. bf16 outputs do not
// depend on the thread count either. DNNL_MAX_CPU_ISA=AVX512_CORE (bf16
// emulated, auto f32) and =AVX2 (no bf16) run the other levels.
TEST(VisionEncoderTest, PrecisionsOfF16Matrices) {
  using P = EncoderPrecision;
  const bool bf16_ok = detail::Bf16MatMulSupported();
  ThreadPool two(2);
  for (P p : {P::kF32, P::kBF16, P::kAuto}) {
    if (p == P::kBF16 && !bf16_ok) continue;
    TinySiglip g3;
    g3.mat = GgmlType::kF16;
    TinyGemma4V g4;
    g4.mat = GgmlType::kF16;
    g4.clamps = true;
    auto e3 = Write(g3, "prec3", {.precision = p});
    auto e4 = Write(g4, "prec4", {.precision = p});
    const P want = p == P::kAuto ? (detail::Bf16MatMulNative() ? P::kBF16 : P::kF32) : p;
    const double tol = want == P::kBF16 ? kTolQ8 : kTolFloat;
    for (auto* enc : {e3.get(), e4.get()}) EXPECT_EQ(enc->precision(), want) << EncoderPrecisionName(p);
    const PixelTensor px3 = RandomPixels(28, 28, -1.0, 1.0, 4), px4 = RandomPixels(24, 36, 0.0, 1.0, 5);
    const std::vector<float> y3 = e3->Encode(px3, nullptr), y4 = e4->Encode(px4, nullptr);
    EXPECT_LT(RelErr(y3, g3.Reference(px3)), tol) << EncoderPrecisionName(p);
    EXPECT_LT(RelErr(y4, g4.Reference(px4)), tol) << EncoderPrecisionName(p);
    EXPECT_EQ(y3, e3->Encode(px3, &two));
    EXPECT_EQ(y4, e4->Encode(px4, &two));
  }
  if (!bf16_ok) {  // e.g. DNNL_MAX_CPU_ISA=AVX2: bf16 asked for explicitly is an error naming f32
    TinySiglip no;
    no.mat = GgmlType::kF16;
    EXPECT_THROW(Write(no, "prec_none", {.precision = P::kBF16}), Error);
  }
  TinySiglip f32;  // F32 matrices: auto stays f32 everywhere
  EXPECT_EQ(Write(f32, "prec32")->precision(), P::kF32);
  EXPECT_EQ(EncoderPrecisionFromName("bf16", "vision"), P::kBF16);
  EXPECT_THROW(EncoderPrecisionFromName("fp16", "vision"), Error);
}

// Bitwise equal outputs on the calling thread, a pool of 1 and a pool of 2.
TEST(VisionEncoderTest, ThreadCountIndependent) {
  ThreadPool one(1), two(2);
  TinySiglip g3;
  g3.mat = GgmlType::kQ8_0;
  TinyGemma4V g4;
  g4.mat = GgmlType::kQ8_0;
  g4.clamps = true;
  TinyGemma4UV uv;
  const std::vector<std::pair<std::unique_ptr<VisionEncoder>, PixelTensor>> cases = [&] {
    std::vector<std::pair<std::unique_ptr<VisionEncoder>, PixelTensor>> v;
    v.emplace_back(Write(g3, "threads3"), RandomPixels(28, 28, -1.0, 1.0, 1));
    v.emplace_back(Write(g4, "threads4"), RandomPixels(36, 24, 0.0, 1.0, 2));
    v.emplace_back(Write(uv, "threadsu"), RandomPixels(24, 16, 0.0, 1.0, 3));
    return v;
  }();
  for (const auto& [enc, px] : cases) {
    const std::vector<float> a = enc->Encode(px, nullptr), b = enc->Encode(px, &one), c = enc->Encode(px, &two);
    EXPECT_EQ(a, b) << ProjectorTypeName(enc->config().projector);
    EXPECT_EQ(a, c) << ProjectorTypeName(enc->config().projector);
  }
}

// Preprocess gives the HF processor's sizes (Gemma 4's budget rule with
// 48 px cells; Gemma 3's fixed square) and TokensFor their token counts.
TEST(VisionEncoderTest, PreprocessSizesAndTokens) {
  TinyGemma4UV uv;
  uv.patch = 48;
  uv.d = 32;
  uv.text = 32;
  uv.n_pos = 40;
  auto enc = Write(uv, "budget");
  const auto image = [](int w, int h) {
    return Image{w, h, std::vector<std::uint8_t>(3 * static_cast<std::size_t>(w) * h, 100)};
  };
  for (const auto& [w, h, budget, ow, oh] :
       {std::tuple{640, 480, 280, 912, 672}, std::tuple{1920, 1080, 280, 1056, 576},
        std::tuple{896, 896, 280, 768, 768}, std::tuple{4000, 40, 280, 8016, 48}, std::tuple{10000, 10, 280, 13440, 48},
        std::tuple{640, 480, 70, 432, 336}}) {
    const std::vector<PixelTensor> px = enc->Preprocess(image(w, h), {.max_soft_tokens = budget});
    ASSERT_EQ(px.size(), 1u);
    EXPECT_EQ(px[0].width, ow) << w << "x" << h;
    EXPECT_EQ(px[0].height, oh) << w << "x" << h;
    EXPECT_EQ(enc->TokensFor(px[0]), (ow / 48) * (oh / 48));
    EXPECT_LE(enc->TokensFor(px[0]), budget);
  }
  EXPECT_THROW(enc->Preprocess(image(64, 64), {.max_soft_tokens = 100}), Error);
  EXPECT_THROW(enc->Preprocess(Image{}, {}), Error);

  TinySiglip g3;
  auto e3 = Write(g3, "fixed");
  const std::vector<PixelTensor> px = e3->Preprocess(image(50, 30), {});
  ASSERT_EQ(px.size(), 1u);
  EXPECT_EQ(px[0].width, 28);
  EXPECT_EQ(px[0].height, 28);
  EXPECT_EQ(e3->TokensFor(px[0]), 4);
  EXPECT_EQ(e3->Encode(px[0], nullptr).size(), 4u * g3.text);
}

}  // namespace
}  // namespace kvshare::testing
