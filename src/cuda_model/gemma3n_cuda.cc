// Gemma 3n on the GPU (model_cuda.h): src/model/gemma3n.cc's RunStep step for
// step over device buffers, from the weights the CPU model loaded
// (Gemma3nWeightsOf): the AltUp streams (each a device buffer; routing,
// prediction and correction in device_ops.h kernels, the small coefficient
// products through cuBLAS in fp32), Laurel, activation sparsity, Gemma 4's
// attention block and per-layer inputs (gemma_blocks_cuda.h), KV-shared layers
// reading their source layer's device cache, the streams averaged back to one
// before the LM head.
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
#include "model/gemma3n.h"

namespace kvshare::detail {
namespace {

struct DevLayer {
  DevBuf attn_norm, ffn_norm, post_ffw_norm, laurel_norm, router_norm, correct_scale;
  DevGemmaAttention attn;
  DevMatrix gate, up, down, laurel_l, laurel_r;
  DevMatrix router, predict_coef, correct_coef;  // fp32 [n, E], [n * n, n], [n, n]
  float sparsity = -INFINITY;
  DevPerLayerGate ple_gate;
};

class CudaGemma3nState final : public CudaGemmaState {
 public:
  using CudaGemmaState::CudaGemmaState;
  std::vector<DevBuf> xs, pred;  // [n][T, E]: the streams (stream 0 is x), the predictions
  DevBuf gsum, ry, out;          // [T, E]: the per-layer gate, the router input, the output rows
  DevBuf lr;                     // [T, Laurel rank]
  DevBuf modal, coef;            // [T, n], [T, n * n]
};

// A host float matrix [rows, cols] (AltUp coefficients, the router) as fp32 on the device.
DevMatrix UploadRows(const std::vector<float>& v, std::int64_t rows, std::int64_t cols, const std::string& name) {
  return UploadMatrix(WeightMatrix::Make(v.data(), GgmlType::kF32, rows, cols), name, DType::kFloat32);
}

class CudaGemma3n final : public CudaGemmaDecoder {
 public:
  // w: Gemma3nWeightsOf(*cpu).
  CudaGemma3n(std::unique_ptr<Model> cpu, const CudaModelOptions& o, const Gemma3nWeights& w);

 private:
  std::unique_ptr<CudaDecoderState> MakeState(KvCache cache, const ModelStateOptions& o) const override;
  float* RunStep(CudaDecoderState& st, const Step& step) const override;
  bool RunLayer(CudaGemma3nState& st, int l, std::vector<QuerySpan>& spans, bool owns, const Step* cut) const;
  // st.modal [S, n] = tanh(router · (RMSNorm(v, router_norm) / E)).
  void Route(CudaGemma3nState& st, const DevLayer& L, const float* v, std::int64_t S) const;
  // The streams' device pointers (stream 0: st.x) and the predictions'.
  Streams StreamsOf(CudaGemma3nState& st) const;
  Streams PredictionsOf(CudaGemma3nState& st) const;

