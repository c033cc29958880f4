// Gemma 4 on the GPU (model_cuda.h): src/model/gemma4.cc's RunStep step for
// step over device buffers (cuda_decoder.h), from the weights the CPU model
// loaded (Gemma4WeightsOf): per-layer head size, KV heads and FFN width; scale
// 1; NeoX RoPE with the proportional full-layer tables (the CPU's RopeSet,
// uploaded per state); the scale-free V norm and k_eq_v (V = the raw K
// projection); KV-shared layers reading their source layer's device cache;
// per-layer embeddings (the token table's rows gathered on the host, as the
// CPU does, the projection on the device); layer_output_scale; MoE layers
// (the router's logits on the device in fp32, the routing on the host with
// the CPU's RouteGemma4Moe, each expert a cuBLAS product over its rows).
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/str.h"
#include "cuda_model/cuda_dispatch.h"
#include "cuda_model/gemma_blocks_cuda.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"
#include "model/gemma4.h"
#include "model/gemma4_moe.h"
#include "model/gemma_blocks.h"

namespace kvshare::detail {
namespace {

struct DevMoe {
  const Gemma4Moe* cpu = nullptr;  // sizes, expert_scale: the routing runs on the host
  DevMatrix router;                // [n_expert, E] fp32
  DevBuf router_scale;             // [E]
  std::vector<DevMatrix> gate_up, gate, up, down;
  DevBuf pre_ffw_norm_2, post_ffw_norm_1, post_ffw_norm_2;
};

struct DevLayer {
  DevBuf attn_norm, ffn_norm, post_ffw_norm;
  DevGemmaAttention attn;
  std::optional<DevMatrix> gate, up, down;
  std::optional<DevMoe> moe;
  DevPerLayerGate ple_gate;  // per-layer embeddings (PLE width > 0)
  float out_scale = 1.0f;
  bool has_out_scale = false;
};

class CudaGemma4State final : public CudaGemmaState {
 public:
  using CudaGemmaState::CudaGemmaState;
  // MoE: [S, E] router input / expert input, [S, n_expert] logits, gathered
  // rows and their products, the rows and weights of every expert (int64 /
  // fp32, expert after expert).
  DevBuf moe_in, moe_logits, moe_rows, moe_gu, moe_act, moe_y, moe_tok, moe_w;
  MoeScratch moe;  // routing on the host; moe.batches: the host side of moe_tok / moe_w
};

class CudaGemma4 final : public CudaGemmaDecoder {
 public:
  // w: Gemma4WeightsOf(*cpu).
  CudaGemma4(std::unique_ptr<Model> cpu, const CudaModelOptions& o, const Gemma4Weights& w);

 private:
  std::unique_ptr<CudaDecoderState> MakeState(KvCache cache, const ModelStateOptions& o) const override;
  float* RunStep(CudaDecoderState& st, const Step& step) const override;
  // MoE routing reads the router's logits on the host mid-step: a model with
  // MoE layers runs its decode steps eagerly.
  bool CapturableDecode() const override { return !has_moe_; }
  // One layer over the rows of st.x that `spans` cover (gemma4.cc's
  // RunLayer); cut: this layer is the step's cut. False when the cut keeps
  // no row.
  bool RunLayer(CudaGemma4State& st, int l, std::vector<QuerySpan>& spans, bool owns, const Step* cut) const;
  // out[S, E] = the MoE block of the residual rows x (RunGemma4Moe).
  void Moe(CudaGemma4State& st, const DevMoe& m, const float* x, std::int64_t S, float* out) const;

