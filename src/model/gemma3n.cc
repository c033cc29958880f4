// Gemma 3n text decoder on the CPU (HF transformers Gemma3nForCausalLM;
// GGUF general.architecture = "gemma3n" as llama.cpp's converter writes it;
// docs/gemma3n.md). fp32 activations throughout (HF computes AltUp in fp32
// too), quantized weights through MatMul, attention through the GQA op on the
// state's KvCache with Gemma 4's attention block (gemma_blocks.h).
//
// The residual stream is n_altup parallel streams (AltUp). Each layer
// predicts every stream from all of them with coefficients routed from the
// active stream, runs attention, Laurel (a low-rank residual branch) and the
// MLP (activation sparsity on the first layers) on the active prediction,
// corrects every stream by the active one's innovation, and adds the
// per-layer-input gate of the corrected active stream to the other streams.
// The output averages the streams (each but the first projected back and
// rescaled to the first one's RMS) before the final norm.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "common/str.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "model/activations.h"
#include "model/decoder.h"
#include "model/gemma3n.h"
#include "model/gemma4_config.h"
#include "model/gemma_blocks.h"
#include "model/hyperparameters.h"
#include "quant/quant.h"

namespace kvshare {
namespace {

using detail::DecoderState;
using detail::RmsNorm;
using detail::Str;

constexpr const char* kArch = "gemma3n";

using Layer = detail::Gemma3nLayer;

class Gemma3nState final : public DecoderState {
 public:
  using DecoderState::DecoderState;
  std::vector<std::vector<float>> x, pred;  // [n][rows, E]: the streams, the predictions
  std::vector<float> h, lr, o, f, y, gsum;  // [S, E] scratch; lr: [S, rank]
  std::vector<float> modal, coef;           // router outputs and coefficients per row
  detail::GemmaAttentionScratch attn;
  std::vector<float> g, u;
  std::vector<float> ple, ple_tok;
  std::vector<std::int32_t> ple_ids;  // [T]: the step's ids for the per-layer inputs (EmbedStep)
  std::vector<std::int64_t> src;  // [rows of x]: the step token each row belongs to
};

// A small matrix (AltUp coefficients, router) as float rows.
std::vector<float> Dequantized(const WeightMatrix& w) {
  std::vector<float> out(static_cast<std::size_t>(w.rows * w.cols));
  for (std::int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.type, static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes, out.data() + r * w.cols, w.cols);
  }
  return out;
}

// sqrt(mean(v^2)) of n values (HF: torch.mean(x ** 2) ** 0.5).
float Rms(const float* v, std::int64_t n) { return std::sqrt(static_cast<float>(detail::SumOfSquares(v, n) / n)); }

class Gemma3n final : public detail::DecoderModel {
 public:
  Gemma3n(GgufFile file, PackOptions pack);
  detail::Gemma3nWeights weights() const {
    return {.n_altup = n_altup_,
            .active = active_,
            .altup_proj = &altup_proj_,
            .altup_unembd = &altup_unembd_,
            .ple = &ple_,
            .layers = &layers_};
  }

 private:
  std::unique_ptr<DecoderState> MakeState(KvCache cache, const ModelStateOptions& options,
                                          std::shared_ptr<const detail::RopeSet> rope) const override;
  float* RunStep(DecoderState& st, const detail::Step& step, ThreadPool* pool) const override;
  // One layer over the rows that `spans` cover. cut: this layer is the
  // step's cut (CutAfterAttention): after the attention, the kept rows are
  // packed and spans / st.src repointed; false when none is kept.
  bool RunLayer(Gemma3nState& st, int l, std::vector<detail::QuerySpan>& spans, bool owns, const detail::Step* cut,
                ThreadPool* pool) const;
  // modal[s, :n] = tanh(router · (RMSNorm(v_s, router_norm) / E)) for S rows of v.
  void Route(const Layer& L, const float* v, std::int64_t S, Gemma3nState& st, ThreadPool* pool) const;
  void WarnIfLlamaCppHardcodesOtherValues(const std::vector<float>& sparsity, int ple);

