// Gemma 3 forward pass on the CPU: fp32 activations, quantized weights through
// MatMul, attention through GroupQueryAttention in static-scatter mode on the
// state's KvCache (AttendLayer): full layers on linear buffers, sliding layers
// on window rings, KV-shared layers on their source layer's buffers.
#include "model/gemma3.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/str.h"
#include "kvshare/attention/gqa.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "model/decoder.h"
#include "model/hyperparameters.h"
#include "quant/quant.h"

namespace kvshare {
namespace {

using detail::AttentionCall;
using detail::DecoderState;
using detail::RmsNorm;
using detail::Str;

using Layer = detail::Gemma3Layer<WeightMatrix, const float*>;

// Scratch for one chunk of n <= max_step tokens (row-major, one row per token).
class Gemma3State final : public DecoderState {
 public:
  using DecoderState::DecoderState;
  std::vector<float> x;     // [n, n_embd] residual stream
  std::vector<float> h;     // [n, n_embd] normed input
  std::vector<float> q;     // [n, n_head * head_dim]
  std::vector<float> k, v;  // [n, n_head_kv * head_dim] (owning layers only)
  std::vector<float> attn;  // [n, n_head * head_dim]
  std::vector<float> o;     // [n, n_embd]
  std::vector<float> g, u;  // [n, n_ff]
};

class Gemma3 final : public detail::DecoderModel {
 public:
  // arch: "gemma3", or "gemma-embedding" (EmbeddingGemma: the same layers
  // run bidirectionally, with a pooling type and dense projections).
  Gemma3(GgufFile file, const std::string& arch, PackOptions pack) : DecoderModel(std::move(file), pack) {
    const GgufFile& f = file_;
    const detail::TensorLookup t(f, pack_);
    ModelConfig& c = cfg_;
    c.architecture = arch;
    const std::string a = arch + ".";
    c.n_layer = static_cast<int>(f.GetU32(a + "block_count"));
    detail::CheckLayerCount(f, c.n_layer, a);
    c.n_embd = static_cast<int>(f.GetU32(a + "embedding_length"));
    c.n_ff = static_cast<int>(f.GetU32(a + "feed_forward_length"));
    c.n_head = static_cast<int>(f.GetU32(a + "attention.head_count"));
    c.n_head_kv = static_cast<int>(f.GetU32Or(a + "attention.head_count_kv", c.n_head));
    c.context_length = static_cast<int>(f.GetU32Or(a + "context_length", 8192));
    c.rms_eps = f.GetF32Or(a + "attention.layer_norm_rms_epsilon", 1e-6f);
    c.sliding_window = static_cast<int>(f.GetU32Or(a + "attention.sliding_window", 0));
    if (arch == "gemma-embedding") LoadEmbeddingHead(a);  // halves the window: before the layer pattern
    c.rope_base_full = f.GetF32Or(a + "rope.freq_base", 1e6f);
    c.rope_base_sliding = f.GetF32Or(a + "rope.freq_base_swa", 1e4f);
    detail::CheckScalarHyperparameters(c, a);
    c.head_dim = static_cast<int>(f.GetU32Or(a + "attention.key_length", c.n_embd / c.n_head));
    if (c.head_dim < 1) throw Error(Str(a, "attention.key_length must be >= 1, got ", c.head_dim));
    detail::CheckValueLength(f, a, "attention.key_length", "attention.value_length", c.head_dim);
    detail::CheckKvHeadCount(a, "attention.head_count_kv", c.n_head_kv, c.n_head);
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    // HF Gemma3ForCausalLM caps the logits when its config sets
    // final_logit_softcapping (the released models do not; the converter
    // writes the key only when set).
    final_softcap_ = detail::ReadFinalLogitSoftcap(f, a);
    c.image_attention = ImageAttention::kAllLayers;  // HF Gemma 3: an image's tokens see each other on every layer
    // Layer pattern: every 6th layer is global (llama.cpp set_swa_pattern(6)).
    const int pattern = static_cast<int>(f.GetU32Or(a + "attention.sliding_window_pattern", 6));
    if (pattern < 1) throw Error(Str(a, "attention.sliding_window_pattern must be >= 1, got ", pattern));
    c.is_sliding.resize(c.n_layer);
    for (int i = 0; i < c.n_layer; ++i) c.is_sliding[i] = c.sliding_window > 0 && ((i + 1) % pattern) != 0;
    c.layer_head_dim.assign(c.n_layer, c.head_dim);
    c.layer_n_head_kv.assign(c.n_layer, c.n_head_kv);
    c.layer_n_ff.assign(c.n_layer, c.n_ff);
    c.num_kv_shared_layers = static_cast<int>(f.GetU32Or(a + "attention.shared_kv_layers", 0));
    ValidateSharing(a + "attention.shared_kv_layers");

    embd_w_ = WeightMatrix::FromTensor(f.Tensor("token_embd.weight"));
    c.n_vocab = static_cast<int>(embd_w_.rows);
    if (embd_w_.cols != c.n_embd) {
      throw Error("token_embd.weight has " + std::to_string(embd_w_.cols) + " columns, expected embedding_length " +
                  std::to_string(c.n_embd));
    }
    // The LM head (the tied embedding unless the file has output.weight) and
    // every layer matrix are prepared for MatMul (packed where this CPU has a
    // kernel for their layout); embd_w_ keeps the stored rows for lookups.
    out_w_ = t.ForMatMul(t.MatOpt("output.weight", c.n_vocab, c.n_embd).value_or(embd_w_));
    const auto mat = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
      return t.ForMatMul(t.Mat(name, rows, cols));
    };
    out_norm_ = t.Vec("output_norm.weight", c.n_embd);
    const auto vec = [&](const std::string& name, std::int64_t n) { return t.Vec(name, n); };
    for (int i = 0; i < c.n_layer; ++i)
      layers_.push_back(detail::LoadGemma3Layer<WeightMatrix, const float*>(c, i, mat, vec));
    // RoPE: NeoX over the whole head, base by layer type.
    rope_families_ = {{.base = c.rope_base_full, .rotary_dim = c.head_dim},
                      {.base = c.rope_base_sliding, .rotary_dim = c.head_dim}};
    for (int i = 0; i < c.n_layer; ++i) layer_rope_.push_back(c.is_sliding[i] ? 1 : 0);
  }

