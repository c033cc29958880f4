// Gemma 3n's MobileNet-V5 encoder (src/vision/mobilenet_v5.cc) on tiny
// random-weight mmprojs written by the test, against a float64 loop
// reference (vision_mobilenet_reference.h), plus thread-count independence
// and the load / input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "vision/mmproj.h"
#include "vision/mobilenet_v5.h"
#include "vision_mobilenet_fixture.h"
#include "vision_mobilenet_reference.h"

namespace kvshare {
namespace {

using testing::DefaultTinyMnv5;
using testing::Mnv5Reference;
using testing::Mnv5RefVariant;
using testing::TinyMnv5;
using testing::TinyMnv5Writer;

// fp32 through ~15 blocks, each ending in an RMSNorm (which keeps relative
// errors from growing with depth): a few hundred fp32 roundings of O(1)
// values per output, measured max 6.4e-6 (docs/vision_mobilenet_v5.md); 1e-4
// leaves room for other SIMD levels and oneDNN kernels.
constexpr double kTol = 1e-4;

struct Loaded {
  std::vector<std::uint8_t> bytes;  // the GgufFile reads these in place
  std::unique_ptr<VisionEncoder> encoder;
};

VisionConfig ConfigFor(const TinyMnv5& m) {
  VisionConfig c;
  c.projector = ProjectorType::kGemma3nV;
  c.image_size = m.image_size;
  c.patch_size = m.patch_size;
  return c;
}

Loaded Load(std::vector<std::uint8_t> bytes, const VisionConfig& config) {
  Loaded l{std::move(bytes), nullptr};
  l.encoder = detail::LoadMobileNetV5(GgufFile::Parse(l.bytes.data(), l.bytes.size(), "tiny.mmproj"), config);
  return l;
}

PixelTensor RandomPixels(int side, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  PixelTensor p{side, side, std::vector<float>(3u * side * side)};
  for (float& v : p.chw) v = u(rng);
  return p;
}

// max |got - want| / max |want|.
double RelErr(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

struct Geometry {
  const char* name;
  TinyMnv5 model;
};

std::vector<Geometry> Geometries() {
  TinyMnv5 even = DefaultTinyMnv5();  // 128 px: 64, 32, 16, 8, 4; fusion 8x8 -> 4x4 tokens
  TinyMnv5 odd = DefaultTinyMnv5();   // 112 px: 56, 28, 14, 7, 4; fusion 7x7 -> 1 token
  odd.image_size = 112;
  odd.patch_size = 112;
  odd.seed = 7;
  TinyMnv5 f16 = DefaultTinyMnv5();  // kernels and projection stored as F16
  f16.f16_convs = true;
  f16.seed = 3;
  return {{"even_128", even}, {"odd_112", odd}, {"f16_weights", f16}};
}

TEST(VisionMobileNetV5, MatchesFloat64Reference) {
  for (const Geometry& g : Geometries()) {
    SCOPED_TRACE(g.name);
    TinyMnv5Writer w(g.model);
    const Loaded l = Load(w.Bytes(), ConfigFor(g.model));
    const PixelTensor px = RandomPixels(g.model.image_size, 11);
    const std::vector<float> got = l.encoder->Encode(px, nullptr);
    const std::vector<double> want = Mnv5Reference(g.model, w.weights()).Encode(px.chw);
    const int grid = static_cast<int>(std::lround(std::sqrt(g.model.image_size / g.model.patch_size)));
    EXPECT_EQ(l.encoder->TokensFor(px), grid * grid);
    EXPECT_EQ(got.size(), static_cast<std::size_t>(grid * grid * g.model.n_text));
    const double err = RelErr(got, want);
    std::printf("%s: %.3g\n", g.name, err);
    EXPECT_LT(err, kTol);
  }
}

// The comparison catches the mistakes a port is likely to make: each planted
// variant of the reference is far outside the tolerance.
TEST(VisionMobileNetV5, PlantedVariantsAreCaught) {
  const TinyMnv5 m = DefaultTinyMnv5();
  TinyMnv5Writer w(m);
  const Loaded l = Load(w.Bytes(), ConfigFor(m));
  const PixelTensor px = RandomPixels(m.image_size, 12);
  const std::vector<float> got = l.encoder->Encode(px, nullptr);
  const std::pair<const char*, Mnv5RefVariant> variants[] = {
      {"erf GELU", {.erf_gelu = true}},
      {"symmetric padding", {.symmetric_pad = true}},
      {"no K/V down-sampling", {.no_kv_down = true}},
      {"no layer scale", {.no_layer_scale = true}},
  };
  for (const auto& [name, v] : variants) {
    SCOPED_TRACE(name);
    const double err = RelErr(got, Mnv5Reference(m, w.weights(), v).Encode(px.chw));
    std::printf("%s: %.3g\n", name, err);
    EXPECT_GT(err, 10 * kTol);
  }
}

TEST(VisionMobileNetV5, ThreadCountDoesNotChangeResults) {
  const TinyMnv5 m = DefaultTinyMnv5();
  TinyMnv5Writer w(m);
  const Loaded l = Load(w.Bytes(), ConfigFor(m));
  const PixelTensor px = RandomPixels(m.image_size, 13);
  const std::vector<float> base = l.encoder->Encode(px, nullptr);
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    EXPECT_EQ(l.encoder->Encode(px, &pool), base) << n << " threads";
  }
}

TEST(VisionMobileNetV5, ConfigFromShapes) {
  const TinyMnv5 m = DefaultTinyMnv5();
  TinyMnv5Writer w(m);
  VisionConfig c = ConfigFor(m);
  c.n_embd_text = m.n_text;
  const Loaded l = Load(w.Bytes(), c);
  EXPECT_EQ(l.encoder->config().projector, ProjectorType::kGemma3nV);
  EXPECT_EQ(l.encoder->config().n_embd, m.n_embd);
  EXPECT_EQ(l.encoder->config().n_embd_text, m.n_text);
  EXPECT_EQ(l.encoder->config().image_size, m.image_size);
  EXPECT_EQ(&l.encoder->gguf(), &l.encoder->gguf());
  EXPECT_EQ(l.encoder->gguf().name(), "tiny.mmproj");
}

// Through ReadVisionConfig (as VisionEncoder::Load reads a file): the token
// grid comes from the converter's dummy patch_size (image_size / tokens), as
// in the released mmproj (768 / 3: 256 tokens), not from the config's cell.
TEST(VisionMobileNetV5, TokenGridFromTheFilesPatchSize) {
  TinyMnv5 m = DefaultTinyMnv5();
  m.patch_size = 2;  // 128 / 2 = 64 tokens: an 8 x 8 grid
  m.keep_values = false;
  TinyMnv5Writer w(m);
  std::vector<std::uint8_t> bytes = w.Bytes();
  GgufFile f = GgufFile::Parse(bytes.data(), bytes.size(), "tiny.mmproj");
  const VisionConfig c = detail::ReadVisionConfig(f);
  const auto enc = detail::LoadMobileNetV5(std::move(f), c);
  const PixelTensor px = RandomPixels(m.image_size, 13);
  EXPECT_EQ(enc->TokensFor(px), 64);
  EXPECT_EQ(enc->TokensForSize(m.image_size, m.image_size), 64);
  EXPECT_EQ(enc->config().patch_size, 16);
  EXPECT_EQ(enc->Encode(px, nullptr).size(), static_cast<std::size_t>(64 * m.n_text));
}

void ExpectLoadError(std::vector<std::uint8_t> bytes, const VisionConfig& c, const std::string& needle) {
  try {
    Load(std::move(bytes), c);
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Removes the tensor `name` from the writer's file.
void Drop(TinyMnv5Writer& w, const std::string& name) {
  auto& t = w.spec().tensors;
  t.erase(std::remove_if(t.begin(), t.end(), [&](const auto& s) { return s.name == name; }), t.end());
}

TEST(VisionMobileNetV5, LoadErrors) {
  const TinyMnv5 m = DefaultTinyMnv5();
  {
    TinyMnv5Writer w(m);
    VisionConfig c = ConfigFor(m);
    c.n_embd_text = m.n_text + 1;
    ExpectLoadError(w.Bytes(), c, "n_embd_text 25");
  }
  {
    TinyMnv5Writer w(m);
    Drop(w, "v.msfa.norm.weight");
    ExpectLoadError(w.Bytes(), ConfigFor(m), "v.msfa.norm.weight");
  }
  {
    TinyMnv5Writer w(m);  // a UIR without pw_exp is of no known kind
    Drop(w, "v.blk.2.2.pw_exp.conv.weight");
    ExpectLoadError(w.Bytes(), ConfigFor(m), "no known kind");
  }
  {
    TinyMnv5 one = m;  // a single stage: nothing to fuse
    one.stages.resize(1);
    TinyMnv5Writer w(one);
    for (const char* n : {"v.msfa.ffn.pw_exp.conv.weight"}) Drop(w, n);
    ExpectLoadError(w.Bytes(), ConfigFor(one), "at least 2");
  }
  {
    TinyMnv5 g16 = m;  // 128 / 14 is not whole: timm's 16x16 grid, which the 8x8 fusion map cannot give
    g16.patch_size = 14;
    TinyMnv5Writer w(g16);
    VisionConfig c = ConfigFor(g16);
    c.patch_size = 0;  // read from the file
    ExpectLoadError(w.Bytes(), c, "does not pool");
  }
  {
    TinyMnv5Writer w(m);  // a kernel of the wrong rank
    for (auto& t : w.spec().tensors) {
      if (t.name == "v.blk.1.0.dw_mid.conv.weight") t.ne = {25, 1, t.ne[3]};
    }
    ExpectLoadError(w.Bytes(), ConfigFor(m), "v.blk.1.0.dw_mid.conv.weight");
  }
}

TEST(VisionMobileNetV5, EncodeRejectsWrongGeometry) {
  const TinyMnv5 m = DefaultTinyMnv5();
  TinyMnv5Writer w(m);
  const Loaded l = Load(w.Bytes(), ConfigFor(m));
  for (PixelTensor p : {RandomPixels(64, 1), RandomPixels(m.image_size, 1)}) {
    if (p.height == m.image_size) p.chw.pop_back();
    EXPECT_THROW(l.encoder->Encode(p, nullptr), Error);
  }
  EXPECT_THROW(l.encoder->Preprocess(Image{}, {}), Error);
}

}  // namespace
}  // namespace kvshare

namespace kvshare {
namespace {

// By hand (--gtest_also_run_disabled_tests): the real tower's geometry with
// random F16 weights, timed at 1 and 2 threads; docs/vision_mobilenet_v5.md has numbers.
TEST(VisionMobileNetV5, DISABLED_RealGeometryTiming) {
  const TinyMnv5 m = testing::RealMnv5_300m();
  std::vector<std::uint8_t> bytes;
  {
    TinyMnv5Writer w(m);
    bytes = w.Bytes();
  }
  const Loaded l = Load(std::move(bytes), ConfigFor(m));
  const PixelTensor px = RandomPixels(m.image_size, 5);
  std::vector<float> first;
  for (int threads : {1, 2, 1, 2}) {
    ThreadPool pool(threads);
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    const std::vector<float> out = l.encoder->Encode(px, &pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    std::printf("768 px, %d thread(s): %.2f s wall, %.2f s CPU\n", threads, s, cpu);
    ASSERT_EQ(out.size(), 256u * 2048u);
    for (float v : out) ASSERT_TRUE(std::isfinite(v));
    if (first.empty()) first = out;
    EXPECT_EQ(out, first);
  }
}

}  // namespace
}  // namespace kvshare
