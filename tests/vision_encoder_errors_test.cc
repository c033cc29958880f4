// Every error of VisionEncoder::Load / Encode and CheckMmprojFitsText: a
// kvshare::Error whose message says what was wrong and what was expected.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "kvshare/common/error.h"
#include "kvshare/vision/vision_encoder.h"
#include "vision_tiny_gemma4.h"

namespace kvshare::testing {
namespace {

// The message of the kvshare::Error that `fn` throws ("" if none).
template <typename Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void SetKey(GgufSpec& s, const GgufKv& kv) {
  for (GgufKv& k : s.kvs) {
    if (k.key == kv.key) {
      k = kv;
      return;
    }
  }
  s.kvs.push_back(kv);
}
void DropKey(GgufSpec& s, const std::string& key) {
  std::erase_if(s.kvs, [&](const GgufKv& k) { return k.key == key; });
}
void DropTensor(GgufSpec& s, const std::string& name) {
  std::erase_if(s.tensors, [&](const GgufTensorSpec& t) { return t.name == name; });
}
GgufTensorSpec& TensorIn(GgufSpec& s, const std::string& name) {
  for (GgufTensorSpec& t : s.tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("no tensor " + name);
}

// Load's error for the tiny model `m` after `edit`.
template <typename Tiny>
std::string LoadError(Tiny m, std::function<void(GgufSpec&)> edit) {
  m.edit = std::move(edit);
  // One file per test: ctest runs the tests of this suite in parallel.
  const std::string path = ::testing::TempDir() + "kvshare_vision_err_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf";
  WriteFile(path, m.Build().Build());
  return ErrorOf([&] { VisionEncoder::Load(path); });
}

TEST(VisionEncoderErrorsTest, NotAnMmproj) {
  const std::string e =
      LoadError(TinySiglip{}, [](GgufSpec& s) { SetKey(s, GgufKv::Str("general.architecture", "gemma3")); });
  EXPECT_NE(e.find("is not an mmproj file: general.architecture is 'gemma3', expected 'clip'"), std::string::npos) << e;
  const std::string t = LoadError(TinySiglip{}, [](GgufSpec& s) { SetKey(s, GgufKv::Str("general.type", "model")); });
  EXPECT_NE(t.find("general.type is 'model', expected 'mmproj'"), std::string::npos) << t;
}

TEST(VisionEncoderErrorsTest, UnsupportedProjector) {
  const std::string e =
      LoadError(TinySiglip{}, [](GgufSpec& s) { SetKey(s, GgufKv::Str("clip.projector_type", "llava")); });
  EXPECT_NE(e.find("vision projector type 'llava' is not supported (supported: gemma3, gemma3nv, gemma4v, gemma4uv)"),
            std::string::npos)
      << e;
}

// NaN or infinite constants would encode every image as NaN rows.
TEST(VisionEncoderErrorsTest, NonFiniteConstants) {
  const float inf = std::numeric_limits<float>::infinity();
  std::string e = LoadError(
      TinySiglip{}, [&](GgufSpec& s) { SetKey(s, GgufKv::F32("clip.vision.attention.layer_norm_epsilon", inf)); });
  EXPECT_NE(e.find("clip.vision.attention.layer_norm_epsilon is inf, expected finite and >= 0"), std::string::npos)
      << e;
  e = LoadError(TinySiglip{}, [&](GgufSpec& s) {
    SetKey(s, GgufKv::F32Array("clip.vision.image_mean", {0.5f, inf, 0.5f}));
  });
  EXPECT_NE(e.find("clip.vision.image_mean holds inf, expected finite"), std::string::npos) << e;
  e = LoadError(TinySiglip{}, [&](GgufSpec& s) {
    SetKey(s, GgufKv::F32Array("clip.vision.image_std", {0.5f, inf, 0.5f}));
  });
  EXPECT_NE(e.find("clip.vision.image_std holds inf, expected finite and > 0"), std::string::npos) << e;
}

TEST(VisionEncoderErrorsTest, AudioOnly) {
  const std::string e = LoadError(TinyGemma4V{}, [](GgufSpec& s) {
    DropKey(s, "clip.vision.projector_type");
    SetKey(s, GgufKv::Bool("clip.has_vision_encoder", false));
    SetKey(s, GgufKv::Str("clip.audio.projector_type", "gemma4a"));
  });
  EXPECT_NE(e.find("has no vision encoder"), std::string::npos) << e;
  EXPECT_NE(e.find("audio-only"), std::string::npos) << e;
}

TEST(VisionEncoderErrorsTest, Gemma3nNotBuiltYetOrLoads) {
  // The stub's error until the MobileNet-V5 encoder lands; the config is read first.
  const std::string e = LoadError(TinyGemma4UV{}, [](GgufSpec& s) {
    SetKey(s, GgufKv::Str("clip.vision.projector_type", "gemma3nv"));
    SetKey(s, GgufKv::U32("clip.vision.image_size", 768));
  });
  EXPECT_NE(e, "");
}

TEST(VisionEncoderErrorsTest, MissingTensor) {
  for (const char* name :
       {"v.blk.1.attn_k.weight", "v.post_ln.bias", "mm.soft_emb_norm.weight", "v.patch_embd.weight"}) {
    const std::string e = LoadError(TinySiglip{}, [&](GgufSpec& s) { DropTensor(s, name); });
    EXPECT_NE(e.find(std::string("tensor '") + name + "' not found"), std::string::npos) << e;
  }
  for (const char* name : {"v.blk.0.attn_q_norm.weight", "v.blk.1.ffn_gate.weight", "v.position_embd.weight"}) {
    const std::string e = LoadError(TinyGemma4V{}, [&](GgufSpec& s) { DropTensor(s, name); });
    EXPECT_NE(e.find(std::string("tensor '") + name + "' not found"), std::string::npos) << e;
  }
  for (const char* name : {"v.patch_norm.3.weight", "mm.input_projection.weight"}) {
    const std::string e = LoadError(TinyGemma4UV{}, [&](GgufSpec& s) { DropTensor(s, name); });
    EXPECT_NE(e.find(std::string("tensor '") + name + "' not found"), std::string::npos) << e;
  }
  const std::string blocks = LoadError(TinyGemma4V{}, [](GgufSpec& s) {
    std::erase_if(s.tensors, [](const GgufTensorSpec& t) { return t.name.starts_with("v.blk."); });
  });
  EXPECT_NE(blocks.find("no encoder blocks"), std::string::npos) << blocks;
}

TEST(VisionEncoderErrorsTest, IllShapedTensor) {
  // A Linear of the wrong shape: TensorLookup's wording.
  const std::string q = LoadError(TinySiglip{}, [](GgufSpec& s) {
    TensorIn(s, "v.blk.0.attn_q.weight").ne = {32, 128};
  });
  EXPECT_NE(q.find("tensor 'v.blk.0.attn_q.weight' is [32, 128] (ne0, ne1), expected [64, 64]"), std::string::npos)
      << q;
  const std::string pos = LoadError(TinySiglip{}, [](GgufSpec& s) {
    TensorIn(s, "v.position_embd.weight").ne = {64, 15};
  });
  EXPECT_NE(pos.find("'v.position_embd.weight' is [64, 15], expected [64, side * side]"), std::string::npos) << pos;
  const std::string proj = LoadError(TinyGemma4V{}, [](GgufSpec& s) {
    TensorIn(s, "mm.input_projection.weight").ne = {48, 64};
  });
  EXPECT_NE(proj.find("'mm.input_projection.weight' is [48, 64], expected [64, n_embd_text]"), std::string::npos)
      << proj;
  const std::string kernel = LoadError(TinyGemma4V{}, [](GgufSpec& s) {
    TensorIn(s, "v.patch_embd.weight").ne = {4, 4, 1, 192};
  });
  EXPECT_NE(kernel.find("expected a conv kernel [patch, patch, 3, n_embd]"), std::string::npos) << kernel;
  const std::string norm =
      LoadError(TinyGemma4V{}, [](GgufSpec& s) { TensorIn(s, "v.blk.1.attn_k_norm.weight").ne = {8}; });
  EXPECT_NE(norm.find("'v.blk.1.attn_k_norm.weight' must be F32 with 16 elements"), std::string::npos) << norm;
  const std::string table = LoadError(TinyGemma4UV{}, [](GgufSpec& s) {
    TensorIn(s, "v.position_embd.weight").ne = {64, 16, 1};
  });
  EXPECT_NE(table.find("'v.position_embd.weight' must be F32 [64, n_pos, 2]"), std::string::npos) << table;
  const std::string ln =
      LoadError(TinyGemma4UV{}, [](GgufSpec& s) { TensorIn(s, "v.patch_norm.1.weight").ne = {190}; });
  EXPECT_NE(ln.find("expected [3 * patch * patch]"), std::string::npos) << ln;
  const std::string heads =
      LoadError(TinySiglip{}, [](GgufSpec& s) { SetKey(s, GgufKv::U32("clip.vision.attention.head_count", 5)); });
  EXPECT_NE(heads.find("5 attention heads do not divide the encoder width 64"), std::string::npos) << heads;
  const std::string pool =
      LoadError(TinySiglip{}, [](GgufSpec& s) { SetKey(s, GgufKv::U32("clip.vision.projector.scale_factor", 3)); });
  EXPECT_NE(pool.find("scale_factor 3 does not divide the patch grid side 4"), std::string::npos) << pool;
  const std::string std_half =
      LoadError(TinyGemma4V{.standardize = true}, [](GgufSpec& s) { DropTensor(s, "v.std_scale"); });
  EXPECT_NE(std_half.find("only one of 'v.std_bias' and 'v.std_scale'"), std::string::npos) << std_half;
}

TEST(VisionEncoderErrorsTest, MmprojDoesNotFitText) {
  VisionConfig c;
  c.projector = ProjectorType::kGemma4V;
  c.n_embd_text = 1536;
  EXPECT_NO_THROW(CheckMmprojFitsText(c, 1536));
  const std::string e = ErrorOf([&] { CheckMmprojFitsText(c, 2560); });
  EXPECT_NE(
      e.find("the mmproj (gemma4v) writes soft tokens of width 1536 but the text model's embedding width is 2560"),
      std::string::npos)
      << e;
}

TEST(VisionEncoderErrorsTest, EncodeGeometry) {
  TinySiglip g3;
  const std::string p3 = ::testing::TempDir() + "kvshare_vision_geo3.gguf";
  WriteFile(p3, g3.Build().Build());
  auto e3 = VisionEncoder::Load(p3);
  const std::string fixed = ErrorOf([&] { e3->Encode(RandomPixels(28, 42, 0, 1, 1), nullptr); });
  EXPECT_NE(fixed.find("gemma3 encoder: pixel tensor is 28 x 42, expected 28 x 28"), std::string::npos) << fixed;
  PixelTensor short_px = RandomPixels(28, 28, 0, 1, 1);
  short_px.chw.pop_back();
  const std::string values = ErrorOf([&] { e3->TokensFor(short_px); });
  EXPECT_NE(values.find("holds 2351 values, expected 3 x 28 x 28 = 2352"), std::string::npos) << values;

  TinyGemma4V g4;
  const std::string p4 = ::testing::TempDir() + "kvshare_vision_geo4.gguf";
  WriteFile(p4, g4.Build().Build());
  auto e4 = VisionEncoder::Load(p4);
  const std::string cell = ErrorOf([&] { e4->Encode(RandomPixels(24, 30, 0, 1, 1), nullptr); });
  EXPECT_NE(cell.find("gemma4v encoder: pixel tensor is 24 x 30, expected positive sides that are multiples of 12"),
            std::string::npos)
      << cell;
  const std::string big = ErrorOf([&] { e4->Encode(RandomPixels(12, 204, 0, 1, 1), nullptr); });
  EXPECT_NE(big.find("more per side than the position table's 16"), std::string::npos) << big;
}

}  // namespace
}  // namespace kvshare::testing
