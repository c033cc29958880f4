// Gemma 4 unified's vision embedder (projector type gemma4uv; HF
// Gemma4UnifiedVisionEmbedder and its multimodal embedder; docs/vision.md).
// No tower: per 48 px patch, pixels in [0, 1] (no 2x - 1) ->
// LayerNorm(3 * 48 * 48) -> dense + bias -> LayerNorm -> + pos_x[col] +
// pos_y[row] -> LayerNorm -> RMSNorm without weight -> projection.
// The three LayerNorms are PyTorch's (eps 1e-5, not stored in the mmproj).
//
// HF flattens a patch HWC; llama.cpp's converter permutes the columns of the
// dense weight and the first LayerNorm's weight and bias to CHW order
// (column c * p * p + y * p + x) to match ggml's im2col. Flattening the patch
// CHW (PatchifyChw) puts every pixel in front of its own weights again, which
// undoes the permutation without copying the weights; the LayerNorm's mean
// and variance do not depend on the order.
#include "common/str.h"
#include "kvshare/common/error.h"
#include "quant/tensor_lookup.h"
#include "vision/encoder_base.h"
#include "vision/vision_ops.h"

namespace kvshare::detail {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // torch.nn.LayerNorm's default

struct Norm {
  const float* w = nullptr;
  const float* b = nullptr;  // may be null
};

class Gemma4UnifiedEncoder final : public EncoderBase {
 public:
  Gemma4UnifiedEncoder(GgufFile file, const VisionConfig& config);
  std::vector<float> Encode(const PixelTensor& pixels, ThreadPool* pool) const override;

 private:
  Norm ln1_, ln2_, ln3_;
  Linear dense_;
  PositionTables pos_;
  Linear proj_;
};

Norm LoadNorm(const TensorLookup& t, const std::string& base, std::int64_t n) {
  return {t.Vec(base + ".weight", n), t.VecOpt(base + ".bias", n)};
}

Gemma4UnifiedEncoder::Gemma4UnifiedEncoder(GgufFile file, const VisionConfig& config)
    : EncoderBase(std::move(file), config) {
  const TensorLookup t(file_);
  const std::int64_t d = config_.n_embd, in = 3LL * config_.patch_size * config_.patch_size;
  ln1_ = LoadNorm(t, "v.patch_norm.1", in);
  dense_ = LoadLinear(t, "v.patch_embd", d, in, {.bias = true});
  ln2_ = LoadNorm(t, "v.patch_norm.2", d);
  pos_ = PositionTables::Load(file_, d);
  ln3_ = LoadNorm(t, "v.patch_norm.3", d);
  proj_ = LoadLinear(t, "mm.input_projection", config_.n_embd_text, d);
}

std::vector<float> Gemma4UnifiedEncoder::Encode(const PixelTensor& pixels, ThreadPool* pool) const {
  CheckPixels(pixels);
  const VisionConfig& c = config_;
  const int gh = pixels.height / c.patch_size, gw = pixels.width / c.patch_size;
  pos_.CheckGrid(gh, gw, "gemma4uv");
  const std::int64_t S = static_cast<std::int64_t>(gh) * gw, d = c.n_embd, in = 3LL * c.patch_size * c.patch_size;
  std::vector<float> patches = PatchifyChw(pixels, c.patch_size), x(static_cast<std::size_t>(S * d)), scratch;
  LayerNormRows(patches.data(), S, in, ln1_.w, ln1_.b, kLayerNormEps, pool);
  ApplyLinear(dense_, patches.data(), S, x.data(), scratch, pool);
  LayerNormRows(x.data(), S, d, ln2_.w, ln2_.b, kLayerNormEps, pool);
  pos_.Add(x.data(), gh, gw, "gemma4uv");
  LayerNormRows(x.data(), S, d, ln3_.w, ln3_.b, kLayerNormEps, pool);
  RmsNormRows(x.data(), S, d, nullptr, c.eps, pool);
  std::vector<float> out(static_cast<std::size_t>(S * c.n_embd_text));
  ApplyLinear(proj_, x.data(), S, out.data(), scratch, pool);
  return out;
}

}  // namespace

std::unique_ptr<VisionEncoder> LoadGemma4Unified(GgufFile file, const VisionConfig& config) {
  return std::make_unique<Gemma4UnifiedEncoder>(std::move(file), config);
}

}  // namespace kvshare::detail