 private:
  std::unique_ptr<DecoderState> MakeState(KvCache cache, const ModelStateOptions& options,
                                          std::shared_ptr<const detail::RopeSet> rope) const override {
    return std::make_unique<Gemma3State>(std::move(cache), options, std::move(rope));
  }
  float* RunStep(DecoderState& st, const detail::Step& step, ThreadPool* pool) const override;

  std::vector<Layer> layers_;
};

float* Gemma3::RunStep(DecoderState& base, const detail::Step& step, ThreadPool* pool) const {
  auto& st = static_cast<Gemma3State&>(base);
  const ModelConfig& c = cfg_;
  const std::int64_t S = static_cast<std::int64_t>(step.tokens.size());  // tokens of all rows
  const int E = c.n_embd, Hd = c.head_dim, qd = c.n_head * Hd, kvd = c.n_head_kv * Hd;
  const auto sz = [](std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); };
  st.x.resize(sz(S, E));
  st.h.resize(sz(S, E));
  st.q.resize(sz(S, qd));
  st.k.resize(sz(S, kvd));
  st.v.resize(sz(S, kvd));
  st.attn.resize(sz(S, qd));
  st.o.resize(sz(S, E));

  // Embeddings scaled by sqrt(n_embd).
  EmbedStep(step, st.x.data());

  for (const detail::StepRow& r : step.rows) st.cache.Reserve(r.row, r.n);
  std::vector<detail::QuerySpan> spans = FullSpans(step);
  const LayerPlan& plan = st.cache.Plan();
  const std::int64_t kept = KeptRows(step);
  // After the attention of the last layer that writes K/V, only the rows
  // whose outputs are read run on (DecoderModel::CutAfterAttention).
  const int cut = CutAfterAttention(st, plan, kept, S);
  std::int64_t R = S;  // rows of st.x that run
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[l];
    const bool owns = plan.layers[static_cast<std::size_t>(l)].owns_cache;
    const std::size_t RE = sz(R, E);
    std::copy(st.x.begin(), st.x.begin() + static_cast<std::ptrdiff_t>(RE), st.h.begin());
    RmsNorm(st.h.data(), R, E, L.attn_norm, c.rms_eps, pool);
    if (owns) {  // a KV-shared layer reads its source's K/V and computes none
      const MatMulTarget qkv[] = {
          {.w = L.q, .y = st.q.data()}, {.w = L.k, .y = st.k.data()}, {.w = L.v, .y = st.v.data()}};
      detail::MatMulRowsMany(qkv, st.h.data(), R, pool);
      RmsNorm(st.k.data(), R * c.n_head_kv, Hd, L.k_norm, c.rms_eps, pool);
    } else {
      detail::MatMulRows(L.q, st.h.data(), R, st.q.data(), pool);
    }
    RmsNorm(st.q.data(), R * c.n_head, Hd, L.q_norm, c.rms_eps, pool);
    detail::Attend(st, l,
                   AttentionCall{.q = st.q.data(),
                                 .k = owns ? st.k.data() : nullptr,
                                 .v = owns ? st.v.data() : nullptr,
                                 .out = st.attn.data(),
                                 .n_head = c.n_head,
                                 .head_dim = Hd,
                                 .kv_dim = kvd,
                                 .rope = LayerRope(st, l),
                                 .scale = c.attn_scale},
                   spans, pool);
    if (l == cut) {
      if (kept == 0) break;  // the K/V are written; nothing else is read
      PackKeptRows(step, std::span(&st.attn, 1), qd);
      PackKeptRows(step, std::span(&st.x, 1), E, &spans);
      R = kept;
    }
    const std::size_t OE = sz(R, E);

    detail::MatMulRows(L.o, st.attn.data(), R, st.o.data(), pool);
    RmsNorm(st.o.data(), R, E, L.post_attn_norm, c.rms_eps, pool);
    for (std::size_t i = 0; i < OE; ++i) st.x[i] += st.o[i];

    std::copy(st.x.begin(), st.x.begin() + static_cast<std::ptrdiff_t>(OE), st.h.begin());
    RmsNorm(st.h.data(), R, E, L.ffn_norm, c.rms_eps, pool);
    detail::GegluMlp(L.gate, L.up, L.down, st.h.data(), R, st.o.data(), st.g, st.u, pool);
    RmsNorm(st.o.data(), R, E, L.post_ffw_norm, c.rms_eps, pool);
    for (std::size_t i = 0; i < OE; ++i) st.x[i] += st.o[i];
    if (st.layer_probe) st.layer_probe(l, std::span<const float>(st.x.data(), OE));
  }
  for (const detail::StepRow& r : step.rows) st.cache.Commit(r.row);
  if (kept == 0) return nullptr;
  if (R == S) PackKeptRows(step, std::span(&st.x, 1), E);
  return st.x.data();
}

}  // namespace

std::unique_ptr<Model> LoadGemma3(GgufFile file, const std::string& arch, PackOptions pack) {
  return std::make_unique<Gemma3>(std::move(file), arch, pack);
}

}  // namespace kvshare
