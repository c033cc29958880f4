// Gemma 4's vision encoder (projector type gemma4v; HF Gemma4VisionModel and
// Gemma4MultimodalEmbedder; docs/vision.md):
//   16 px patches in [0, 1] -> 2x - 1 -> linear (no bias) -> + table_x[col]
//   + table_y[row]; blocks (sandwich RMSNorms, weights as stored):
//     x += N_post_attn(o(attn(N_in x)))   q / k: per-head RMSNorm with weight,
//                                          v: without; 2-D RoPE; scale 1.0
//     x += N_post_ffn(down(gelu_tanh(gate n) * up n)),  n = N_pre_ffn(x)
//   3 x 3 mean pool -> x sqrt(d) -> [(x - std_bias) * std_scale] ->
//   RMSNorm without weight -> projection to the text width.
// Linears are HF's Gemma4ClippableLinear where the file has clamp scalars.
// The MLP is GELU-tanh as in HF (hidden_activation gelu_pytorch_tanh);
// llama.cpp falls back to gelu_quick for this projector when the mmproj has
// no clip.use_gelu key, which this converter never writes: do not copy that.
#include <cmath>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "quant/tensor_lookup.h"
#include "vision/encoder_base.h"
#include "vision/vision_ops.h"

namespace kvshare::detail {

namespace {

constexpr double kRopeTheta = 100.0;  // not stored in the mmproj; HF rope_theta, llama.cpp hard-codes it too

struct Gemma4Layer {
  const float* ln1 = nullptr;        // input_layernorm
  const float* post_attn = nullptr;  // post_attention_layernorm
  const float* ln2 = nullptr;        // pre_feedforward_layernorm
  const float* post_ffn = nullptr;   // post_feedforward_layernorm
  const float* q_norm = nullptr;     // [head_dim]
  const float* k_norm = nullptr;
  Linear q, k, v, o, gate, up, down;
};

class Gemma4VisionEncoder final : public EncoderBase {
 public:
  Gemma4VisionEncoder(GgufFile file, const VisionConfig& config, EncoderPrecision precision);
  std::vector<float> Encode(const PixelTensor& pixels, ThreadPool* pool) const override;

 private:
  // Rotates each head of x [S, heads * hd]: the first half by the patch
  // column, the second by its row, each half NeoX style.
  void Rope(float* x, int gw, std::int64_t S, ThreadPool* pool) const;

  WeightMatrix patch_;  // [d, 3 p p]
  PositionTables pos_;
  std::vector<Gemma4Layer> layers_;
  const float* std_bias_ = nullptr;  // [d], 26B / 31B only
  const float* std_scale_ = nullptr;
  Linear proj_;
  std::vector<double> inv_freq_;  // [head_dim / 4]
};

Gemma4VisionEncoder::Gemma4VisionEncoder(GgufFile file, const VisionConfig& config, EncoderPrecision precision)
    : EncoderBase(std::move(file), config, precision) {
  const TensorLookup t(file_);
  const VisionConfig& c = config_;
  const std::int64_t d = c.n_embd;
  patch_ = PatchKernel(t, "v.patch_embd.weight", c.patch_size, 3, d);
  pos_ = PositionTables::Load(file_, d);
  const LinearOptions clip{.clamps = true, .bf16 = bf16()};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = Str("v.blk.", l, ".");
    if (file_.FindTensor(p + "out_scale.weight") != nullptr || file_.FindTensor(p + "out_scale") != nullptr) {
      throw Error(Str("tensor '", p,
                      "out_scale' (a layer scalar) is not supported: HF transformers 5.23's "
                      "Gemma4VisionModel has none"));
    }
    Gemma4Layer L;
    L.ln1 = t.Vec(p + "ln1.weight", d);
    L.post_attn = t.Vec(p + "attn_post_norm.weight", d);
    L.ln2 = t.Vec(p + "ln2.weight", d);
    L.post_ffn = t.Vec(p + "ffn_post_norm.weight", d);
    L.q_norm = t.Vec(p + "attn_q_norm.weight", c.head_dim);
    L.k_norm = t.Vec(p + "attn_k_norm.weight", c.head_dim);
    L.q = LoadLinear(t, p + "attn_q", d, d, clip);
    L.k = LoadLinear(t, p + "attn_k", d, d, clip);
    L.v = LoadLinear(t, p + "attn_v", d, d, clip);
    L.o = LoadLinear(t, p + "attn_out", d, d, clip);
    L.gate = LoadLinear(t, p + "ffn_gate", c.n_ff, d, clip);
    L.up = LoadLinear(t, p + "ffn_up", c.n_ff, d, clip);
    L.down = LoadLinear(t, p + "ffn_down", d, c.n_ff, clip);
    layers_.push_back(std::move(L));
  }
  std_bias_ = t.VecOpt("v.std_bias", d);
  std_scale_ = t.VecOpt("v.std_scale", d);
  if ((std_bias_ == nullptr) != (std_scale_ == nullptr)) {
    throw Error("mmproj has only one of 'v.std_bias' and 'v.std_scale': the standardization needs both");
  }
  proj_ = LoadLinear(t, "mm.input_projection", c.n_embd_text, d, clip);
  const int quarter = c.head_dim / 4;
  for (int i = 0; i < quarter; ++i) inv_freq_.push_back(std::pow(kRopeTheta, -2.0 * i / (c.head_dim / 2)));
}

void Gemma4VisionEncoder::Rope(float* x, int gw, std::int64_t S, ThreadPool* pool) const {
  const int hd = config_.head_dim, heads = config_.n_head, quarter = hd / 4;
  ParallelFor(pool, S, [&](std::int64_t s) {
    const std::int64_t pos[2] = {s % gw, s / gw};  // column, row
    for (int half = 0; half < 2; ++half) {
      for (int i = 0; i < quarter; ++i) {
        const double angle = static_cast<double>(pos[half]) * inv_freq_[static_cast<std::size_t>(i)];
        const float cs = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle));
        for (int h = 0; h < heads; ++h) {
          float* v = x + (s * heads + h) * hd + half * (hd / 2);
          const float a = v[i], b = v[i + quarter];
          v[i] = a * cs - b * sn;
          v[i + quarter] = b * cs + a * sn;
        }
      }
    }
  });
}

