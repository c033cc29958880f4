// Gemma 3's vision encoder (projector type gemma3): the SigLIP ViT and the
// Gemma 3 multimodal projector (docs/vision.md).
//   patches (14 px, CHW-flattened as the file's conv kernel) x W + b + pos
//   blocks: x += o(MHA(LN1 x)); x += fc2(gelu_tanh(fc1(LN2 x))), all with bias
//   post-LN; average pool pool x pool over the patch grid (4 in the released
//   models, clip.vision.projector.scale_factor otherwise); RMSNorm with the
//   weight as stored (the converter folded HF's 1 + w in); x W_proj with
//   W_proj stored (in, out), which this loader transposes once.
#include <cmath>
#include <cstring>

#include "common/float_convert.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "quant/tensor_lookup.h"
#include "vision/encoder_base.h"
#include "vision/mmproj.h"
#include "vision/vision_ops.h"

namespace kvshare::detail {

namespace {

struct SiglipLayer {
  const float* ln1_w = nullptr;
  const float* ln1_b = nullptr;
  const float* ln2_w = nullptr;
  const float* ln2_b = nullptr;
  Linear q, k, v, o, fc1, fc2;
};

class SiglipEncoder final : public EncoderBase {
 public:
  SiglipEncoder(GgufFile file, const VisionConfig& config, EncoderPrecision precision);
  std::vector<float> Encode(const PixelTensor& pixels, ThreadPool* pool) const override;

 private:
  void LoadProjection();

