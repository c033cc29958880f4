// Gemma 4 forward pass on the CPU (docs/architecture.md §5, HF
// transformers Gemma4ForCausalLM): fp32 activations, quantized weights through
// MatMul, attention through GroupQueryAttention on the state's KvCache with
// per-layer head size and KV heads, scale 1, NeoX RoPE (proportional on full
// layers), scale-free V norm, KV-shared trailing layers that read their
// source's cache, per-layer embeddings, MoE layers (gemma4_moe.cc).
#include "model/gemma4.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/str.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "model/activations.h"
#include "model/decoder.h"
#include "model/gemma4_config.h"
#include "model/gemma4_moe.h"
#include "model/gemma_blocks.h"
#include "model/hyperparameters.h"
#include "quant/quant.h"

namespace kvshare {
namespace {

using detail::DecoderState;
using detail::RmsNorm;
using detail::Str;

using Layer = detail::Gemma4Layer;

// Scratch for one chunk of S <= max_step tokens (row-major, one row per token).
class Gemma4State final : public DecoderState {
 public:
  using DecoderState::DecoderState;
  std::vector<float> x, h, o, f;  // [S, E]
  detail::GemmaAttentionScratch attn;
  std::vector<float> g, u;        // MLP scratch
  std::vector<float> ple;         // [S, L * ple] per-layer inputs
  std::vector<float> ple_tok;     // [L * ple] one token's table row
  std::vector<std::int64_t> src;  // [rows of x] the step token each row of x belongs to
  detail::MoeScratch moe;
};

class Gemma4 final : public detail::DecoderModel {
 public:
  Gemma4(GgufFile file, PackOptions pack);
  detail::Gemma4Weights weights() const { return {.layers = &layers_, .ple = &ple_}; }

 private:
  std::unique_ptr<DecoderState> MakeState(KvCache cache, const ModelStateOptions& options,
                                          std::shared_ptr<const detail::RopeSet> rope) const override;
  float* RunStep(DecoderState& st, const detail::Step& step, ThreadPool* pool) const override;
  // One layer over the rows of st.x that `spans` cover. cut: this layer is
  // the step's cut (CutAfterAttention): after the attention residual, the
  // kept rows are packed and spans / st.src repointed; false when none is kept.
  bool RunLayer(Gemma4State& st, int l, std::vector<detail::QuerySpan>& spans, bool owns, const detail::Step* cut,
                ThreadPool* pool) const;