  int n_altup_ = 0, active_ = 0;
  std::vector<WeightMatrix> altup_proj_, altup_unembd_;  // n - 1 each, [E, E]
  detail::PerLayerEmbeddings ple_;
  std::vector<Layer> layers_;
};

Gemma3n::Gemma3n(GgufFile file, PackOptions pack) : DecoderModel(std::move(file), pack) {
  const GgufFile& f = file_;
  const detail::TensorLookup t(f, pack_);
  const std::string a = std::string(kArch) + ".";
  ModelConfig& c = cfg_;
  detail::Gemma4Geometry geo = detail::ReadGemma4Geometry(f, a);
  c = std::move(geo.config);
  c.architecture = kArch;
  rope_families_ = std::move(geo.rope_families);
  layer_rope_ = std::move(geo.layer_rope);
  final_softcap_ = detail::ReadFinalLogitSoftcap(f, a);
  ValidateSharing(a + "attention.shared_kv_layers");
  const std::int64_t E = c.n_embd;
  const std::size_t L = static_cast<std::size_t>(c.n_layer);

  n_altup_ = static_cast<int>(f.GetU32(a + "altup.num_inputs"));
  active_ = static_cast<int>(f.GetU32Or(a + "altup.active_idx", 0));
  if (n_altup_ < 1 || n_altup_ > 16) throw Error(Str(a, "altup.num_inputs = ", n_altup_, " is outside [1, 16]"));
  if (active_ < 0 || active_ >= n_altup_) {
    throw Error(Str(a, "altup.active_idx = ", active_, " is outside [0, altup.num_inputs = ", n_altup_, ")"));
  }
  const std::vector<float> sparsity = f.Has(a + "activation_sparsity_scale")
                                          ? f.GetF32Array(a + "activation_sparsity_scale")
                                          : std::vector<float>(L, -INFINITY);
  if (sparsity.size() != L) {
    throw Error(Str("metadata key '", a, "activation_sparsity_scale' has ", sparsity.size(),
                    " entries, expected block_count = ", L, " (one std multiplier per layer, -inf for none)"));
  }
  for (std::size_t i = 0; i < L; ++i) {
    if (std::isnan(sparsity[i]) || sparsity[i] == INFINITY) {
      throw Error(Str(a, "activation_sparsity_scale[", i, "] = ", sparsity[i],
                      " is not a std multiplier (finite, or -inf for none)"));
    }
  }

  embd_w_ = WeightMatrix::FromTensor(f.Tensor("token_embd.weight"));
  c.n_vocab = static_cast<int>(embd_w_.rows);
  if (embd_w_.cols != E) {
    throw Error(Str("tensor 'token_embd.weight' has ", embd_w_.cols, " columns, expected embedding_length ", E));
  }
  out_w_ = t.ForMatMul(t.MatOpt("output.weight", c.n_vocab, E).value_or(embd_w_));
  out_norm_ = t.Vec("output_norm.weight", E);
  for (const char* name : {"altup_proj.weight", "altup_unembd_proj.weight"}) {
    const GgufTensor& s = f.Tensor(name);
    if (s.n_dims != 3 || s.ne[2] != n_altup_ - 1) {
      throw Error(Str("tensor '", name, "' is ", s.DimsString(), ": ", a, "altup.num_inputs = ", n_altup_, " needs ",
                      n_altup_ - 1, " projections [", E, ", ", E, ", ", n_altup_ - 1, "]"));
    }
    std::vector<WeightMatrix> m = t.MatStack(name, E, E, n_altup_ - 1);
    for (WeightMatrix& w : m) w = t.ForMatMul(w);
    (std::string(name) == "altup_proj.weight" ? altup_proj_ : altup_unembd_) = std::move(m);
  }
  const int ple = static_cast<int>(f.GetU32(a + "embedding_length_per_layer_input"));
  ple_.Load(t, c.n_layer, ple, E, c.n_vocab, /*min_rows=*/1);

  const int first_shared = c.n_layer - c.num_kv_shared_layers;
  const std::int64_t n = n_altup_;
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = Str("blk.", i, ".");
    const std::size_t li = static_cast<std::size_t>(i);
    Layer Ly;
    Ly.attn_norm = t.Vec(p + "attn_norm.weight", E);
    Ly.attn = detail::LoadGemmaAttention(t, p, c.n_head, c.layer_head_dim[li], c.layer_n_head_kv[li], E,
                                         /*owns=*/i < first_shared);
    const int n_ff = c.layer_n_ff[li];
    if (n_ff < 1) throw Error(Str(a, "feed_forward_length[", i, "] = ", n_ff, ": every Gemma 3n layer has an MLP"));
    Ly.ffn_norm = t.Vec(p + "ffn_norm.weight", E);
    Ly.gate = t.ForMatMul(t.Mat(p + "ffn_gate.weight", n_ff, E));
    Ly.up = t.ForMatMul(t.Mat(p + "ffn_up.weight", n_ff, E));
    Ly.down = t.ForMatMul(t.Mat(p + "ffn_down.weight", E, n_ff));
    Ly.post_ffw_norm = t.Vec(p + "post_ffw_norm.weight", E);
    Ly.sparsity = sparsity[li];
    const GgufTensor& ll = f.Tensor(p + "laurel_l.weight");
    const std::int64_t rank = ll.n_dims == 2 ? ll.ne[1] : 0;
    Ly.laurel_l = t.ForMatMul(t.Mat(p + "laurel_l.weight", rank, E));
    Ly.laurel_r = t.ForMatMul(t.Mat(p + "laurel_r.weight", E, rank));
    Ly.laurel_norm = t.Vec(p + "laurel_post_norm.weight", E);
    Ly.router = Dequantized(t.Mat(p + "altup_router.weight", n, E));
    Ly.router_norm = t.Vec(p + "altup_router_norm.weight", E);
    Ly.predict_coef = Dequantized(t.Mat(p + "altup_predict_coef.weight", n * n, n));
    Ly.correct_coef = Dequantized(t.Mat(p + "altup_correct_coef.weight", n, n));
    Ly.correct_scale = t.Vec(p + "altup_correct_scale.weight", E);
    Ly.ple_gate = detail::LoadPerLayerGate(t, p, ple, E);
    layers_.push_back(std::move(Ly));
  }
  WarnIfLlamaCppSharesDifferently();
  WarnIfLlamaCppHardcodesOtherValues(sparsity, ple);
}

