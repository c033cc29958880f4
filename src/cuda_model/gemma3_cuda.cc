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
  GrowStep(st, T, E, qd, kvd, c.n_ff);
  float* x = As<float>(st.x);
  float* h = As<float>(st.h);
  float* o = As<float>(st.o);
  float* q = As<float>(st.q);
  float* attn = As<float>(st.attn);
  float* k = As<float>(st.k);
  float* v = As<float>(st.v);
  float* g = As<float>(st.g);
  float* u = As<float>(st.u);
  const std::int64_t kept = DecoderModel::KeptRows(step);
  std::int64_t R = T;  // rows of x that run
  const Blas& b = blas();
  const auto layer = [&](int l, std::vector<QuerySpan>& spans, bool owns, const Step* cut) {
    const DevLayer& L = layers_[static_cast<std::size_t>(l)];
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
    // After the attention of the last layer that writes K/V, only the rows
    // whose outputs are read run on (DecoderModel::CutAfterAttention).
    if (cut != nullptr) {
      if (kept == 0) return false;  // the K/V are written; nothing else is read
      const std::pair<DevBuf*, int> bufs[] = {{&st.attn, static_cast<int>(qd)}, {&st.x, E}};
      PackKept(st, *cut, bufs, &spans);
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
    return true;
  };
  const bool packed = RunLayers(st, step, layer, [&] { return x; });
  if (kept == 0) return nullptr;
  if (!packed) {
    const std::pair<DevBuf*, int> bufs[] = {{&st.x, E}};
    PackKept(st, step, bufs, nullptr);
  }
  return x;
}

}  // namespace

std::unique_ptr<Model> MakeCudaGemma3(std::unique_ptr<Model> cpu, const CudaModelOptions& options) {
  return std::make_unique<CudaGemma3>(std::move(cpu), options);
}

}  // namespace kvshare::detail