  detail::PerLayerEmbeddings ple_;  // width 0: no per-layer embeddings
  std::vector<Layer> layers_;
};

Gemma4::Gemma4(GgufFile file, PackOptions pack) : DecoderModel(std::move(file), pack) {
  const GgufFile& f = file_;
  const detail::TensorLookup t(f, pack_);
  ModelConfig& c = cfg_;
  const std::string a = "gemma4.";
  detail::Gemma4Geometry g = detail::ReadGemma4Geometry(f, a);
  c = std::move(g.config);
  c.architecture = "gemma4";
  rope_families_ = std::move(g.rope_families);
  layer_rope_ = std::move(g.layer_rope);
  final_softcap_ = detail::ReadFinalLogitSoftcap(f, a);
  ValidateSharing(a + "attention.shared_kv_layers");
  const int ple = static_cast<int>(f.GetU32Or(a + "embedding_length_per_layer_input", 0));

  // Embeddings, LM head, per-layer embeddings.
  embd_w_ = WeightMatrix::FromTensor(f.Tensor("token_embd.weight"));
  c.n_vocab = static_cast<int>(embd_w_.rows);
  if (embd_w_.cols != c.n_embd) {
    throw Error(Str("tensor 'token_embd.weight' has ", embd_w_.cols, " columns, expected embedding_length ", c.n_embd));
  }
  // Matrices of matrix products are prepared for MatMul (TensorLookup::
  // ForMatMul: packed where this CPU has a kernel for their layout); embd_w_
  // and the per-layer table keep the stored rows for lookups.
  out_w_ = t.ForMatMul(t.MatOpt("output.weight", c.n_vocab, c.n_embd).value_or(embd_w_));
  out_norm_ = t.Vec("output_norm.weight", c.n_embd);
  const std::int64_t E = c.n_embd;
  ple_.Load(t, c.n_layer, ple, E, c.n_vocab, /*min_rows=*/c.n_vocab);
  // HF sets use_bidirectional_attention = "vision" on the variants without
  // per-layer embeddings (26B-A4B, 31B, unified 12B): sliding layers only.
  c.image_attention = ple_.width > 0 ? ImageAttention::kCausal : ImageAttention::kSlidingLayers;
  if (f.FindTensor("blk.0.attn_qkv.weight") != nullptr) {
    throw Error(
        "tensor 'blk.0.attn_qkv.weight': fused QKV (convert_hf_to_gguf.py --fuse-qkv) is not supported; "
        "convert without --fuse-qkv");
  }

  const int first_shared = c.n_layer - c.num_kv_shared_layers;
  const auto expert_count = f.GetU32Opt(a + "expert_count");
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = Str("blk.", i, ".");
    const std::size_t li = static_cast<std::size_t>(i);
    Layer Ly;
    Ly.sliding = c.is_sliding[li];
    Ly.attn_norm = t.Vec(p + "attn_norm.weight", E);
    Ly.attn = detail::LoadGemmaAttention(t, p, c.n_head, c.layer_head_dim[li], c.layer_n_head_kv[li], E,
                                         /*owns=*/i < first_shared);
    Ly.ffn_norm = t.Vec(p + "ffn_norm.weight", E);
    Ly.post_ffw_norm = t.Vec(p + "post_ffw_norm.weight", E);
    const int n_ff = c.layer_n_ff[li];
    if (n_ff > 0) {
      Ly.gate = t.Mat(p + "ffn_gate.weight", n_ff, E);
      Ly.up = t.Mat(p + "ffn_up.weight", n_ff, E);
      Ly.down = t.Mat(p + "ffn_down.weight", E, n_ff);
    }
    if (f.FindTensor(p + "ffn_gate_inp.weight") != nullptr) {
      if (!expert_count)
        throw Error(Str("tensor '", p, "ffn_gate_inp.weight' marks an MoE layer but metadata key '", a,
                        "expert_count' is missing"));
      Ly.moe = detail::LoadGemma4Moe(t, p, a, E);
    } else if (n_ff == 0) {
      throw Error(
          Str("layer ", i, " has neither a dense FFN (", a, "feed_forward_length[", i, "] = 0) nor MoE tensors"));
    }
    if (ple > 0) Ly.ple_gate = detail::LoadPerLayerGate(t, p, ple, E);
    for (std::optional<WeightMatrix>* w : {&Ly.gate, &Ly.up, &Ly.down}) {
      if (*w) **w = t.ForMatMul(**w);
    }
    if (const float* s = t.VecOpt(p + "layer_output_scale.weight", 1)) {
      Ly.out_scale = *s;
      Ly.has_out_scale = true;
    }
    layers_.push_back(std::move(Ly));
  }
  WarnIfLlamaCppSharesDifferently();
}

std::unique_ptr<DecoderState> Gemma4::MakeState(KvCache cache, const ModelStateOptions& options,
                                                std::shared_ptr<const detail::RopeSet> rope) const {
  const LayerPlan& plan = cache.Plan();
  RequireKvWeights(plan, [&](int l) { return layers_[static_cast<std::size_t>(l)].attn.k.has_value(); });
  return std::make_unique<Gemma4State>(std::move(cache), options, std::move(rope));
}

float* Gemma4::RunStep(DecoderState& base, const detail::Step& step, ThreadPool* pool) const {
  auto& st = static_cast<Gemma4State&>(base);
  const ModelConfig& c = cfg_;
  const std::int64_t T = static_cast<std::int64_t>(step.tokens.size());
  const int E = c.n_embd;
  st.x.resize(static_cast<std::size_t>(T * E));
  EmbedStep(step, st.x.data());
  if (ple_.width > 0) ple_.Compute(st.x.data(), step.tokens, E, c.rms_eps, st.ple, st.ple_tok, pool);
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
    if (st.layer_probe) {
      std::int64_t rows = 0;
      for (const detail::QuerySpan& sp : spans) rows += sp.n;
      st.layer_probe(l, std::span<const float>(st.x.data(), static_cast<std::size_t>(rows * E)));
    }
  }
  for (const detail::StepRow& r : step.rows) st.cache.Commit(r.row);
  if (kept == 0) return nullptr;
  if (cut < 0) PackKeptRows(step, std::span(&st.x, 1), E);
  return st.x.data();
}

