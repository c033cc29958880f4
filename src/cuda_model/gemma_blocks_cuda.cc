// The blocks the Gemma 4 and Gemma 3n GPU models share (gemma_blocks_cuda.h).
#include "cuda_model/gemma_blocks_cuda.h"

#include <cmath>
#include <span>
#include <utility>

#include "common/str.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

DevGemmaAttention UploadGemmaAttention(const GemmaAttentionWeights& a, const std::string& p, DType dtype,
                                       std::int64_t E) {
  DevGemmaAttention d;
  d.hd = a.hd;
  d.n_kv = a.n_kv;
  d.q = UploadMatrix(a.q, p + "attn_q.weight", dtype);
  d.o = UploadMatrix(a.o, p + "attn_output.weight", dtype);
  if (a.k) {
    d.k = UploadMatrix(*a.k, p + "attn_k.weight", dtype);
    d.k_norm = UploadFloats(a.k_norm, a.hd, kWeights);
    if (a.v) d.v = UploadMatrix(*a.v, p + "attn_v.weight", dtype);
  }
  d.q_norm = UploadFloats(a.q_norm, a.hd, kWeights);
  d.post_norm = UploadFloats(a.post_norm, E, kWeights);
  return d;
}

DevPerLayerGate UploadPerLayerGate(const PerLayerGateWeights& w, const std::string& p, DType dtype, std::int64_t E) {
  return {.inp_gate = UploadMatrix(w.inp_gate, p + "inp_gate.weight", dtype),
          .proj = UploadMatrix(w.proj, p + "proj.weight", dtype),
          .post_norm = UploadFloats(w.post_norm, E, kWeights)};
}

void RequireKvWeights(const ModelConfig& c, const LayerPlan& plan,
                      std::span<const DevGemmaAttention* const> attention) {
  for (int l = 0; l < plan.first_shared; ++l) {
    if (!attention[static_cast<std::size_t>(l)]->k) {
      throw Error(Str("num_kv_shared_layers = ", c.n_layer - plan.first_shared, " makes layer ", l,
                      " compute its own K/V, but the file has no blk.", l, ".attn_k.weight (the file shares that ",
                      "layer's KV); use at least ", c.n_layer - l, " shared layers"));
    }
  }
}

CudaGemmaDecoder::CudaGemmaDecoder(std::unique_ptr<Model> cpu, const CudaModelOptions& o, const PerLayerEmbeddings& ple)
    : CudaDecoder(std::move(cpu), o), ple_(ple) {
  if (ple_.width > 0) {
    ple_proj_ = UploadMatrix(ple_.proj, "per_layer_model_proj.weight", options().weights);
    ple_proj_norm_ = UploadFloats(ple_.proj_norm, ple_.width, kWeights);
  }
}

void CudaGemmaDecoder::AttentionBlock(CudaDecoderState& st, const DevGemmaAttention& w, int l, bool owns,
                                      const float* h, std::int64_t S, float* out) const {
  const ModelConfig& c = config();
  const Blas& b = blas();
  const int Hd = w.hd;
  const std::int64_t kvd = static_cast<std::int64_t>(w.n_kv) * Hd;
  float* q = Sized(st.q, S, static_cast<std::int64_t>(c.n_head) * Hd, "q", l);
  float* k = owns ? Sized(st.k, S, kvd, "k", l) : nullptr;
  float* v = owns ? Sized(st.v, S, kvd, "v", l) : nullptr;
  const void* in = b.Project(w.q, h, S, q, st.xb);
  if (owns) {
    b.Gemm(*w.k, in, S, k);
    if (w.v) {
      b.Gemm(*w.v, in, S, v);
    } else {
      CopyDevice(v, k, S * kvd);  // k_eq_v: V is the raw K projection
    }
  }
  RmsNormDevice(q, S * c.n_head, Hd, As<float>(w.q_norm), c.rms_eps);
  if (owns) {
    RmsNormDevice(k, S * w.n_kv, Hd, As<float>(w.k_norm), c.rms_eps);
    RmsNormDevice(v, S * w.n_kv, Hd, nullptr, c.rms_eps);  // scale-free V norm
  }
  Attend(st, l, owns, Hd, static_cast<int>(kvd), c.attn_scale);
  b.Project(w.o, As<float>(st.attn), S, out, st.xb);
  RmsNormDevice(out, S, c.n_embd, As<float>(w.post_norm), c.rms_eps);
}

void CudaGemmaDecoder::PerLayerInputs(CudaGemmaState& st, std::span<const std::int32_t> ids) const {
  const ModelConfig& c = config();
  const PerLayerEmbeddings& p = ple_;
  const auto T = static_cast<std::int64_t>(ids.size());
  const std::int64_t LP = static_cast<std::int64_t>(p.width) * c.n_layer;
  float* ple = Rows(st.ple, T, LP);
  blas().Project(ple_proj_, As<float>(st.x), T, ple, st.xb);
  ScaleDevice(ple, 1.0f / std::sqrt(static_cast<float>(c.n_embd)), T * LP);
  RmsNormDevice(ple, T * c.n_layer, p.width, As<float>(ple_proj_norm_), c.rms_eps);
  // The token part: table rows gathered and dequantized on the host, as the
  // CPU does (the table stays in the file's mapping, never on the device);
  // ids past a shorter table (Gemma 3n) use row 0, as HF does.
  st.ple_tok_host.resize(static_cast<std::size_t>(T * LP));
  const float tok_scale = std::sqrt(static_cast<float>(p.width));
  for (std::int64_t s = 0; s < T; ++s) {
    const std::int32_t t = ids[static_cast<std::size_t>(s)];
    const std::int32_t id = t < p.table.rows ? t : 0;
    EmbedRows(p.table, std::span<const std::int32_t>(&id, 1), tok_scale, st.ple_tok_host.data() + s * LP);
  }
  float* tok = Rows(st.ple_tok, T, LP);
  StepUpload(st, tok, st.ple_tok_host.data(), st.ple_tok_host.size() * 4,
             "Forward (device cuda): per-layer input upload");
  MixDevice(ple, tok, T * LP, 1.0f / std::sqrt(2.0f));
}

void CudaGemmaDecoder::PerLayerGate(CudaGemmaState& st, const DevPerLayerGate& w, int l, const float* in,
                                    std::int64_t S, float* out) const {
  const ModelConfig& c = config();
  const Blas& b = blas();
  const int width = ple_.width;
  float* g = Sized(st.g, S, width, "g (per-layer gate)", l);
  float* u = Sized(st.u, S, width, "u (per-layer gate)", l);
  b.Project(w.inp_gate, in, S, g, st.xb);
  const std::int64_t LP = static_cast<std::int64_t>(width) * c.n_layer;
  GatherRowsDevice(As<float>(st.ple) + static_cast<std::int64_t>(l) * width, LP, As<std::int64_t>(st.src_dev), S, width,
                   u);
  GegluDevice(g, u, S * width);
  b.Project(w.proj, g, S, out, st.xb);
  RmsNormDevice(out, S, c.n_embd, As<float>(w.post_norm), c.rms_eps);
}

}  // namespace kvshare::detail