  WeightMatrix patch_;  // [n_embd, 3 p p]
  const float* patch_bias_ = nullptr;
  const float* pos_ = nullptr;  // [n_patches, n_embd]
  std::vector<SiglipLayer> layers_;
  const float* post_w_ = nullptr;
  const float* post_b_ = nullptr;
  const float* soft_norm_ = nullptr;
  std::vector<std::uint8_t> proj_bytes_;  // the projection transposed to [n_embd_text, n_embd]
  WeightMatrix proj_;
};

SiglipEncoder::SiglipEncoder(GgufFile file, const VisionConfig& config, EncoderPrecision precision)
    : EncoderBase(std::move(file), config, precision) {
  const TensorLookup t(file_);
  const VisionConfig& c = config_;
  const int side = c.image_size / c.patch_size;
  patch_ = PatchKernel(t, "v.patch_embd.weight", c.patch_size, 3, c.n_embd);
  patch_bias_ = t.Vec("v.patch_embd.bias", c.n_embd);
  pos_ = t.Vec("v.position_embd.weight", static_cast<std::int64_t>(side) * side * c.n_embd);
  // Old converters stored fc1 as ffn_down and fc2 as ffn_up.
  const bool swapped = Gemma3FfnSwapped(file_, c.n_embd);
  const std::string fc1 = swapped ? "ffn_down" : "ffn_up", fc2 = swapped ? "ffn_up" : "ffn_down";
  const LinearOptions b{.bias = true, .bf16 = bf16()};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = Str("v.blk.", l, ".");
    SiglipLayer L;
    L.ln1_w = t.Vec(p + "ln1.weight", c.n_embd);
    L.ln1_b = t.Vec(p + "ln1.bias", c.n_embd);
    L.ln2_w = t.Vec(p + "ln2.weight", c.n_embd);
    L.ln2_b = t.Vec(p + "ln2.bias", c.n_embd);
    L.q = LoadLinear(t, p + "attn_q", c.n_embd, c.n_embd, b);
    L.k = LoadLinear(t, p + "attn_k", c.n_embd, c.n_embd, b);
    L.v = LoadLinear(t, p + "attn_v", c.n_embd, c.n_embd, b);
    L.o = LoadLinear(t, p + "attn_out", c.n_embd, c.n_embd, b);
    L.fc1 = LoadLinear(t, p + fc1, c.n_ff, c.n_embd, b);
    L.fc2 = LoadLinear(t, p + fc2, c.n_embd, c.n_ff, b);
    layers_.push_back(std::move(L));
  }
  post_w_ = t.Vec("v.post_ln.weight", c.n_embd);
  post_b_ = t.Vec("v.post_ln.bias", c.n_embd);
  soft_norm_ = t.Vec("mm.soft_emb_norm.weight", c.n_embd);
  LoadProjection();
}

// mm.input_projection is ne {text, n_embd}: n_embd rows of `text` (HF's
// (in, out) parameter). MatMul wants [out, in] rows, so it is transposed once:
// element by element for the float types (exact), through fp32 for others.
void SiglipEncoder::LoadProjection() {
  const std::int64_t in = config_.n_embd, out = config_.n_embd_text;
  const GgufTensor& src = file_.Tensor("mm.input_projection.weight");
  CheckWeightType(src);
  GgmlType type = src.type;
  if (type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16) {
    const std::size_t es = type == GgmlType::kF32 ? 4 : 2;
    proj_bytes_.resize(static_cast<std::size_t>(in * out) * es);
    for (std::int64_t i = 0; i < in; ++i) {
      for (std::int64_t o = 0; o < out; ++o) {
        std::memcpy(proj_bytes_.data() + static_cast<std::size_t>(o * in + i) * es,
                    src.data + static_cast<std::size_t>(i * out + o) * es, es);
      }
    }
  } else {
    type = GgmlType::kF32;
    proj_bytes_.resize(static_cast<std::size_t>(in * out) * 4);
    std::vector<float> row(static_cast<std::size_t>(out));
    float* dst = reinterpret_cast<float*>(proj_bytes_.data());
    for (std::int64_t i = 0; i < in; ++i) {
      DequantizeRow(src.type, src.data + static_cast<std::size_t>(i) * src.RowBytes(), row.data(), out);
      for (std::int64_t o = 0; o < out; ++o) dst[o * in + i] = row[static_cast<std::size_t>(o)];
    }
  }
  proj_ = PackForMatMul(WeightMatrix::Make(proj_bytes_.data(), type, out, in));
}

std::vector<float> SiglipEncoder::Encode(const PixelTensor& pixels, ThreadPool* pool) const {
  CheckPixels(pixels);
  const VisionConfig& c = config_;
  const int side = c.image_size / c.patch_size;
  const std::int64_t S = static_cast<std::int64_t>(side) * side, d = c.n_embd;
  const std::size_t sd = static_cast<std::size_t>(S * d);

  const std::vector<float> patches = PatchifyChw(pixels, c.patch_size);
  std::vector<float> x(sd), h(sd), q(sd), k(sd), v(sd), a(sd), f(static_cast<std::size_t>(S) * c.n_ff), scratch;
  MatMul(patch_, {.x = patches.data(), .m = S, .y = x.data(), .pool = pool});
  for (std::int64_t s = 0; s < S; ++s) {
    for (std::int64_t i = 0; i < d; ++i) x[s * d + i] += patch_bias_[i] + pos_[s * d + i];
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (const SiglipLayer& L : layers_) {
    h = x;
    LayerNormRows(h.data(), S, d, L.ln1_w, L.ln1_b, c.eps, pool);
    const Linear* qkv[] = {&L.q, &L.k, &L.v};
    float* qkv_out[] = {q.data(), k.data(), v.data()};
    ApplyLinears(qkv, h.data(), S, qkv_out, scratch, pool);
    BidirectionalAttention(q.data(), k.data(), v.data(), S, c.n_head, c.head_dim, scale, a.data(), pool, bf16());
    ApplyLinear(L.o, a.data(), S, h.data(), scratch, pool);
    AddRows(x.data(), h.data(), S * d, pool);

    h = x;
    LayerNormRows(h.data(), S, d, L.ln2_w, L.ln2_b, c.eps, pool);
    ApplyLinear(L.fc1, h.data(), S, f.data(), scratch, pool);
    GeluTanhRows(f.data(), S * c.n_ff, pool);
    ApplyLinear(L.fc2, f.data(), S, h.data(), scratch, pool);
    AddRows(x.data(), h.data(), S * d, pool);
  }
  LayerNormRows(x.data(), S, d, post_w_, post_b_, c.eps, pool);

  std::vector<float> pooled = AvgPoolGrid(x.data(), side, side, d, c.pool);
  const std::int64_t T = static_cast<std::int64_t>(pooled.size()) / d;
  RmsNormRows(pooled.data(), T, d, soft_norm_, c.eps, pool);
  std::vector<float> out(static_cast<std::size_t>(T * c.n_embd_text));
  MatMul(proj_, {.x = pooled.data(), .m = T, .y = out.data(), .pool = pool});
  return out;
}

}  // namespace

std::unique_ptr<VisionEncoder> LoadSiglip(GgufFile file, const VisionConfig& config, EncoderPrecision precision) {
  return std::make_unique<SiglipEncoder>(std::move(file), config, precision);
}

}  // namespace kvshare::detail
