#include "model/gemma_blocks.h"

#include <algorithm>
#include <cmath>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "model/activations.h"

namespace kvshare::detail {
namespace {
void Grow(std::vector<float>& v, std::int64_t n) {
  if (v.size() < static_cast<std::size_t>(n)) v.resize(static_cast<std::size_t>(n));
}
}  // namespace

GemmaAttentionWeights LoadGemmaAttention(const TensorLookup& t, const std::string& p, int n_head, int hd, int n_kv,
                                         std::int64_t E, bool owns) {
  GemmaAttentionWeights w;
  w.hd = hd;
  w.n_kv = n_kv;
  const std::int64_t qd = static_cast<std::int64_t>(n_head) * hd, kvd = static_cast<std::int64_t>(n_kv) * hd;
  w.q = t.ForMatMul(t.Mat(p + "attn_q.weight", qd, E));
  w.q_norm = t.Vec(p + "attn_q_norm.weight", hd);
  w.k = owns ? std::optional(t.Mat(p + "attn_k.weight", kvd, E)) : t.MatOpt(p + "attn_k.weight", kvd, E);
  w.k_norm = owns ? t.Vec(p + "attn_k_norm.weight", hd) : t.VecOpt(p + "attn_k_norm.weight", hd);
  if (w.k && w.k_norm == nullptr) t.Vec(p + "attn_k_norm.weight", hd);  // throws: K without its norm
  w.v = t.MatOpt(p + "attn_v.weight", kvd, E);
  if (owns) {
    for (std::optional<WeightMatrix>* m : {&w.k, &w.v}) {
      if (*m) **m = t.ForMatMul(**m);
    }
  }
  w.o = t.ForMatMul(t.Mat(p + "attn_output.weight", E, qd));
  w.post_norm = t.Vec(p + "post_attention_norm.weight", E);
  return w;
}

PerLayerGateWeights LoadPerLayerGate(const TensorLookup& t, const std::string& p, int width, std::int64_t E) {
  return {.inp_gate = t.ForMatMul(t.Mat(p + "inp_gate.weight", width, E)),
          .proj = t.ForMatMul(t.Mat(p + "proj.weight", E, width)),
          .post_norm = t.Vec(p + "post_norm.weight", E)};
}

void GemmaAttentionBlock(DecoderState& st, const GemmaAttentionWeights& w, const GemmaAttentionCall& c, const float* h,
                         float* out, GemmaAttentionScratch& s, ThreadPool* pool) {
  std::int64_t S = 0;
  for (const QuerySpan& sp : c.spans) S += sp.n;
  const int Hd = w.hd;
  const std::int64_t qd = static_cast<std::int64_t>(c.n_head) * Hd, kvd = static_cast<std::int64_t>(w.n_kv) * Hd;
  const std::int64_t E = w.o.rows;
  Grow(s.q, S * qd);
  Grow(s.attn, S * qd);
  if (c.owns) {
    Grow(s.k, S * kvd);
    Grow(s.v, S * kvd);
    const MatMulTarget qkv[] = {
        {.w = w.q, .y = s.q.data()}, {.w = *w.k, .y = s.k.data()}, {.w = w.v ? *w.v : WeightMatrix{}, .y = s.v.data()}};
    MatMulRowsMany(std::span<const MatMulTarget>(qkv, w.v ? 3 : 2), h, S, pool);
    if (!w.v) std::copy(s.k.begin(), s.k.begin() + S * kvd, s.v.begin());  // k_eq_v: V is the raw K projection
  } else {
    MatMulRows(w.q, h, S, s.q.data(), pool);
  }
  RmsNorm(s.q.data(), S * c.n_head, Hd, w.q_norm, c.eps, pool);
  if (c.owns) {
    RmsNorm(s.k.data(), S * w.n_kv, Hd, w.k_norm, c.eps, pool);
    RmsNorm(s.v.data(), S * w.n_kv, Hd, nullptr, c.eps, pool);  // scale-free V norm
  }
  Attend(st, c.layer,
         AttentionCall{.q = s.q.data(),
                       .k = c.owns ? s.k.data() : nullptr,
                       .v = c.owns ? s.v.data() : nullptr,
                       .out = s.attn.data(),
                       .n_head = c.n_head,
                       .head_dim = Hd,
                       .kv_dim = static_cast<int>(kvd),
                       .rope = c.rope,
                       .scale = c.scale},
         c.spans, pool);
  MatMulRows(w.o, s.attn.data(), S, out, pool);
  RmsNorm(out, S, static_cast<int>(E), w.post_norm, c.eps, pool);
}

void PerLayerEmbeddings::Load(const TensorLookup& t, int layers, int w, std::int64_t E, std::int64_t n_vocab,
                              std::int64_t min_rows) {
  n_layer = layers;
  width = w;
  if (width < 0) throw Error(Str("embedding_length_per_layer_input must be >= 0, got ", width));
  if (width == 0) {
    // A file with the tables but a width of 0 would run without them.
    if (t.file().FindTensor("per_layer_token_embd.weight") != nullptr) {
      throw Error(
          "tensor 'per_layer_token_embd.weight' is present but embedding_length_per_layer_input is 0 or missing: "
          "the metadata and the tensors disagree (a damaged or hand-edited file?)");
    }
    return;
  }
  const std::int64_t LP = static_cast<std::int64_t>(width) * n_layer;
  const GgufTensor& tt = t.file().Tensor("per_layer_token_embd.weight");
  const std::int64_t rows = tt.n_dims == 2 ? tt.ne[1] : 0;
  if (rows < min_rows || rows > n_vocab) {
    throw Error(Str("tensor 'per_layer_token_embd.weight' is ", tt.DimsString(), ", expected [", LP, ", ",
                    min_rows == n_vocab ? Str(n_vocab) : Str("rows in [", min_rows, ", ", n_vocab, "]"), "]"));
  }
  // Rows are gathered per step from the mapping (never dequantized whole).
  table = t.Mat("per_layer_token_embd.weight", rows, LP);
  proj = t.ForMatMul(t.Mat("per_layer_model_proj.weight", LP, E));
  proj_norm = t.Vec("per_layer_proj_norm.weight", width);
}

void PerLayerEmbeddings::Compute(const float* x, std::span<const std::int32_t> tokens, std::int64_t E, float eps,
                                 std::vector<float>& out, std::vector<float>& row, ThreadPool* pool) const {
  const std::int64_t S = static_cast<std::int64_t>(tokens.size()), LP = table.cols;
  out.resize(static_cast<std::size_t>(S * LP));
  row.resize(static_cast<std::size_t>(LP));
  MatMulRows(proj, x, S, out.data(), pool);
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(E));
  for (float& e : out) e *= proj_scale;
  RmsNorm(out.data(), S * n_layer, width, proj_norm, eps, pool);
  const float tok_scale = std::sqrt(static_cast<float>(width)), mix = 1.0f / std::sqrt(2.0f);
  for (std::int64_t s = 0; s < S; ++s) {
    const std::int32_t id = tokens[static_cast<std::size_t>(s)] < table.rows ? tokens[static_cast<std::size_t>(s)] : 0;
    EmbedRows(table, std::span<const std::int32_t>(&id, 1), tok_scale, row.data());
    float* r = out.data() + s * LP;
    for (std::int64_t i = 0; i < LP; ++i) r[i] = (r[i] + row[static_cast<std::size_t>(i)]) * mix;
  }
}

void PerLayerGate(const PerLayerGateWeights& w, const float* in, std::int64_t S, const std::vector<float>& ple,
                  std::span<const std::int64_t> src, int layer, int width, int n_layer, std::int64_t E, float eps,
                  std::vector<float>& g, std::vector<float>& u, float* out, ThreadPool* pool) {
  Grow(g, S * width);
  Grow(u, S * width);
  MatMulRows(w.inp_gate, in, S, g.data(), pool);
  const std::int64_t LP = static_cast<std::int64_t>(width) * n_layer;
  for (std::int64_t s = 0; s < S; ++s) {
    const float* from = ple.data() + src[static_cast<std::size_t>(s)] * LP + static_cast<std::int64_t>(layer) * width;
    std::copy(from, from + width, u.data() + s * width);
  }
  GeluTanhMul(g.data(), u.data(), g.data(), S * width);
  MatMulRows(w.proj, g.data(), S, out, pool);
  RmsNorm(out, S, static_cast<int>(E), w.post_norm, eps, pool);
}

}  // namespace kvshare::detail
