// Gemma 4's assistant on the GPU (gemma4_assistant_cuda.h): the CPU
// assistant's step (src/model/gemma4_assistant.cc) with its host logic shared
// (model/gemma4_assistant_host.h) and its arithmetic in device_ops' kernels
// and cuBLAS, as the GPU Gemma 4 runs its layers (gemma4_cuda.cc).
#include "cuda_model/gemma4_assistant_cuda.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/str.h"
#include "cuda/cuda_check.h"
#include "cuda_model/cuda_decoder.h"
#include "cuda_model/device_ops.h"
#include "kvshare/common/error.h"
#include "model/gemma4_assistant_host.h"

namespace kvshare::detail {
namespace {

constexpr const char* kStep = "assistant step (device cuda)";

struct DevAssistantLayer {
  DevMatrix q, o, gate, up, down;
  DevBuf attn_norm, q_norm, post_attn_norm, ffn_norm, post_ffw_norm;
  float out_scale = 1.0f;
};

// Scratch of one drafting thread: device activations (one row each, grown
// to the widest layer), RoPE tables grown on demand, host copies of the
// step's outputs.
class CudaAssistantScratch final : public AssistantScratch {
 public:
  AssistantSourcesCache sources;
  std::vector<float> in, logits, hidden, centroid_logits;  // host
  DevBuf d_in;                                             // [2 E_b]
  DevBuf x, h, o, f, y;                                    // [E]
  DevBuf q, g, u;                                          // [N * H], [F], [F]
  DevBuf q_pad, out_pad;                                   // [row + 1, N * H]: the op's query and output
  DevBuf head, centroids, hid, xb;                         // [n_vocab], [num_centroids], [E_b], bf16 inputs
  std::vector<DevBuf> cos, sin;                            // per RoPE family: [rope_pos, half]
  std::vector<int> rope_half;
  std::int64_t rope_pos = 0;
};

class CudaAssistant final : public AssistantModel {
 public:
  CudaAssistant(const AssistantModel& cpu, const CudaModelOptions& o);
  const AssistantConfig& config() const override { return cpu_.config(); }
  const GgufFile& gguf() const override { return cpu_.gguf(); }
  std::vector<AssistantLayerSource> Sources(const Model& target, const LayerPlan& plan) const override {
    return cpu_.Sources(target, plan);
  }
  std::unique_ptr<AssistantScratch> NewScratch() const override { return std::make_unique<CudaAssistantScratch>(); }
  AssistantStepOut Step(AssistantScratch& scratch, const AssistantStepArgs& args) const override;

 private:
  void Rope(CudaAssistantScratch& s, std::int64_t need) const;
  // s.y [E] (normed) -> s.logits [n_vocab] on the host.
  void Head(CudaAssistantScratch& s) const;