// llama.cpp (at least through ggml-org/llama.cpp@0c1e57098) reads none of these
// gemma3n keys and assumes the released E2B/E4B values (docs/gemma3n.md).
void Gemma3n::WarnIfLlamaCppHardcodesOtherValues(const std::vector<float>& sparsity, int ple) {
  const ModelConfig& c = cfg_;
  std::string diffs;
  const auto add = [&](const std::string& s) { diffs += (diffs.empty() ? "" : ", ") + s; };
  if (n_altup_ != 4) add(Str("altup.num_inputs ", n_altup_, " (llama.cpp: 4)"));
  if (active_ != 0) add(Str("altup.active_idx ", active_, " (llama.cpp: 0)"));
  if (ple != 256) add(Str("embedding_length_per_layer_input ", ple, " (llama.cpp: 256)"));
  const std::int64_t rank = layers_.empty() ? 0 : layers_[0].laurel_l.rows;
  if (rank != 64) add(Str("Laurel rank ", rank, " (llama.cpp: 64)"));
  const int owning = c.n_layer - c.num_kv_shared_layers;
  if (owning != 20) add(Str("KV-owning layers ", owning, " (llama.cpp: 20)"));
  for (std::size_t i = 0; i < sparsity.size(); ++i) {
    const bool sparse = std::isfinite(sparsity[i]);
    if (sparse != (i < 10) || (sparse && std::fabs(sparsity[i] - 1.6448535f) > 1e-4f)) {
      add("activation_sparsity_scale (llama.cpp: 1.6449 on layers 0-9, dense after)");
      break;
    }
  }
  for (int n_ff : c.layer_n_ff) {
    if (n_ff != c.layer_n_ff[0]) {
      add("per-layer feed_forward_length (llama.cpp: layer 0's on every layer)");
      break;
    }
  }
  if (!diffs.empty()) {
    warnings_.push_back(Str("llama.cpp ignores this file's Gemma 3n hyperparameter keys and assumes E2B/E4B values; ",
                            "this file has ", diffs, ". llama.cpp computes or loads it differently from HF ",
                            "transformers; kvshare reads the file."));
  }
}