std::vector<float> Gemma4VisionEncoder::Encode(const PixelTensor& pixels, ThreadPool* pool) const {
  CheckPixels(pixels);
  const VisionConfig& c = config_;
  const int gh = pixels.height / c.patch_size, gw = pixels.width / c.patch_size;
  pos_.CheckGrid(gh, gw, "gemma4v");
  const std::int64_t S = static_cast<std::int64_t>(gh) * gw, d = c.n_embd;
  const std::size_t sd = static_cast<std::size_t>(S * d), sf = static_cast<std::size_t>(S * c.n_ff);

  std::vector<float> patches = PatchifyChw(pixels, c.patch_size);
  for (float& v : patches) v = 2.0f * v - 1.0f;
  std::vector<float> x(sd), h(sd), q(sd), k(sd), v(sd), a(sd), g(sf), u(sf), scratch;
  MatMul(patch_, {.x = patches.data(), .m = S, .y = x.data(), .pool = pool});
  pos_.Add(x.data(), gh, gw, "gemma4v");
  const std::int64_t rows = S * c.n_head;  // per-head rows of q / k / v
  for (const Gemma4Layer& L : layers_) {
    h = x;
    RmsNormRows(h.data(), S, d, L.ln1, c.eps, pool);
    const Linear* qkv[] = {&L.q, &L.k, &L.v};
    float* qkv_out[] = {q.data(), k.data(), v.data()};
    ApplyLinears(qkv, h.data(), S, qkv_out, scratch, pool);
    RmsNormRows(q.data(), rows, c.head_dim, L.q_norm, c.eps, pool);
    RmsNormRows(k.data(), rows, c.head_dim, L.k_norm, c.eps, pool);
    RmsNormRows(v.data(), rows, c.head_dim, nullptr, c.eps, pool);
    Rope(q.data(), gw, S, pool);
    Rope(k.data(), gw, S, pool);
    BidirectionalAttention(q.data(), k.data(), v.data(), S, c.n_head, c.head_dim, 1.0f, a.data(), pool, bf16());
    ApplyLinear(L.o, a.data(), S, h.data(), scratch, pool);
    RmsNormRows(h.data(), S, d, L.post_attn, c.eps, pool);
    AddRows(x.data(), h.data(), S * d, pool);

    h = x;
    RmsNormRows(h.data(), S, d, L.ln2, c.eps, pool);
    const Linear* gu[] = {&L.gate, &L.up};
    float* gu_out[] = {g.data(), u.data()};
    ApplyLinears(gu, h.data(), S, gu_out, scratch, pool);
    GeluTanhMulRows(g.data(), u.data(), S * c.n_ff, pool);
    ApplyLinear(L.down, g.data(), S, h.data(), scratch, pool);
    RmsNormRows(h.data(), S, d, L.post_ffn, c.eps, pool);
    AddRows(x.data(), h.data(), S * d, pool);
  }

  std::vector<float> pooled = AvgPoolGrid(x.data(), gh, gw, d, c.pool);
  const std::int64_t T = static_cast<std::int64_t>(pooled.size()) / d;
  const float root = std::sqrt(static_cast<float>(d));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < d; ++i) {
      float& e = pooled[static_cast<std::size_t>(t * d + i)];
      e *= root;
      if (std_bias_ != nullptr) e = (e - std_bias_[i]) * std_scale_[i];
    }
  }
  RmsNormRows(pooled.data(), T, d, nullptr, c.eps, pool);
  std::vector<float> out(static_cast<std::size_t>(T * c.n_embd_text));
  ApplyLinear(proj_, pooled.data(), T, out.data(), scratch, pool);
  return out;
}

}  // namespace

std::unique_ptr<VisionEncoder> LoadGemma4Vision(GgufFile file, const VisionConfig& config, EncoderPrecision precision) {
  return std::make_unique<Gemma4VisionEncoder>(std::move(file), config, precision);
}

}  // namespace kvshare::detail