// Row i of st.x is step token st.src[i].
bool Gemma4::RunLayer(Gemma4State& st, int l, std::vector<detail::QuerySpan>& spans, bool owns,
                      const detail::Step* cut, ThreadPool* pool) const {
  const ModelConfig& c = cfg_;
  const Layer& Ly = layers_[static_cast<std::size_t>(l)];
  const int E = c.n_embd;
  std::int64_t S = 0;
  for (const detail::QuerySpan& sp : spans) S += sp.n;
  const auto grow = [](std::vector<float>& v, std::int64_t n) {
    if (v.size() < static_cast<std::size_t>(n)) v.resize(static_cast<std::size_t>(n));
  };
  grow(st.h, S * E);
  grow(st.o, S * E);
  grow(st.f, S * E);
  float* x = st.x.data();

  // Attention.
  std::copy(x, x + S * E, st.h.data());
  RmsNorm(st.h.data(), S, E, Ly.attn_norm, c.rms_eps, pool);
  detail::GemmaAttentionBlock(st, Ly.attn,
                              {.layer = l,
                               .owns = owns,
                               .n_head = c.n_head,
                               .scale = c.attn_scale,
                               .eps = c.rms_eps,
                               .rope = LayerRope(st, l),
                               .spans = spans},
                              st.h.data(), st.o.data(), st.attn, pool);
  for (std::int64_t i = 0; i < S * E; ++i) x[i] += st.o[static_cast<std::size_t>(i)];
  if (cut != nullptr) {
    S = KeptRows(*cut);
    if (S == 0) return false;
    PackKeptRows(*cut, std::span(&st.x, 1), E, &spans, &st.src);
  }

  // FFN: dense GeGLU, and on MoE layers its normed output plus the experts'.
  std::copy(x, x + S * E, st.h.data());
  RmsNorm(st.h.data(), S, E, Ly.ffn_norm, c.rms_eps, pool);
  if (Ly.gate) detail::GegluMlp(*Ly.gate, *Ly.up, *Ly.down, st.h.data(), S, st.f.data(), st.g, st.u, pool);
  if (Ly.moe) {
    if (Ly.gate) RmsNorm(st.f.data(), S, E, Ly.moe->post_ffw_norm_1, c.rms_eps, pool);
    grow(st.o, S * E);
    detail::RunGemma4Moe(*Ly.moe, x, S, E, c.rms_eps, st.o.data(), st.moe, pool);
    if (Ly.gate) {
      for (std::int64_t i = 0; i < S * E; ++i) st.f[static_cast<std::size_t>(i)] += st.o[static_cast<std::size_t>(i)];
    } else {
      std::copy(st.o.begin(), st.o.begin() + S * E, st.f.begin());
    }
  }
  RmsNorm(st.f.data(), S, E, Ly.post_ffw_norm, c.rms_eps, pool);
  for (std::int64_t i = 0; i < S * E; ++i) x[i] += st.f[static_cast<std::size_t>(i)];

  // Per-layer embedding: x += RMSNorm(proj(gelu_tanh(inp_gate x) * ple[:, l]), post_norm).
  if (ple_.width > 0) {
    detail::PerLayerGate(Ly.ple_gate, x, S, st.ple, st.src, l, ple_.width, c.n_layer, E, c.rms_eps, st.g, st.u,
                         st.o.data(), pool);
    for (std::int64_t i = 0; i < S * E; ++i) x[i] += st.o[static_cast<std::size_t>(i)];
  }
  if (Ly.has_out_scale) {
    for (std::int64_t i = 0; i < S * E; ++i) x[i] *= Ly.out_scale;
  }
  return true;
}

}  // namespace

std::unique_ptr<Model> LoadGemma4(GgufFile file, PackOptions pack) {
  return std::make_unique<Gemma4>(std::move(file), pack);
}

std::optional<detail::Gemma4Weights> detail::Gemma4WeightsOf(const Model& model) {
  const auto* m = dynamic_cast<const Gemma4*>(&model);
  if (m == nullptr) return std::nullopt;
  return m->weights();
}

}  // namespace kvshare