std::unique_ptr<DecoderState> Gemma3n::MakeState(KvCache cache, const ModelStateOptions& options,
                                                 std::shared_ptr<const detail::RopeSet> rope) const {
  const LayerPlan& plan = cache.Plan();
  RequireKvWeights(plan, [&](int l) { return layers_[static_cast<std::size_t>(l)].attn.k.has_value(); });
  auto st = std::make_unique<Gemma3nState>(std::move(cache), options, std::move(rope));
  st->x.resize(static_cast<std::size_t>(n_altup_));
  st->pred.resize(static_cast<std::size_t>(n_altup_));
  return st;
}

void Gemma3n::Route(const Layer& Ly, const float* v, std::int64_t S, Gemma3nState& st, ThreadPool* pool) const {
  const int E = cfg_.n_embd, n = n_altup_;
  st.y.resize(static_cast<std::size_t>(S * E));
  std::copy(v, v + S * E, st.y.begin());
  RmsNorm(st.y.data(), S, E, Ly.router_norm, cfg_.rms_eps, pool);
  st.modal.resize(static_cast<std::size_t>(S * n));
  const float inv_e = 1.0f / static_cast<float>(E);  // HF router_input_scale = hidden_size ** -1
  for (std::int64_t s = 0; s < S; ++s) {
    const float* r = st.y.data() + s * E;
    for (int k = 0; k < n; ++k) {
      const float* w = Ly.router.data() + static_cast<std::int64_t>(k) * E;
      double dot = 0;
      for (int i = 0; i < E; ++i) dot += static_cast<double>(r[i] * inv_e) * w[i];
      st.modal[static_cast<std::size_t>(s * n + k)] = std::tanh(static_cast<float>(dot));
    }
  }
}