  Gemma3nWeights w_;
  std::vector<DevMatrix> altup_proj_, altup_unembd_;  // n - 1 of [E, E]
  std::vector<DevLayer> layers_;
  std::int64_t max_qd_ = 0, max_kvd_ = 0, max_ff_ = 0, max_rank_ = 0;
};

CudaGemma3n::CudaGemma3n(std::unique_ptr<Model> cpu, const CudaModelOptions& o, const Gemma3nWeights& w)
    : CudaGemmaDecoder(std::move(cpu), o, *w.ple), w_(w) {
  const ModelConfig& c = config();
  const DType wt = options().weights;
  const std::int64_t E = c.n_embd, n = w.n_altup;
  if (n > kMaxStreams)
    throw Error(Str("MoveModelToCuda: ", n, " AltUp streams; the GPU model runs up to ", kMaxStreams));
  for (std::size_t i = 0; i < w.altup_proj->size(); ++i) {
    altup_proj_.push_back(UploadMatrix((*w.altup_proj)[i], "altup_proj.weight", wt));
    altup_unembd_.push_back(UploadMatrix((*w.altup_unembd)[i], "altup_unembd_proj.weight", wt));
  }
  const auto vec = [](const float* p, std::int64_t count) { return UploadFloats(p, count, kWeights); };
  for (int i = 0; i < c.n_layer; ++i) {
    const Gemma3nLayer& L = (*w.layers)[static_cast<std::size_t>(i)];
    const std::string p = Str("blk.", i, ".");
    DevLayer D;
    D.attn_norm = vec(L.attn_norm, E);
    D.ffn_norm = vec(L.ffn_norm, E);
    D.post_ffw_norm = vec(L.post_ffw_norm, E);
    D.laurel_norm = vec(L.laurel_norm, E);
    D.router_norm = vec(L.router_norm, E);
    D.correct_scale = vec(L.correct_scale, E);
    D.attn = UploadGemmaAttention(L.attn, p, wt, E);
    D.gate = UploadMatrix(L.gate, p + "ffn_gate.weight", wt);
    D.up = UploadMatrix(L.up, p + "ffn_up.weight", wt);
    D.down = UploadMatrix(L.down, p + "ffn_down.weight", wt);
    D.laurel_l = UploadMatrix(L.laurel_l, p + "laurel_l.weight", wt);
    D.laurel_r = UploadMatrix(L.laurel_r, p + "laurel_r.weight", wt);
    D.router = UploadRows(L.router, n, E, p + "altup_router.weight");
    D.predict_coef = UploadRows(L.predict_coef, n * n, n, p + "altup_predict_coef.weight");
    D.correct_coef = UploadRows(L.correct_coef, n, n, p + "altup_correct_coef.weight");
    D.sparsity = L.sparsity;
    D.ple_gate = UploadPerLayerGate(L.ple_gate, p, wt, E);
    max_qd_ = std::max<std::int64_t>(max_qd_, static_cast<std::int64_t>(c.n_head) * L.attn.hd);
    max_kvd_ = std::max<std::int64_t>(max_kvd_, static_cast<std::int64_t>(L.attn.n_kv) * L.attn.hd);
    max_ff_ = std::max<std::int64_t>({max_ff_, L.gate.rows, ple_.width});
    max_rank_ = std::max(max_rank_, L.laurel_l.rows);
    layers_.push_back(std::move(D));
  }
}

std::unique_ptr<CudaDecoderState> CudaGemma3n::MakeState(KvCache cache, const ModelStateOptions& o) const {
  std::vector<const DevGemmaAttention*> attention;
  for (const DevLayer& L : layers_) attention.push_back(&L.attn);
  RequireKvWeights(config(), cache.Plan(), attention);
  auto st = std::make_unique<CudaGemma3nState>(std::move(cache), o);
  st->xs.resize(static_cast<std::size_t>(w_.n_altup));
  st->pred.resize(static_cast<std::size_t>(w_.n_altup));
  return st;
}

Streams CudaGemma3n::StreamsOf(CudaGemma3nState& st) const {
  Streams s;
  s.p[0] = As<float>(st.x);
  for (int j = 1; j < w_.n_altup; ++j) s.p[j] = As<float>(st.xs[static_cast<std::size_t>(j)]);
  return s;
}

Streams CudaGemma3n::PredictionsOf(CudaGemma3nState& st) const {
  Streams s;
  for (int j = 0; j < w_.n_altup; ++j) s.p[j] = As<float>(st.pred[static_cast<std::size_t>(j)]);
  return s;
}

void CudaGemma3n::Route(CudaGemma3nState& st, const DevLayer& L, const float* v, std::int64_t S) const {
  const ModelConfig& c = config();
  float* r = As<float>(st.ry);
  CopyDevice(r, v, S * c.n_embd);
  RmsNormDevice(r, S, c.n_embd, As<float>(L.router_norm), c.rms_eps);
  ScaleDevice(r, 1.0f / static_cast<float>(c.n_embd), S * c.n_embd);  // HF router_input_scale = hidden_size ** -1
  blas().Gemm(L.router, r, S, As<float>(st.modal));
  TanhDevice(As<float>(st.modal), S * w_.n_altup);
}

float* CudaGemma3n::RunStep(CudaDecoderState& base, const Step& step) const {
  auto& st = static_cast<CudaGemma3nState&>(base);
  const ModelConfig& c = config();
  const auto T = static_cast<std::int64_t>(step.tokens.size());
  const int E = c.n_embd, n = w_.n_altup;
  EmbedStep(st, step, &st.ple_ids);  // hard tokens take per-layer id 0, as gemma3n.cc
  PerLayerInputs(st, st.ple_ids);
  float* x0 = As<float>(st.x);
  // Streams 1..n-1: projections of the embedding, rescaled to its RMS.
  for (int i = 1; i < n; ++i) {
    float* xi = Rows(st.xs[static_cast<std::size_t>(i)], T, E);
    blas().Project(altup_proj_[static_cast<std::size_t>(i - 1)], x0, T, xi, st.xb);
    RescaleRowsDevice(xi, x0, T, E);
  }
  for (DevBuf& p : st.pred) Rows(p, T, E);
  GrowStep(st, T, E, max_qd_, max_kvd_, max_ff_);
  for (DevBuf* b : {&st.gsum, &st.ry}) Rows(*b, T, E);
  Rows(st.lr, T, max_rank_);
  Rows(st.modal, T, n);
  Rows(st.coef, T, static_cast<std::int64_t>(n) * n);
  const bool packed = RunLayers(
      st, step,
      [&](int l, std::vector<QuerySpan>& spans, bool owns, const Step* cut) {
        return RunLayer(st, l, spans, owns, cut);
      },
      [&] { return StreamsOf(st).p[w_.active]; });
  const std::int64_t kept = DecoderModel::KeptRows(step);
  if (kept == 0) return nullptr;
  if (!packed) {
    std::vector<std::pair<DevBuf*, int>> bufs = {{&st.x, E}};
    for (int i = 1; i < n; ++i) bufs.push_back({&st.xs[static_cast<std::size_t>(i)], E});
    PackKept(st, step, bufs, nullptr);
  }
  // The streams back to one: x0 and each other stream projected back and
  // rescaled to x0's RMS, averaged (HF: torch.mean over the stack).
  float* out = Rows(st.out, kept, E);
  float* proj = As<float>(st.f);
  CopyDevice(out, x0, kept * E);
  for (int i = 1; i < n; ++i) {
    blas().Project(altup_unembd_[static_cast<std::size_t>(i - 1)], As<float>(st.xs[static_cast<std::size_t>(i)]), kept,
                   proj, st.xb);
    RescaleRowsDevice(proj, x0, kept, E);
    AddDevice(out, proj, kept * E);
  }
  ScaleDevice(out, 1.0f / static_cast<float>(n), kept * E);
  return out;
}

bool CudaGemma3n::RunLayer(CudaGemma3nState& st, int l, std::vector<QuerySpan>& spans, bool owns,
                           const Step* cut) const {
  const ModelConfig& c = config();
  const DevLayer& L = layers_[static_cast<std::size_t>(l)];
  const int E = c.n_embd, n = w_.n_altup;
  const Blas& b = blas();
  std::int64_t S = 0;
  for (const QuerySpan& sp : spans) S += sp.n;
  const Streams xs = StreamsOf(st), pred = PredictionsOf(st);
  float* h = As<float>(st.h);
  float* o = As<float>(st.o);
  float* f = As<float>(st.f);
  float* coef = As<float>(st.coef);

  // Predict: pred_j = x_j + sum_i C[j][i] x_i, C = predict_coef · modal (routed from the active stream).
  Route(st, L, xs.p[w_.active], S);
  b.Gemm(L.predict_coef, As<float>(st.modal), S, coef);
  AltUpPredictDevice(xs, n, S, E, coef, pred);
  const float* act = pred.p[w_.active];

  // h = the normed active prediction; Laurel: h + RMSNorm(R · (L · h)).
  CopyDevice(h, act, S * E);
  RmsNormDevice(h, S, E, As<float>(L.attn_norm), c.rms_eps);
  b.Project(L.laurel_l, h, S, Sized(st.lr, S, L.laurel_l.rows, "lr (Laurel)", l), st.xb);
  b.Project(L.laurel_r, As<float>(st.lr), S, f, st.xb);
  RmsNormDevice(f, S, E, As<float>(L.laurel_norm), c.rms_eps);

  // Attention, then a = (act + attn + laurel) / sqrt(2), laurel = h + its branch.
  AttentionBlock(st, L.attn, l, owns, h, S, o);
  LaurelMixDevice(o, act, h, f, S * E);
  if (cut != nullptr) {
    S = DecoderModel::KeptRows(*cut);
    if (S == 0) return false;
    std::vector<std::pair<DevBuf*, int>> bufs = {{&st.o, E}};
    for (DevBuf& p : st.pred) bufs.push_back({&p, E});
    PackKept(st, *cut, bufs, &spans);
  }

  // MLP (activation sparsity where set): y = a + RMSNorm(MLP(RMSNorm(a))).
  CopyDevice(h, o, S * E);
  RmsNormDevice(h, S, E, As<float>(L.ffn_norm), c.rms_eps);
  float* g = Sized(st.g, S, L.gate.rows, "g (MLP)", l);
  float* u = Sized(st.u, S, L.gate.rows, "u (MLP)", l);
  const void* in = b.Project(L.gate, h, S, g, st.xb);
  b.Gemm(L.up, in, S, u);
  if (std::isfinite(L.sparsity)) GaussianTopKDevice(g, S, static_cast<int>(L.gate.rows), L.sparsity);
  GegluDevice(g, u, S * L.gate.rows);
  b.Project(L.down, g, S, f, st.xb);
  RmsNormDevice(f, S, E, As<float>(L.post_ffw_norm), c.rms_eps);
  AddDevice(o, f, S * E);
  const float* y = o;

  // Correct: x_j = pred_j + (correct_coef · modal(y) + 1)[j] * (y - pred_active).
  Route(st, L, y, S);
  b.Gemm(L.correct_coef, As<float>(st.modal), S, coef);
  AddScalarDevice(coef, 1.0f, S * n);
  AltUpCorrectDevice(xs, pred, y, act, coef, n, S, E);

  // The per-layer-input gate of the scaled corrected active stream, added to
  // every stream but the first.
  CopyDevice(h, xs.p[w_.active], S * E);
  ScaleColumnsDevice(h, S, E, As<float>(L.correct_scale), 1.0f);
  float* gsum = As<float>(st.gsum);
  PerLayerGate(st, L.ple_gate, l, h, S, gsum);
  for (int j = 1; j < n; ++j) AddDevice(xs.p[j], gsum, S * E);
  return true;
}

}  // namespace

std::unique_ptr<Model> MakeCudaGemma3n(std::unique_ptr<Model> cpu, const CudaModelOptions& options) {
  const std::optional<Gemma3nWeights> w = Gemma3nWeightsOf(*cpu);
  if (!w) throw Error("MoveModelToCuda: the gemma3n model was not loaded by kvshare's Gemma 3n loader");
  return std::make_unique<CudaGemma3n>(std::move(cpu), options, *w);
}

}  // namespace kvshare::detail
