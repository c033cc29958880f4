// Gemma 4's assistant drafter on the CPU (kvshare/model/gemma4_assistant.h): its layers
// attend to the target state's cache through GroupQueryAttention's read-only
// static scatter form.
#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/str.h"
#include "kvshare/attention/gqa.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/gemma4_assistant.h"
#include "model/decoder.h"
#include "model/gemma4_assistant_host.h"
#include "model/gemma4_config.h"
#include "quant/quant.h"

namespace kvshare {
namespace {

using detail::RmsNorm;
using detail::Str;

constexpr const char* kArch = "gemma4-assistant";

using Layer = detail::AssistantLayerWeights;

class Scratch final : public AssistantScratch {
 public:
  std::vector<float> in, x, h, o, f, g, u, y, q, attn, logits, hidden_out;
  std::vector<float> q_pad, out_pad;  // [B, N * H] query / output of the op
  std::shared_ptr<const detail::RopeSet> rope;
  std::vector<float> centroid_logits, row;
  detail::AssistantSourcesCache sources;
};

class Gemma4Assistant final : public AssistantModel {
 public:
  explicit Gemma4Assistant(GgufFile file);
  const AssistantConfig& config() const override { return cfg_; }
  const GgufFile& gguf() const override { return file_; }
  std::vector<AssistantLayerSource> Sources(const Model& target, const LayerPlan& plan) const override;
  std::unique_ptr<AssistantScratch> NewScratch() const override { return std::make_unique<Scratch>(); }
  AssistantStepOut Step(AssistantScratch& scratch, const AssistantStepArgs& args) const override;
  const detail::AssistantWeights& weights() const { return w_; }

 private:
  void Attend(Scratch& s, int l, const AssistantLayerSource& src, const AssistantStepArgs& a, std::int64_t p) const;
  void Head(Scratch& s) const;
  std::shared_ptr<const detail::RopeSet> RopeFor(std::int64_t max_pos) const;