  const AssistantModel& cpu_;
  const AssistantWeights& w_;
  std::unique_ptr<Blas> blas_;
  DevMatrix embd_, pre_, post_, centroids_;
  DevBuf out_norm_;
  std::vector<DevAssistantLayer> layers_;
};

CudaAssistant::CudaAssistant(const AssistantModel& cpu, const CudaModelOptions& o)
    : cpu_(cpu), w_(AssistantWeightsOf(cpu)) {
  if (o.weights != DType::kBFloat16 && o.weights != DType::kFloat32) {
    throw Error("the Gemma 4 assistant on device cuda: CudaModelOptions::weights is " +
                std::string(DTypeName(o.weights)) + "; expected bfloat16 or float32");
  }
  RequireCudaDevice("the Gemma 4 assistant");
  blas_ = std::make_unique<Blas>();
  const AssistantConfig& c = cpu.config();
  const std::int64_t E = c.n_embd;
  const DType wt = o.weights;
  const auto vec = [](const float* p, std::int64_t n) { return UploadFloats(p, n, kWeights); };
  embd_ = UploadMatrix(w_.embd, "token_embd.weight", wt);
  pre_ = UploadMatrix(w_.pre, "nextn.pre_projection.weight", wt);
  post_ = UploadMatrix(w_.post, "nextn.post_projection.weight", wt);
  out_norm_ = vec(w_.out_norm, E);
  // fp32: the top-k of the centroid logits is discrete (as the MoE router).
  if (c.ordered_embeddings) centroids_ = UploadMatrix(w_.centroids, "masked_embd_centroids.weight", DType::kFloat32);
  for (int i = 0; i < c.n_layer; ++i) {
    const AssistantLayerWeights& L = w_.layers[static_cast<std::size_t>(i)];
    const std::string p = Str("blk.", i, ".");
    DevAssistantLayer D;
    D.q = UploadMatrix(L.q, p + "attn_q.weight", wt);
    D.o = UploadMatrix(L.o, p + "attn_output.weight", wt);
    D.gate = UploadMatrix(L.gate, p + "ffn_gate.weight", wt);
    D.up = UploadMatrix(L.up, p + "ffn_up.weight", wt);
    D.down = UploadMatrix(L.down, p + "ffn_down.weight", wt);
    D.attn_norm = vec(L.attn_norm, E);
    D.q_norm = vec(L.q_norm, c.layer_head_dim[static_cast<std::size_t>(i)]);
    D.post_attn_norm = vec(L.post_attn_norm, E);
    D.ffn_norm = vec(L.ffn_norm, E);
    D.post_ffw_norm = vec(L.post_ffw_norm, E);
    D.out_scale = L.out_scale;
    layers_.push_back(std::move(D));
  }
}

void CudaAssistant::Rope(CudaAssistantScratch& s, std::int64_t need) const {
  if (s.rope_pos >= need) return;
  const std::int64_t max_pos = AssistantRopeCapacity(s.rope_pos, need);
  s.cos.clear();
  s.sin.clear();
  s.rope_half.clear();
  for (const RopeFamily& f : w_.rope_families) {
    const RopeTable t = BuildRopeTable(f, max_pos);
    s.cos.push_back(UploadFloats(t.cos.data(), static_cast<std::int64_t>(t.cos.size()), "RoPE table allocation"));
    s.sin.push_back(UploadFloats(t.sin.data(), static_cast<std::int64_t>(t.sin.size()), "RoPE table allocation"));
    s.rope_half.push_back(t.half);
  }
  s.rope_pos = max_pos;
}

void CudaAssistant::Head(CudaAssistantScratch& s) const {
  const AssistantConfig& c = config();
  const std::int64_t V = c.n_vocab;
  const float* y = As<float>(s.y);
  // The centroid head computes every token's logit on the device (one
  // product instead of a gather of the chosen rows) and masks on the host.
  float* logits = Rows(s.head, 1, V);
  blas_->Project(embd_, y, 1, logits, s.xb);
  s.logits.resize(static_cast<std::size_t>(V));
  Download(s.logits.data(), logits, s.logits.size() * 4, "assistant step (device cuda): logits download");
  if (!c.ordered_embeddings) return;
  float* cl = Rows(s.centroids, 1, c.num_centroids);
  blas_->Project(centroids_, y, 1, cl, s.xb);
  s.centroid_logits.resize(static_cast<std::size_t>(c.num_centroids));
  Download(s.centroid_logits.data(), cl, s.centroid_logits.size() * 4,
           "assistant step (device cuda): centroid logits download");
  MaskUnchosen(CentroidTokens(c, s.centroid_logits, w_.ordering), s.logits);
}

AssistantStepOut CudaAssistant::Step(AssistantScratch& base, const AssistantStepArgs& a) const {
  auto* sp = dynamic_cast<CudaAssistantScratch*>(&base);
  if (sp == nullptr) throw Error(std::string(kStep) + ": the scratch was not made by this assistant's NewScratch");
  CudaAssistantScratch& s = *sp;
  const AssistantConfig& c = config();
  const std::int64_t p = CheckAssistantStep(c, a);
  if (a.target_state->device() != Device::kCuda) {
    throw Error(std::string(kStep) + ": the target state's KV cache is on device " +
                DeviceName(a.target_state->device()) +
                "; this assistant reads a device cache (run the CPU assistant for a CPU target)");
  }
  const std::int64_t E = c.n_embd, Eb = c.n_embd_backbone;
  const std::vector<AssistantLayerSource>& sources = s.sources.For(*this, *a.target, a.target_state->kv_cache().Plan());
  Rope(s, p + 1);
  AssistantInputRow(c, a, s.in);
  float* in = Rows(s.d_in, 1, 2 * Eb);
  Upload(in, s.in.data(), s.in.size() * 4, "assistant step (device cuda): input row upload");
  const Blas& b = *blas_;
  float* x = Rows(s.x, 1, E);
  float* h = Rows(s.h, 1, E);
  float* o = Rows(s.o, 1, E);
  float* f = Rows(s.f, 1, E);
  b.Project(pre_, in, 1, x, s.xb);

  for (int l = 0; l < c.n_layer; ++l) {
    const std::size_t ls = static_cast<std::size_t>(l);
    const DevAssistantLayer& L = layers_[ls];
    const int H = c.layer_head_dim[ls];
    const std::int64_t qd = static_cast<std::int64_t>(c.n_head) * H, F = c.layer_n_ff[ls];
    const int B = a.row + 1;
    CopyDevice(h, x, E);
    RmsNormDevice(h, 1, static_cast<int>(E), As<float>(L.attn_norm), c.rms_eps);
    float* q = Rows(s.q, 1, qd);
    b.Project(L.q, h, 1, q, s.xb);
    RmsNormDevice(q, c.n_head, H, As<float>(L.q_norm), c.rms_eps);
    // The op's batch: row a.row holds the query, the rows before are padding.
    float* q_pad = Rows(s.q_pad, B, qd);
    float* out_pad = Rows(s.out_pad, B, qd);
    ZeroDevice(q_pad, B * qd);
    CopyDevice(q_pad + a.row * qd, q, qd);
    const auto family = static_cast<std::size_t>(w_.layer_rope[ls]);
    AssistantAttend(c, *a.target_state,
                    {.layer = l,
                     .src = &sources[ls],
                     .row = a.row,
                     .p = p,
                     .query = q_pad,
                     .output = out_pad,
                     .cos = As<float>(s.cos[family]),
                     .sin = As<float>(s.sin[family]),
                     .rope_pos = s.rope_pos,
                     .rope_half = s.rope_half[family],
                     .run = GqaRunOptions{.device = Device::kCuda}});
    b.Project(L.o, out_pad + a.row * qd, 1, o, s.xb);
    RmsNormDevice(o, 1, static_cast<int>(E), As<float>(L.post_attn_norm), c.rms_eps);
    AddDevice(x, o, E);
    CopyDevice(h, x, E);
    RmsNormDevice(h, 1, static_cast<int>(E), As<float>(L.ffn_norm), c.rms_eps);
    float* g = Rows(s.g, 1, F);
    float* u = Rows(s.u, 1, F);
    const void* hx = b.Project(L.gate, h, 1, g, s.xb);
    b.Gemm(L.up, hx, 1, u);
    GegluDevice(g, u, F);
    b.Project(L.down, g, 1, f, s.xb);
    RmsNormDevice(f, 1, static_cast<int>(E), As<float>(L.post_ffw_norm), c.rms_eps);
    MixDevice(x, f, E, L.out_scale);  // x = (x + f) * out_scale
  }
  float* y = Rows(s.y, 1, E);
  CopyDevice(y, x, E);
  RmsNormDevice(y, 1, static_cast<int>(E), As<float>(out_norm_), c.rms_eps);
  Head(s);
  float* hid = Rows(s.hid, 1, Eb);
  b.Project(post_, y, 1, hid, s.xb);
  s.hidden.resize(static_cast<std::size_t>(Eb));
  Download(s.hidden.data(), hid, s.hidden.size() * 4, "assistant step (device cuda): hidden download");
  const auto best = std::max_element(s.logits.begin(), s.logits.end());  // the first maximum: lowest id
  return {.logits = s.logits, .hidden = s.hidden, .argmax = static_cast<std::int32_t>(best - s.logits.begin())};
}

}  // namespace

std::unique_ptr<AssistantModel> MakeCudaAssistant(const AssistantModel& cpu, const CudaModelOptions& options) {
  return std::make_unique<CudaAssistant>(cpu, options);
}

std::unique_ptr<AssistantModel> CudaDecoder::AssistantOnDevice(const AssistantModel& assistant) const {
  return MakeCudaAssistant(assistant, options());
}

}  // namespace kvshare::detail