  Gemma4Weights w_;
  std::vector<DevLayer> layers_;
  std::int64_t max_qd_ = 0, max_kvd_ = 0, max_ff_ = 0;  // the widest layer's
  bool has_moe_ = false;
};

CudaGemma4::CudaGemma4(std::unique_ptr<Model> cpu, const CudaModelOptions& o, const Gemma4Weights& w)
    : CudaGemmaDecoder(std::move(cpu), o, *w.ple), w_(w) {
  const ModelConfig& c = config();
  const DType wt = options().weights;
  const std::int64_t E = c.n_embd;
  const auto vec = [](const float* p, std::int64_t n) { return UploadFloats(p, n, kWeights); };
  const auto mat = UploadMatrix;
  for (int i = 0; i < c.n_layer; ++i) {
    const Gemma4Layer& L = (*w_.layers)[static_cast<std::size_t>(i)];
    const std::string p = Str("blk.", i, ".");
    DevLayer D;
    D.attn_norm = vec(L.attn_norm, E);
    D.ffn_norm = vec(L.ffn_norm, E);
    D.post_ffw_norm = vec(L.post_ffw_norm, E);
    const GemmaAttentionWeights& a = L.attn;
    D.attn = UploadGemmaAttention(a, p, wt, E);
    if (L.gate) {
      D.gate = mat(*L.gate, p + "ffn_gate.weight", wt);
      D.up = mat(*L.up, p + "ffn_up.weight", wt);
      D.down = mat(*L.down, p + "ffn_down.weight", wt);
      max_ff_ = std::max(max_ff_, L.gate->rows);
    }
    if (L.moe) {
      const Gemma4Moe& m = *L.moe;
      DevMoe M;
      M.cpu = &m;
      M.router = mat(m.router, p + "ffn_gate_inp.weight", DType::kFloat32);  // fp32: the routing is discrete
      M.router_scale = vec(m.router_scale, E);
      for (std::size_t e = 0; e < m.gate_up.size(); ++e)
        M.gate_up.push_back(mat(m.gate_up[e], p + "ffn_gate_up_exps.weight", wt));
      for (std::size_t e = 0; e < m.gate.size(); ++e) M.gate.push_back(mat(m.gate[e], p + "ffn_gate_exps.weight", wt));
      for (std::size_t e = 0; e < m.up.size(); ++e) M.up.push_back(mat(m.up[e], p + "ffn_up_exps.weight", wt));
      for (std::size_t e = 0; e < m.down.size(); ++e) M.down.push_back(mat(m.down[e], p + "ffn_down_exps.weight", wt));
      M.pre_ffw_norm_2 = vec(m.pre_ffw_norm_2, E);
      M.post_ffw_norm_1 = vec(m.post_ffw_norm_1, E);
      M.post_ffw_norm_2 = vec(m.post_ffw_norm_2, E);
      D.moe = std::move(M);
      has_moe_ = true;
    }
    if (ple_.width > 0) {
      D.ple_gate = UploadPerLayerGate(L.ple_gate, p, wt, E);
      max_ff_ = std::max<std::int64_t>(max_ff_, ple_.width);
    }
    D.out_scale = L.out_scale;
    D.has_out_scale = L.has_out_scale;
    max_qd_ = std::max<std::int64_t>(max_qd_, static_cast<std::int64_t>(c.n_head) * a.hd);
    max_kvd_ = std::max<std::int64_t>(max_kvd_, static_cast<std::int64_t>(a.n_kv) * a.hd);
    layers_.push_back(std::move(D));
  }
}

std::unique_ptr<CudaDecoderState> CudaGemma4::MakeState(KvCache cache, const ModelStateOptions& o) const {
  std::vector<const DevGemmaAttention*> attention;
  for (const DevLayer& L : layers_) attention.push_back(&L.attn);
  RequireKvWeights(config(), cache.Plan(), attention);
  return std::make_unique<CudaGemma4State>(std::move(cache), o);
}

float* CudaGemma4::RunStep(CudaDecoderState& base, const Step& step) const {
  auto& st = static_cast<CudaGemma4State&>(base);
  const ModelConfig& c = config();
  const auto T = static_cast<std::int64_t>(step.tokens.size());
  const int E = c.n_embd;
  EmbedStep(st, step);
  if (ple_.width > 0) PerLayerInputs(st, step.tokens);  // as gemma4.cc: a span's ids are 0
  GrowStep(st, T, E, max_qd_, max_kvd_, max_ff_);
  const bool packed = RunLayers(
      st, step,
      [&](int l, std::vector<QuerySpan>& spans, bool owns, const Step* cut) {
        return RunLayer(st, l, spans, owns, cut);
      },
      [&] { return As<float>(st.x); });
  const std::int64_t kept = DecoderModel::KeptRows(step);
  if (kept == 0) return nullptr;
  if (!packed) {
    const std::pair<DevBuf*, int> bufs[] = {{&st.x, E}};
    PackKept(st, step, bufs, nullptr);
  }
  return As<float>(st.x);
}

bool CudaGemma4::RunLayer(CudaGemma4State& st, int l, std::vector<QuerySpan>& spans, bool owns, const Step* cut) const {
  const ModelConfig& c = config();
  const DevLayer& L = layers_[static_cast<std::size_t>(l)];
  const int E = c.n_embd;
  const Blas& b = blas();
  std::int64_t S = 0;
  for (const QuerySpan& sp : spans) S += sp.n;
  float* x = As<float>(st.x);
  float* h = As<float>(st.h);
  float* o = As<float>(st.o);
  float* f = As<float>(st.f);

  // Attention.
  CopyDevice(h, x, S * E);
  RmsNormDevice(h, S, E, As<float>(L.attn_norm), c.rms_eps);
  AttentionBlock(st, L.attn, l, owns, h, S, o);
  AddDevice(x, o, S * E);
  if (cut != nullptr) {
    S = DecoderModel::KeptRows(*cut);
    if (S == 0) return false;
    const std::pair<DevBuf*, int> bufs[] = {{&st.x, E}};
    PackKept(st, *cut, bufs, &spans);
  }

  // FFN: dense GeGLU, and on MoE layers its normed output plus the experts'.
  CopyDevice(h, x, S * E);
  RmsNormDevice(h, S, E, As<float>(L.ffn_norm), c.rms_eps);
  if (L.gate) {
    float* g = Sized(st.g, S, L.gate->rows, "g (MLP)", l);
    float* u = Sized(st.u, S, L.gate->rows, "u (MLP)", l);
    const void* in = b.Project(*L.gate, h, S, g, st.xb);
    b.Gemm(*L.up, in, S, u);
    GegluDevice(g, u, S * L.gate->rows);
    b.Project(*L.down, g, S, f, st.xb);
  }
  if (L.moe) {
    if (L.gate) RmsNormDevice(f, S, E, As<float>(L.moe->post_ffw_norm_1), c.rms_eps);
    Moe(st, *L.moe, x, S, o);
    if (L.gate) {
      AddDevice(f, o, S * E);
    } else {
      CopyDevice(f, o, S * E);
    }
  }
  RmsNormDevice(f, S, E, As<float>(L.post_ffw_norm), c.rms_eps);
  AddDevice(x, f, S * E);

  // Per-layer embedding: x += RMSNorm(proj(gelu_tanh(inp_gate x) * ple[:, l]), post_norm).
  if (ple_.width > 0) {
    PerLayerGate(st, L.ple_gate, l, x, S, o);
    AddDevice(x, o, S * E);
  }
  if (L.has_out_scale) ScaleDevice(x, L.out_scale, S * E);
  return true;
}

void CudaGemma4::Moe(CudaGemma4State& st, const DevMoe& m, const float* x, std::int64_t S, float* out) const {
  const ModelConfig& c = config();
  const Blas& b = blas();
  const int E = c.n_embd, NE = m.cpu->n_expert, F = m.cpu->n_ff;
  MoeScratch& s = st.moe;
  // Routing: logits of rms_norm(x) / sqrt(E) * router_scale on the device,
  // softmax and top-k on the host (RouteGemma4Moe, the CPU's code).
  float* in = Rows(st.moe_in, S, E);
  CopyDevice(in, x, S * E);
  RmsNormDevice(in, S, E, nullptr, c.rms_eps);
  ScaleColumnsDevice(in, S, E, As<float>(m.router_scale), 1.0f / std::sqrt(static_cast<float>(E)));
  float* logits = Rows(st.moe_logits, S, NE);
  b.Gemm(m.router, in, S, logits);
  s.logits.resize(static_cast<std::size_t>(S * NE));
  Download(s.logits.data(), logits, s.logits.size() * 4, "Forward (device cuda): MoE router logits download");
  RouteGemma4Moe(*m.cpu, s.logits.data(), S, s);
  // Every expert's rows and weights, expert after expert, in one upload.
  ExpertBatches& eb = s.batches;
  BatchExpertRows(*m.cpu, S, s, eb);
  Grow(st.moe_tok, std::max<std::size_t>(eb.token.size(), 1) * 8, kActivations);
  Grow(st.moe_w, std::max<std::size_t>(eb.weight.size(), 1) * 4, kActivations);
  StepUpload(st, st.moe_tok.data(), eb.token.data(), eb.token.size() * 8, "Forward (device cuda): MoE rows upload");
  StepUpload(st, st.moe_w.data(), eb.weight.data(), eb.weight.size() * 4, "Forward (device cuda): MoE weights upload");
  // Experts, in id order, over the rows routed to each.
  CopyDevice(in, x, S * E);
  RmsNormDevice(in, S, E, As<float>(m.pre_ffw_norm_2), c.rms_eps);
  ZeroDevice(out, S * E);
  for (int e = 0; e < NE; ++e) {
    const std::int64_t at = eb.begin[static_cast<std::size_t>(e)];
    const std::int64_t n = eb.begin[static_cast<std::size_t>(e) + 1] - at;
    if (n == 0) continue;
    const std::int64_t* tok = As<std::int64_t>(st.moe_tok) + at;
    float* rows = Rows(st.moe_rows, n, E);
    GatherRowsDevice(in, E, tok, n, E, rows);
    float* act = Rows(st.moe_act, n, F);
    if (!m.gate_up.empty()) {
      float* gu = Rows(st.moe_gu, n, 2 * static_cast<std::int64_t>(F));
      b.Project(m.gate_up[static_cast<std::size_t>(e)], rows, n, gu, st.xb);
      GegluPairsDevice(gu, n, F, act);
    } else {
      float* up = Rows(st.moe_gu, n, F);
      const void* xin = b.Project(m.gate[static_cast<std::size_t>(e)], rows, n, act, st.xb);
      b.Gemm(m.up[static_cast<std::size_t>(e)], xin, n, up);
      GegluDevice(act, up, n * F);
    }
    float* y = Rows(st.moe_y, n, E);
    b.Project(m.down[static_cast<std::size_t>(e)], act, n, y, st.xb);
    AddWeightedRowsDevice(y, n, E, tok, As<float>(st.moe_w) + at, out);
  }
  RmsNormDevice(out, S, E, As<float>(m.post_ffw_norm_2), c.rms_eps);
}

}  // namespace

std::unique_ptr<Model> MakeCudaGemma4(std::unique_ptr<Model> cpu, const CudaModelOptions& options) {
  const std::optional<Gemma4Weights> w = Gemma4WeightsOf(*cpu);
  if (!w) throw Error("MoveModelToCuda: the gemma4 model was not loaded by kvshare's Gemma 4 loader");
  return std::make_unique<CudaGemma4>(std::move(cpu), options, *w);
}

}  // namespace kvshare::detail