bool Gemma3n::RunLayer(Gemma3nState& st, int l, std::vector<detail::QuerySpan>& spans, bool owns,
                       const detail::Step* cut, ThreadPool* pool) const {
  const ModelConfig& c = cfg_;
  const Layer& Ly = layers_[static_cast<std::size_t>(l)];
  const int E = c.n_embd, n = n_altup_;
  std::int64_t S = 0;
  for (const detail::QuerySpan& sp : spans) S += sp.n;
  std::size_t SE = static_cast<std::size_t>(S * E);
  for (std::vector<float>* v : {&st.h, &st.o, &st.f, &st.gsum}) v->resize(SE);

  // Predict: pred_j = x_j + sum_i C[j][i] x_i, C = predict_coef · modal (routed from the active stream).
  Route(Ly, st.x[static_cast<std::size_t>(active_)].data(), S, st, pool);
  for (int j = 0; j < n; ++j) st.pred[static_cast<std::size_t>(j)].resize(SE);
  st.coef.resize(static_cast<std::size_t>(n * n));
  for (std::int64_t s = 0; s < S; ++s) {
    const float* m = st.modal.data() + s * n;
    for (int r = 0; r < n * n; ++r) {
      float acc = 0;
      for (int k = 0; k < n; ++k) acc += Ly.predict_coef[static_cast<std::size_t>(r * n + k)] * m[k];
      st.coef[static_cast<std::size_t>(r)] = acc;
    }
    // Whole rows per stream i, so that the loops over d vectorize: every
    // element still takes +0, then + x_i C[j][i] for i in order, then + x_j.
    for (int j = 0; j < n; ++j) {
      float* out = st.pred[static_cast<std::size_t>(j)].data() + s * E;
      std::fill(out, out + E, 0.0f);
      for (int i = 0; i < n; ++i) {
        const float* xi = st.x[static_cast<std::size_t>(i)].data() + s * E;
        const float cji = st.coef[static_cast<std::size_t>(j * n + i)];
        for (int d = 0; d < E; ++d) out[d] += xi[d] * cji;
      }
      const float* xj = st.x[static_cast<std::size_t>(j)].data() + s * E;
      for (int d = 0; d < E; ++d) out[d] += xj[d];
    }
  }
  const float* act = st.pred[static_cast<std::size_t>(active_)].data();

  // h = the normed active prediction; Laurel: h + RMSNorm(R · (L · h)).
  std::copy(act, act + SE, st.h.begin());
  RmsNorm(st.h.data(), S, E, Ly.attn_norm, c.rms_eps, pool);
  st.lr.resize(static_cast<std::size_t>(S * Ly.laurel_l.rows));
  detail::MatMulRows(Ly.laurel_l, st.h.data(), S, st.lr.data(), pool);
  detail::MatMulRows(Ly.laurel_r, st.lr.data(), S, st.f.data(), pool);
  RmsNorm(st.f.data(), S, E, Ly.laurel_norm, c.rms_eps, pool);

  // Attention, then a = (act + attn + laurel) / sqrt(2), laurel = h + its branch.
  detail::GemmaAttentionBlock(st, Ly.attn,
                              {.layer = l,
                               .owns = owns,
                               .n_head = c.n_head,
                               .scale = c.attn_scale,
                               .eps = c.rms_eps,
                               .rope = LayerRope(st, l),
                               .spans = spans},
                              st.h.data(), st.o.data(), st.attn, pool);
  const float sqrt2 = std::sqrt(2.0f);  // HF divides by math.sqrt(2)
  for (std::size_t i = 0; i < SE; ++i) st.o[i] = ((act[i] + st.o[i]) + (st.h[i] + st.f[i])) / sqrt2;
  if (cut != nullptr) {
    S = KeptRows(*cut);
    if (S == 0) return false;
    SE = static_cast<std::size_t>(S * E);
    PackKeptRows(*cut, std::span(&st.o, 1), E);
    PackKeptRows(*cut, st.pred, E, &spans, &st.src);  // act points into st.pred
  }

  // MLP (activation sparsity where set): y = a + RMSNorm(MLP(RMSNorm(a))).
  std::copy(st.o.begin(), st.o.begin() + static_cast<std::ptrdiff_t>(SE), st.h.begin());
  RmsNorm(st.h.data(), S, E, Ly.ffn_norm, c.rms_eps, pool);
  detail::GegluMlp(Ly.gate, Ly.up, Ly.down, st.h.data(), S, st.f.data(), st.g, st.u, pool, Ly.sparsity);
  RmsNorm(st.f.data(), S, E, Ly.post_ffw_norm, c.rms_eps, pool);
  for (std::size_t i = 0; i < SE; ++i) st.o[i] += st.f[i];
  const float* y = st.o.data();

  // Correct: x_j = pred_j + (correct_coef · modal(y) + 1)[j] * (y - pred_active).
  Route(Ly, y, S, st, pool);
  for (std::int64_t s = 0; s < S; ++s) {
    const float* m = st.modal.data() + s * n;
    for (int j = 0; j < n; ++j) {
      float acc = 0;
      for (int k = 0; k < n; ++k) acc += Ly.correct_coef[static_cast<std::size_t>(j * n + k)] * m[k];
      st.coef[static_cast<std::size_t>(j)] = acc + 1.0f;
    }
    for (int j = 0; j < n; ++j) {
      float* xj = st.x[static_cast<std::size_t>(j)].data() + s * E;
      const float* pj = st.pred[static_cast<std::size_t>(j)].data() + s * E;
      const float* pa = act + s * E;
      const float cj = st.coef[static_cast<std::size_t>(j)];
      for (int d = 0; d < E; ++d) xj[d] = (y[s * E + d] - pa[d]) * cj + pj[d];
    }
  }

  // The per-layer-input gate of the scaled corrected active stream, added to
  // every stream but the first.
  const float* xa = st.x[static_cast<std::size_t>(active_)].data();
  for (std::int64_t s = 0; s < S; ++s) {
    for (int d = 0; d < E; ++d) st.h[static_cast<std::size_t>(s * E + d)] = xa[s * E + d] * Ly.correct_scale[d];
  }
  detail::PerLayerGate(Ly.ple_gate, st.h.data(), S, st.ple, st.src, l, ple_.width, c.n_layer, E, c.rms_eps, st.g, st.u,
                       st.gsum.data(), pool);
  for (int j = 1; j < n; ++j) {
    float* xj = st.x[static_cast<std::size_t>(j)].data();
    for (std::size_t i = 0; i < SE; ++i) xj[i] += st.gsum[i];
  }
  return true;
}