  GgufFile file_;
  AssistantConfig cfg_;
  detail::AssistantWeights w_;
  WeightMatrix head_;  // w_.embd prepared for MatMul (the plain head only)
  mutable std::mutex rope_mu_;
  mutable std::shared_ptr<const detail::RopeSet> rope_;
};

Gemma4Assistant::Gemma4Assistant(GgufFile file) : file_(std::move(file)) {
  const GgufFile& f = file_;
  const detail::TensorLookup t(f);
  const std::string a = std::string(kArch) + ".";
  detail::Gemma4Geometry g = detail::ReadGemma4Geometry(f, a);
  const ModelConfig& c = g.config;
  w_.rope_families = std::move(g.rope_families);
  w_.layer_rope = std::move(g.layer_rope);
  cfg_.n_layer = c.n_layer;
  cfg_.n_embd = c.n_embd;
  cfg_.n_head = c.n_head;
  cfg_.rms_eps = c.rms_eps;
  cfg_.sliding_window = c.sliding_window;
  cfg_.is_sliding = c.is_sliding;
  cfg_.layer_head_dim = c.layer_head_dim;
  cfg_.layer_n_head_kv = c.layer_n_head_kv;
  cfg_.layer_n_ff = c.layer_n_ff;
  cfg_.n_embd_backbone = static_cast<int>(f.GetU32(a + "embedding_length_out"));
  if (c.num_kv_shared_layers != c.n_layer) {
    throw Error(Str(a, "attention.shared_kv_layers = ", c.num_kv_shared_layers, ", expected block_count = ", c.n_layer,
                    ": every layer of a Gemma 4 assistant reads the target's KV"));
  }
  if (const auto ple = f.GetU32Opt(a + "embedding_length_per_layer_input"); ple && *ple != 0) {
    throw Error(
        Str(a, "embedding_length_per_layer_input = ", *ple, ": a Gemma 4 assistant has no per-layer embeddings"));
  }
  if (f.GetU32Opt(a + "expert_count"))
    throw Error(Str(a, "expert_count is set: a Gemma 4 assistant has no MoE layers"));

  const std::int64_t E = cfg_.n_embd, Eb = cfg_.n_embd_backbone;
  w_.embd = WeightMatrix::FromTensor(f.Tensor("token_embd.weight"));
  if (w_.embd.cols != E) {
    throw Error(Str("tensor 'token_embd.weight' has ", w_.embd.cols, " columns, expected embedding_length ", E));
  }
  cfg_.n_vocab = static_cast<int>(w_.embd.rows);
  w_.out_norm = t.Vec("output_norm.weight", E);
  w_.pre = t.ForMatMul(t.Mat("nextn.pre_projection.weight", E, 2 * Eb));
  w_.post = t.ForMatMul(t.Mat("nextn.post_projection.weight", Eb, E));

  if (const GgufTensor* ct = f.FindTensor("masked_embd_centroids.weight")) {
    cfg_.ordered_embeddings = true;
    cfg_.num_centroids = static_cast<int>(ct->ne[1]);
    w_.centroids = t.Mat("masked_embd_centroids.weight", cfg_.num_centroids, E);
    cfg_.centroid_top_k = static_cast<int>(f.GetU32(a + "centroid_intermediate_top_k"));
    if (cfg_.num_centroids < 1 || cfg_.n_vocab % cfg_.num_centroids != 0) {
      throw Error(Str("tensor 'masked_embd_centroids.weight' has ", cfg_.num_centroids,
                      " centroids, which must divide the vocabulary of ", cfg_.n_vocab));
    }
    if (cfg_.centroid_top_k < 1 || cfg_.centroid_top_k > cfg_.num_centroids) {
      throw Error(Str(a, "centroid_intermediate_top_k = ", cfg_.centroid_top_k, " must be in [1, ", cfg_.num_centroids,
                      "] (the number of centroids)"));
    }
    const GgufTensor& ot = f.Tensor("masked_embd_ordering");
    if (ot.type != GgmlType::kI32 || ot.NumElements() != cfg_.n_vocab) {
      throw Error(Str("tensor 'masked_embd_ordering' must be I32 with n_vocab = ", cfg_.n_vocab, " elements, got ",
                      GgmlTypeName(ot.type), " ", ot.DimsString()));
    }
    const auto* p = reinterpret_cast<const std::int32_t*>(ot.data);
    w_.ordering.assign(p, p + cfg_.n_vocab);
    std::vector<bool> seen(static_cast<std::size_t>(cfg_.n_vocab), false);
    for (std::int32_t id : w_.ordering) {
      if (id < 0 || id >= cfg_.n_vocab || seen[static_cast<std::size_t>(id)]) {
        throw Error(Str("tensor 'masked_embd_ordering' is not a permutation of the vocabulary: id ", id,
                        id < 0 || id >= cfg_.n_vocab ? " is out of range" : " appears twice"));
      }
      seen[static_cast<std::size_t>(id)] = true;
    }
  }

  // The plain head multiplies the whole table; the centroid head reads rows.
  if (!cfg_.ordered_embeddings) head_ = t.ForMatMul(w_.embd);

  for (int i = 0; i < cfg_.n_layer; ++i) {
    const std::string p = Str("blk.", i, ".");
    const std::size_t li = static_cast<std::size_t>(i);
    const std::int64_t hd = cfg_.layer_head_dim[li], qd = cfg_.n_head * hd, ff = cfg_.layer_n_ff[li];
    if (f.FindTensor(p + "attn_k.weight") != nullptr) {
      throw Error(
          Str("tensor '", p, "attn_k.weight': a Gemma 4 assistant layer computes no K/V (it reads the target's)"));
    }
    if (ff < 1) throw Error(Str(a, "feed_forward_length[", i, "] = ", ff, ": every assistant layer has a dense MLP"));
    Layer L;
    L.attn_norm = t.Vec(p + "attn_norm.weight", E);
    L.q = t.ForMatMul(t.Mat(p + "attn_q.weight", qd, E));
    L.q_norm = t.Vec(p + "attn_q_norm.weight", hd);
    L.o = t.ForMatMul(t.Mat(p + "attn_output.weight", E, qd));
    L.post_attn_norm = t.Vec(p + "post_attention_norm.weight", E);
    L.ffn_norm = t.Vec(p + "ffn_norm.weight", E);
    L.gate = t.ForMatMul(t.Mat(p + "ffn_gate.weight", ff, E));
    L.up = t.ForMatMul(t.Mat(p + "ffn_up.weight", ff, E));
    L.down = t.ForMatMul(t.Mat(p + "ffn_down.weight", E, ff));
    L.post_ffw_norm = t.Vec(p + "post_ffw_norm.weight", E);
    if (const float* s = t.VecOpt(p + "layer_output_scale.weight", 1)) L.out_scale = *s;
    w_.layers.push_back(L);
  }
}

std::vector<AssistantLayerSource> Gemma4Assistant::Sources(const Model& target, const LayerPlan& plan) const {
  const ModelConfig& tc = target.config();
  if (tc.n_vocab != cfg_.n_vocab) {
    throw Error(Str("the assistant's vocabulary has ", cfg_.n_vocab, " tokens, the target's ", tc.n_vocab,
                    "; the assistant must come with its target (the same tokenizer)"));
  }
  if (tc.n_embd != cfg_.n_embd_backbone) {
    throw Error(Str("the assistant was trained for a target of width ", cfg_.n_embd_backbone, " (", kArch,
                    ".embedding_length_out, HF backbone_hidden_size), but the target's embedding_length is ",
                    tc.n_embd));
  }
  std::vector<AssistantLayerSource> out;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const bool sliding = cfg_.is_sliding[static_cast<std::size_t>(l)];
    int last = -1;
    for (int i = 0; i < tc.n_layer; ++i) {
      if (tc.is_sliding[static_cast<std::size_t>(i)] == sliding) last = i;
    }
    const char* type = sliding ? "sliding" : "full";
    if (last < 0) {
      throw Error(Str("assistant layer ", l, " reads the target's last ", type,
                      "-attention layer, but the target has no ", type, "-attention layer"));
    }
    const std::size_t ls = static_cast<std::size_t>(l), ts = static_cast<std::size_t>(last);
    if (tc.layer_head_dim[ts] != cfg_.layer_head_dim[ls] || tc.layer_n_head_kv[ts] != cfg_.layer_n_head_kv[ls]) {
      throw Error(Str("assistant layer ", l, " (", type, ") has head size ", cfg_.layer_head_dim[ls], " and ",
                      cfg_.layer_n_head_kv[ls], " KV heads, but the K/V it reads (target layer ", last,
                      ") have head size ", tc.layer_head_dim[ts], " and ", tc.layer_n_head_kv[ts], " KV heads"));
    }
    if (cfg_.n_head % tc.layer_n_head_kv[ts] != 0) {
      throw Error(Str("assistant layer ", l, ": ", cfg_.n_head, " query heads are not a multiple of the ",
                      tc.layer_n_head_kv[ts], " KV heads it reads"));
    }
    if (sliding && cfg_.sliding_window > tc.sliding_window) {
      throw Error(Str("the assistant's sliding window is ", cfg_.sliding_window, " keys, wider than the target's ",
                      tc.sliding_window, ": the target's sliding caches would not hold the keys it reads"));
    }
    out.push_back({.layer = l,
                   .type = sliding ? AttentionType::kSliding : AttentionType::kFull,
                   .target_layer = last,
                   .cache_layer = plan.layers.at(ts).source_layer});
  }
  return out;
}

std::shared_ptr<const detail::RopeSet> Gemma4Assistant::RopeFor(std::int64_t max_pos) const {
  std::lock_guard<std::mutex> lock(rope_mu_);
  if (!rope_ || rope_->max_pos < max_pos) {
    auto set = std::make_shared<detail::RopeSet>();
    set->max_pos = detail::AssistantRopeCapacity(rope_ ? rope_->max_pos : 0, max_pos);
    for (const detail::RopeFamily& f : w_.rope_families) set->tables.push_back(detail::BuildRopeTable(f, set->max_pos));
    rope_ = std::move(set);
  }
  return rope_;
}

// The layer's query (s.q, [N * H]) attends at position p to the target's
// cached keys j < p (AssistantAttend), as row a.row of a padded batch.
void Gemma4Assistant::Attend(Scratch& s, int l, const AssistantLayerSource& src, const AssistantStepArgs& a,
                             std::int64_t p) const {
  const std::size_t ls = static_cast<std::size_t>(l);
  const std::int64_t qd = cfg_.n_head * cfg_.layer_head_dim[ls];
  const int B = a.row + 1;
  s.q_pad.assign(static_cast<std::size_t>(B * qd), 0.0f);
  s.out_pad.resize(static_cast<std::size_t>(B * qd));
  std::copy(s.q.begin(), s.q.begin() + qd, s.q_pad.begin() + a.row * qd);
  const detail::RopeTable& rope = s.rope->tables[static_cast<std::size_t>(w_.layer_rope[ls])];
  detail::AssistantAttend(cfg_, *a.target_state,
                          {.layer = l,
                           .src = &src,
                           .row = a.row,
                           .p = p,
                           .query = s.q_pad.data(),
                           .output = s.out_pad.data(),
                           .cos = rope.cos.data(),
                           .sin = rope.sin.data(),
                           .rope_pos = rope.max_pos,
                           .rope_half = rope.half,
                           .run = GqaRunOptions{.pool = a.pool}});
  std::copy(s.out_pad.begin() + a.row * qd, s.out_pad.begin() + (a.row + 1) * qd, s.attn.begin());
}

// Logits of y: the tied head, or the centroid-masked one.
void Gemma4Assistant::Head(Scratch& s) const {
  const std::int64_t V = cfg_.n_vocab, E = cfg_.n_embd;
  s.logits.resize(static_cast<std::size_t>(V));
  if (!cfg_.ordered_embeddings) {
    detail::MatMulRows(head_, s.y.data(), 1, s.logits.data(), nullptr);
    return;
  }
  s.centroid_logits.resize(static_cast<std::size_t>(cfg_.num_centroids));
  detail::MatMulRows(w_.centroids, s.y.data(), 1, s.centroid_logits.data(), nullptr);
  const std::vector<std::int32_t> chosen = detail::CentroidTokens(cfg_, s.centroid_logits, w_.ordering);
  s.row.resize(static_cast<std::size_t>(E));
  for (const std::int32_t id : chosen) {
    DequantizeRow(w_.embd.type, static_cast<const std::uint8_t*>(w_.embd.data) + id * w_.embd.row_bytes, s.row.data(),
                  E);
    float dot = 0.0f;
    for (std::int64_t i = 0; i < E; ++i) dot += s.row[static_cast<std::size_t>(i)] * s.y[static_cast<std::size_t>(i)];
    s.logits[static_cast<std::size_t>(id)] = dot;
  }
  detail::MaskUnchosen(chosen, s.logits);
}

AssistantStepOut Gemma4Assistant::Step(AssistantScratch& base, const AssistantStepArgs& a) const {
  auto& s = static_cast<Scratch&>(base);
  const std::int64_t p = detail::CheckAssistantStep(cfg_, a);
  const std::int64_t E = cfg_.n_embd, Eb = cfg_.n_embd_backbone;
  // The layer map and the RoPE tables stay in the scratch until the target or
  // its sharing (the plan's first shared layer) changes or a position
  // outgrows the tables.
  const std::vector<AssistantLayerSource>& sources = s.sources.For(*this, *a.target, a.target_state->kv_cache().Plan());
  if (!s.rope || s.rope->max_pos < p + 1) s.rope = RopeFor(p + 1);
  detail::AssistantInputRow(cfg_, a, s.in);
  for (std::vector<float>* v : {&s.x, &s.h, &s.o, &s.f, &s.y}) v->resize(static_cast<std::size_t>(E));
  detail::MatMulRows(w_.pre, s.in.data(), 1, s.x.data(), a.pool);

  for (int l = 0; l < cfg_.n_layer; ++l) {
    const Layer& L = w_.layers[static_cast<std::size_t>(l)];
    const int H = cfg_.layer_head_dim[static_cast<std::size_t>(l)];
    const std::int64_t qd = static_cast<std::int64_t>(cfg_.n_head) * H;
    s.q.resize(static_cast<std::size_t>(qd));
    s.attn.resize(static_cast<std::size_t>(qd));
    std::copy(s.x.begin(), s.x.end(), s.h.begin());
    RmsNorm(s.h.data(), 1, static_cast<int>(E), L.attn_norm, cfg_.rms_eps);
    detail::MatMulRows(L.q, s.h.data(), 1, s.q.data(), a.pool);
    RmsNorm(s.q.data(), cfg_.n_head, H, L.q_norm, cfg_.rms_eps);
    Attend(s, l, sources[static_cast<std::size_t>(l)], a, p);
    detail::MatMulRows(L.o, s.attn.data(), 1, s.o.data(), a.pool);
    RmsNorm(s.o.data(), 1, static_cast<int>(E), L.post_attn_norm, cfg_.rms_eps);
    for (std::int64_t i = 0; i < E; ++i) s.x[static_cast<std::size_t>(i)] += s.o[static_cast<std::size_t>(i)];
    std::copy(s.x.begin(), s.x.end(), s.h.begin());
    RmsNorm(s.h.data(), 1, static_cast<int>(E), L.ffn_norm, cfg_.rms_eps);
    detail::GegluMlp(L.gate, L.up, L.down, s.h.data(), 1, s.f.data(), s.g, s.u, a.pool);
    RmsNorm(s.f.data(), 1, static_cast<int>(E), L.post_ffw_norm, cfg_.rms_eps);
    for (std::int64_t i = 0; i < E; ++i) {
      s.x[static_cast<std::size_t>(i)] =
          (s.x[static_cast<std::size_t>(i)] + s.f[static_cast<std::size_t>(i)]) * L.out_scale;
    }
  }
  std::copy(s.x.begin(), s.x.end(), s.y.begin());
  RmsNorm(s.y.data(), 1, static_cast<int>(E), w_.out_norm, cfg_.rms_eps);
  Head(s);
  s.hidden_out.resize(static_cast<std::size_t>(Eb));
  detail::MatMulRows(w_.post, s.y.data(), 1, s.hidden_out.data(), a.pool);
  const auto best = std::max_element(s.logits.begin(), s.logits.end());  // the first maximum: lowest id
  return {.logits = s.logits, .hidden = s.hidden_out, .argmax = static_cast<std::int32_t>(best - s.logits.begin())};
}

}  // namespace

const detail::AssistantWeights& detail::AssistantWeightsOf(const AssistantModel& assistant) {
  const auto* m = dynamic_cast<const Gemma4Assistant*>(&assistant);
  if (m == nullptr)
    throw Error("AssistantWeightsOf: the assistant was not loaded by AssistantModel::Load (a device twin?)");
  return m->weights();
}

std::unique_ptr<AssistantModel> Model::AssistantOnDevice(const AssistantModel&) const { return nullptr; }

bool IsAssistantGguf(const std::string& path) {
  return GgufFile::Open(path).GetStringOpt("general.architecture").value_or("") == kArch;
}

std::unique_ptr<AssistantModel> AssistantModel::Load(const std::string& path) {
  GgufFile file = GgufFile::Open(path);
  const std::string arch(file.GetStringOpt("general.architecture").value_or(""));
  if (arch != kArch) {
    throw Error("draft model " + path + ": architecture '" + arch + "' is not a Gemma 4 assistant (" + kArch + ")");
  }
  return std::make_unique<Gemma4Assistant>(std::move(file));
}

}  // namespace kvshare
