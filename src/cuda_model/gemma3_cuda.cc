// Gemma 3 on the GPU (model_cuda.h): src/model/gemma3.cc's RunStep step for
// step over device buffers (cuda_decoder.h): the layers' weights uploaded at
// load, projections through cuBLAS, norms / GeGLU / residuals in the
// device_ops.h kernels, attention through AttendLayer on the device cache.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_model/cuda_decoder.h"
#include "cuda_model/cuda_dispatch.h"
#include "kvshare/cache/kv_cache.h"
#include "model/gemma3.h"
#include "quant/tensor_lookup.h"

namespace kvshare::detail {
namespace {

using DevLayer = Gemma3Layer<DevMatrix, DevBuf>;

class CudaGemma3 final : public CudaDecoder {
 public:
  CudaGemma3(std::unique_ptr<Model> cpu, const CudaModelOptions& o) : CudaDecoder(std::move(cpu), o) {
    const ModelConfig& c = config();
    // The tensors as the CPU model checked them (TensorLookup: names, shapes, types).
    const TensorLookup t(gguf());
    const auto mat = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
      return UploadMatrix(t.Mat(name, rows, cols), name, options().weights);
    };
    const auto vec = [&](const std::string& name, std::int64_t n) { return UploadFloats(t.Vec(name, n), n, kWeights); };
    for (int i = 0; i < c.n_layer; ++i) layers_.push_back(LoadGemma3Layer<DevMatrix, DevBuf>(c, i, mat, vec));
  }

 private:
  float* RunStep(CudaDecoderState& st, const Step& step) const override;

  std::vector<DevLayer> layers_;
};

float* CudaGemma3::RunStep(CudaDecoderState& st, const Step& step) const {
  const ModelConfig& c = config();
  const auto T = static_cast<std::int64_t>(step.tokens.size());  // tokens of all rows
  const int E = c.n_embd, Hd = c.head_dim;
  const std::int64_t qd = static_cast<std::int64_t>(c.n_head) * Hd, kvd = static_cast<std::int64_t>(c.n_head_kv) * Hd;
  EmbedStep(st, step);
  float* x = As<float>(st.x);
  float* h = Rows(st.h, T, E);
  float* o = Rows(st.o, T, E);
  float* q = Rows(st.q, T, qd);
  float* attn = Rows(st.attn, T, qd);
  float* k = Rows(st.k, T, kvd);
  float* v = Rows(st.v, T, kvd);
  float* g = Rows(st.g, T, c.n_ff);
  float* u = Rows(st.u, T, c.n_ff);

  for (const StepRow& r : step.rows) st.cache.Reserve(r.row, r.n);
  std::vector<QuerySpan> spans = DecoderModel::FullSpans(step);
  SetSpans(st, spans);
  const LayerPlan& plan = st.cache.Plan();
  const std::int64_t kept = DecoderModel::KeptRows(step);
  // After the attention of the last layer that writes K/V, only the rows
  // whose outputs are read run on (DecoderModel::CutAfterAttention).
  const int cut = DecoderModel::CutAfterAttention(st, plan, kept, T);
  std::int64_t R = T;  // rows of x that run
  const Blas& b = blas();
  for (int l = 0; l < c.n_layer; ++l) {
    const DevLayer& L = layers_[static_cast<std::size_t>(l)];
    const bool owns = plan.layers[static_cast<std::size_t>(l)].owns_cache;
    CopyDevice(h, x, R * E);
    RmsNormDevice(h, R, E, As<float>(L.attn_norm), c.rms_eps);
    const void* in = b.Project(L.q, h, R, q, st.xb);
    if (owns) {  // a KV-shared layer reads its source's K/V and computes none
      b.Gemm(L.k, in, R, k);
      b.Gemm(L.v, in, R, v);
      RmsNormDevice(k, R * c.n_head_kv, Hd, As<float>(L.k_norm), c.rms_eps);
    }
    RmsNormDevice(q, R * c.n_head, Hd, As<float>(L.q_norm), c.rms_eps);
    Attend(st, l, owns, Hd, static_cast<int>(kvd), c.attn_scale);
    if (l == cut) {
      if (kept == 0) break;  // the K/V are written; nothing else is read
      const std::pair<DevBuf*, int> bufs[] = {{&st.attn, static_cast<int>(qd)}, {&st.x, E}};
      PackKept(st, step, bufs, &spans);
      R = kept;
    }
    b.Project(L.o, attn, R, o, st.xb);
    RmsNormDevice(o, R, E, As<float>(L.post_attn_norm), c.rms_eps);
    AddDevice(x, o, R * E);

    CopyDevice(h, x, R * E);
    RmsNormDevice(h, R, E, As<float>(L.ffn_norm), c.rms_eps);
    in = b.Project(L.gate, h, R, g, st.xb);
    b.Gemm(L.up, in, R, u);
    GegluDevice(g, u, R * c.n_ff);
    b.Project(L.down, g, R, o, st.xb);
    RmsNormDevice(o, R, E, As<float>(L.post_ffw_norm), c.rms_eps);
    AddDevice(x, o, R * E);
    Probe(st, l, R);
  }
  for (const StepRow& r : step.rows) st.cache.Commit(r.row);
  if (kept == 0) return nullptr;
  if (R == T) {
    const std::pair<DevBuf*, int> bufs[] = {{&st.x, E}};
    PackKept(st, step, bufs, nullptr);
  }
  return As<float>(st.x);
}

}  // namespace

std::unique_ptr<Model> MakeCudaGemma3(std::unique_ptr<Model> cpu, const CudaModelOptions& options) {
  return std::make_unique<CudaGemma3>(std::move(cpu), options);
}

}  // namespace kvshare::detail