float* Gemma3n::RunStep(DecoderState& base, const detail::Step& step, ThreadPool* pool) const {
  auto& st = static_cast<Gemma3nState&>(base);
  const ModelConfig& c = cfg_;
  const std::int64_t T = static_cast<std::int64_t>(step.tokens.size());
  const int E = c.n_embd, n = n_altup_;
  const std::size_t TE = static_cast<std::size_t>(T * E);
  for (std::vector<float>& v : st.x) v.resize(TE);
  std::vector<float>& x0 = st.x[0];
  EmbedStep(step, x0.data(), &st.ple_ids);
  ple_.Compute(x0.data(), st.ple_ids, E, c.rms_eps, st.ple, st.ple_tok, pool);
  // Streams 1..n-1: projections of the embedding, rescaled to its RMS.
  for (int i = 1; i < n; ++i) {
    float* xi = st.x[static_cast<std::size_t>(i)].data();
    detail::MatMulRows(altup_proj_[static_cast<std::size_t>(i - 1)], x0.data(), T, xi, pool);
    for (std::int64_t s = 0; s < T; ++s) {
      const float target = Rms(x0.data() + s * E, E);
      const float now = std::sqrt(std::max(static_cast<float>(detail::SumOfSquares(xi + s * E, E) / E), 1e-5f));
      for (int d = 0; d < E; ++d) xi[s * E + d] = xi[s * E + d] * target / now;
    }
  }
  st.src.resize(static_cast<std::size_t>(T));
  for (std::int64_t i = 0; i < T; ++i) st.src[static_cast<std::size_t>(i)] = i;

  for (const detail::StepRow& r : step.rows) st.cache.Reserve(r.row, r.n);
  const LayerPlan& plan = st.cache.Plan();
  std::vector<detail::QuerySpan> spans = FullSpans(step);
  const std::int64_t kept = KeptRows(step);
  const int cut = CutAfterAttention(st, plan, kept, T);
  for (int l = 0; l < c.n_layer; ++l) {
    if (!RunLayer(st, l, spans, plan.layers[static_cast<std::size_t>(l)].owns_cache, l == cut ? &step : nullptr, pool))
      break;
    if (st.layer_probe) {  // the active stream
      std::int64_t rows = 0;
      for (const detail::QuerySpan& sp : spans) rows += sp.n;
      st.layer_probe(l, std::span<const float>(st.x[static_cast<std::size_t>(active_)].data(),
                                               static_cast<std::size_t>(rows * E)));
    }
  }
  for (const detail::StepRow& r : step.rows) st.cache.Commit(r.row);
  if (kept == 0) return nullptr;
  if (cut < 0) PackKeptRows(step, st.x, E);
  // The streams back to one: x0 and each other stream projected back and
  // rescaled to x0's RMS, averaged (HF: torch.mean over the stack).
  std::vector<float>& out = st.pred[0];
  out.resize(static_cast<std::size_t>(kept * E));
  std::vector<float>& proj = st.f;
  proj.resize(static_cast<std::size_t>(kept * E));
  std::copy(x0.begin(), x0.begin() + kept * E, out.begin());
  for (int i = 1; i < n; ++i) {
    detail::MatMulRows(altup_unembd_[static_cast<std::size_t>(i - 1)], st.x[static_cast<std::size_t>(i)].data(), kept,
                       proj.data(), pool);
    for (std::int64_t s = 0; s < kept; ++s) {
      const float target = Rms(x0.data() + s * E, E);
      const float now =
          std::sqrt(std::max(static_cast<float>(detail::SumOfSquares(proj.data() + s * E, E) / E), 1e-5f));
      for (int d = 0; d < E; ++d)
        out[static_cast<std::size_t>(s * E + d)] += proj[static_cast<std::size_t>(s * E + d)] * target / now;
    }
  }
  for (float& v : out) v /= static_cast<float>(n);
  return out.data();
}

}  // namespace

std::unique_ptr<Model> LoadGemma3n(GgufFile file, PackOptions pack) {
  return std::make_unique<Gemma3n>(std::move(file), pack);
}

std::optional<detail::Gemma3nWeights> detail::Gemma3nWeightsOf(const Model& model) {
  const auto* m = dynamic_cast<const Gemma3n*>(&model);
  if (m == nullptr) return std::nullopt;
  return m->weights();
}

}  // namespace kvshare
