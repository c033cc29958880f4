// Gemma 3 forward pass on the CPU: fp32 activations, quantized weights through
// MatMul, attention through GroupQueryAttention in static-scatter mode on the
// state's KvCache (AttendLayer): full layers on linear buffers, sliding layers
// on window rings, KV-shared layers on their source layer's buffers.
#include "model/gemma3.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kvshare/attention.h"
#include "kvshare/cache.h"
#include "kvshare/error.h"
#include "kvshare/thread_pool.h"
#include "model/activations.h"
#include "model/quant.h"

namespace kvshare {
namespace {

struct Layer {
  WeightMatrix q, k, v, o, gate, up, down;
  const float* attn_norm;
  const float* q_norm;
  const float* k_norm;
  const float* post_attn_norm;
  const float* ffn_norm;
  const float* post_ffw_norm;
};

// y = x / sqrt(mean(x^2) + eps) * w, in place over rows of n.
void RmsNorm(float* x, std::int64_t rows, int n, const float* w, float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* p = x + r * n;
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += static_cast<double>(p[i]) * p[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
    for (int i = 0; i < n; ++i) p[i] = p[i] * inv * w[i];
  }
}

// One sequence: a KvCache with one row (the layer plan's owning layers only)
// and per-chunk scratch.
class Gemma3State final : public ModelState {
 public:
  Gemma3State(KvCache cache, int max_context, int max_step, GqaKernel kernel)
      : cache(std::move(cache)), max_context_(max_context), max_step_(max_step), kernel_(kernel),
        kv_bytes_(this->cache.Memory().total_bytes) {}
  std::int64_t length() const override { return cache.Length(0); }
  int max_context() const override { return max_context_; }
  std::size_t kv_bytes() const override { return kv_bytes_; }
  const KvCache& kv_cache() const override { return cache; }
  void Reset() override { cache.Reset(0); }

  KvCache cache;
  int max_context_;
  int max_step_;  // S_max: tokens per chunk
  GqaKernel kernel_;
  std::size_t kv_bytes_;
  // Scratch for one chunk of n <= max_step tokens (row-major, one row per token).
  std::vector<float> x;     // [n, n_embd] residual stream
  std::vector<float> h;     // [n, n_embd] normed input
  std::vector<float> q;     // [n, n_head * head_dim]
  std::vector<float> k, v;  // [n, n_head_kv * head_dim] (owning layers only)
  std::vector<float> attn;  // [n, n_head * head_dim]
  std::vector<float> o;     // [n, n_embd]
  std::vector<float> g, u;  // [n, n_ff]
  std::vector<float> logits;  // [num_logits, n_vocab]
};

class Gemma3 final : public Model {
 public:
  explicit Gemma3(GgufFile file) : file_(std::move(file)) {
    const GgufFile& f = file_;
    ModelConfig& c = cfg_;
    c.architecture = "gemma3";
    const std::string a = "gemma3.";
    c.n_layer = static_cast<int>(f.GetU32(a + "block_count"));
    c.n_embd = static_cast<int>(f.GetU32(a + "embedding_length"));
    c.n_ff = static_cast<int>(f.GetU32(a + "feed_forward_length"));
    c.n_head = static_cast<int>(f.GetU32(a + "attention.head_count"));
    c.n_head_kv = static_cast<int>(f.GetU32Or(a + "attention.head_count_kv", c.n_head));
    c.head_dim = static_cast<int>(f.GetU32Or(a + "attention.key_length", c.n_embd / c.n_head));
    c.context_length = static_cast<int>(f.GetU32Or(a + "context_length", 8192));
    c.rms_eps = f.GetF32Or(a + "attention.layer_norm_rms_epsilon", 1e-6f);
    c.sliding_window = static_cast<int>(f.GetU32Or(a + "attention.sliding_window", 0));
    c.rope_base_full = f.GetF32Or(a + "rope.freq_base", 1e6f);
    c.rope_base_sliding = f.GetF32Or(a + "rope.freq_base_swa", 1e4f);
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    // Layer pattern: every 6th layer is global (llama.cpp set_swa_pattern(6)).
    const int pattern = static_cast<int>(f.GetU32Or(a + "attention.sliding_window_pattern", 6));
    c.is_sliding.resize(c.n_layer);
    for (int i = 0; i < c.n_layer; ++i) c.is_sliding[i] = c.sliding_window > 0 && ((i + 1) % pattern) != 0;
    c.num_kv_shared_layers = static_cast<int>(f.GetU32Or(a + "attention.shared_kv_layers", 0));
    if (c.num_kv_shared_layers > MaxKvSharedLayers(c)) {
      throw Error(a + "attention.shared_kv_layers = " + std::to_string(c.num_kv_shared_layers) +
                  " is not a valid layer plan for this model (valid: 0.." + std::to_string(MaxKvSharedLayers(c)) +
                  "): " + PlanError(c, c.num_kv_shared_layers));
    }

    embd_ = &f.Tensor("token_embd.weight");
    embd_w_ = WeightMatrix::FromTensor(*embd_);
    c.n_vocab = static_cast<int>(embd_w_.rows);
    if (embd_w_.cols != c.n_embd) {
      throw Error("token_embd.weight has " + std::to_string(embd_w_.cols) + " columns, expected embedding_length " +
                  std::to_string(c.n_embd));
    }
    const GgufTensor* out = f.FindTensor("output.weight");
    out_w_ = out ? WeightMatrix::FromTensor(*out) : embd_w_;
    out_norm_ = Norm("output_norm.weight", c.n_embd);
    const int qd = c.n_head * c.head_dim, kvd = c.n_head_kv * c.head_dim;
    for (int i = 0; i < c.n_layer; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      Layer L;
      L.q = Mat(p + "attn_q.weight", qd, c.n_embd);
      L.k = Mat(p + "attn_k.weight", kvd, c.n_embd);
      L.v = Mat(p + "attn_v.weight", kvd, c.n_embd);
      L.o = Mat(p + "attn_output.weight", c.n_embd, qd);
      L.gate = Mat(p + "ffn_gate.weight", c.n_ff, c.n_embd);
      L.up = Mat(p + "ffn_up.weight", c.n_ff, c.n_embd);
      L.down = Mat(p + "ffn_down.weight", c.n_embd, c.n_ff);
      L.attn_norm = Norm(p + "attn_norm.weight", c.n_embd);
      L.q_norm = Norm(p + "attn_q_norm.weight", c.head_dim);
      L.k_norm = Norm(p + "attn_k_norm.weight", c.head_dim);
      L.post_attn_norm = Norm(p + "post_attention_norm.weight", c.n_embd);
      L.ffn_norm = Norm(p + "ffn_norm.weight", c.n_embd);
      L.post_ffw_norm = Norm(p + "post_ffw_norm.weight", c.n_embd);
      layers_.push_back(L);
    }
  }

  const ModelConfig& config() const override { return cfg_; }
  const GgufFile& gguf() const override { return file_; }

  std::unique_ptr<ModelState> NewState(const ModelStateOptions& o) const override {
    if (o.max_context < 1) throw Error("max_context must be >= 1, got " + std::to_string(o.max_context));
    if (o.max_step < 1) throw Error("max_step must be >= 1 (tokens per chunk), got " + std::to_string(o.max_step));
    if (!IsFloatingPoint(o.kv_dtype)) {
      throw Error(std::string("kv_dtype must be float32, float16 or bfloat16, got ") + DTypeName(o.kv_dtype));
    }
    const int shared = o.num_kv_shared_layers.value_or(cfg_.num_kv_shared_layers);
    const int max_shared = MaxKvSharedLayers(cfg_);
    if (shared < 0 || shared > max_shared) {
      std::string why = shared < 0 ? "it must be >= 0 (0 means no sharing)" : PlanError(cfg_, shared);
      throw Error("num_kv_shared_layers = " + std::to_string(shared) + " is out of range for this model: valid 0.." +
                  std::to_string(max_shared) + " (" + std::to_string(cfg_.n_layer) + " layers); " + why);
    }
    const int step = std::min(o.max_step, o.max_context);
    EnsureRope(o.max_context);
    KvCache cache(KvSpecOf(cfg_, shared), KvCacheOptions{.max_batch = 1,
                                                          .max_seq = o.max_context,
                                                          .max_step = step,
                                                          .dtype = o.kv_dtype});
    return std::make_unique<Gemma3State>(std::move(cache), o.max_context, step, o.attention_kernel);
  }

  std::span<const float> Forward(ModelState& base, std::span<const std::int32_t> tokens, ThreadPool* pool,
                                 const ForwardOptions& options) const override;

 private:
  WeightMatrix Mat(const std::string& name, std::int64_t rows, std::int64_t cols) const {
    WeightMatrix w = WeightMatrix::FromTensor(file_.Tensor(name));
    if (w.rows != rows || w.cols != cols) {
      throw Error("tensor '" + name + "' is [" + std::to_string(w.cols) + ", " + std::to_string(w.rows) +
                  "] (ne0, ne1), expected [" + std::to_string(cols) + ", " + std::to_string(rows) + "]");
    }
    return w;
  }
  const float* Norm(const std::string& name, std::int64_t n) const {
    const GgufTensor& t = file_.Tensor(name);
    if (t.type != GgmlType::kF32 || t.NumElements() != n) {
      throw Error("tensor '" + name + "' must be F32 with " + std::to_string(n) + " elements, got " +
                  GgmlTypeName(t.type) + " " + t.DimsString());
    }
    return reinterpret_cast<const float*>(t.data);
  }
  // cos/sin tables [max_pos, head_dim/2] for both bases; grown on demand.
  void EnsureRope(int max_pos) const {
    if (max_pos <= rope_len_) return;
    const int half = cfg_.head_dim / 2;
    auto fill = [&](float base, std::vector<float>& cs, std::vector<float>& sn) {
      cs.resize(static_cast<std::size_t>(max_pos) * half);
      sn.resize(cs.size());
      for (int p = 0; p < max_pos; ++p) {
        for (int i = 0; i < half; ++i) {
          const double theta = p * std::pow(static_cast<double>(base), -2.0 * i / cfg_.head_dim);
          cs[static_cast<std::size_t>(p) * half + i] = static_cast<float>(std::cos(theta));
          sn[static_cast<std::size_t>(p) * half + i] = static_cast<float>(std::sin(theta));
        }
      }
    };
    fill(cfg_.rope_base_full, cos_full_, sin_full_);
    fill(cfg_.rope_base_sliding, cos_swa_, sin_swa_);
    rope_len_ = max_pos;
  }

  // Runs one chunk (n <= max_step tokens) through every layer and commits it
  // to the cache; leaves the final residual stream in st.x ([n, n_embd]).
  void RunChunk(Gemma3State& st, std::span<const std::int32_t> tokens, ThreadPool* pool) const;

  // BuildLayerPlan's message for n shared layers ("" when the plan is valid).
  static std::string PlanError(const ModelConfig& c, int n) {
    try {
      BuildLayerPlan(KvSpecOf(c, n));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  GgufFile file_;
  ModelConfig cfg_;
  const GgufTensor* embd_ = nullptr;
  WeightMatrix embd_w_, out_w_;
  const float* out_norm_ = nullptr;
  std::vector<Layer> layers_;
  mutable int rope_len_ = 0;
  mutable std::vector<float> cos_full_, sin_full_, cos_swa_, sin_swa_;
};

void MatMulRows(const WeightMatrix& w, const float* x, std::int64_t m, float* y, ThreadPool* pool) {
  MatMul(w, MatMulParams{.x = x, .m = m, .y = y, .pool = pool});
}

std::span<const float> Gemma3::Forward(ModelState& base, std::span<const std::int32_t> tokens, ThreadPool* pool,
                                       const ForwardOptions& options) const {
  auto* state = dynamic_cast<Gemma3State*>(&base);
  if (state == nullptr) throw Error("Forward: the state was not made by this model's NewState");
  Gemma3State& st = *state;
  const ModelConfig& c = cfg_;
  const std::int64_t S = static_cast<std::int64_t>(tokens.size());
  if (S == 0) throw Error("Forward: tokens is empty");
  const std::int64_t start = st.length();
  if (start + S > st.max_context_) {
    throw Error("KV cache overflow: " + std::to_string(start) + " cached + " + std::to_string(S) +
                " new tokens exceed max_context " + std::to_string(st.max_context_) +
                "; increase max_context to at least " + std::to_string(start + S));
  }
  for (std::int32_t t : tokens) {
    if (t < 0 || t >= c.n_vocab) {
      throw Error("token id " + std::to_string(t) + " out of range [0, " + std::to_string(c.n_vocab) + ")");
    }
  }
  if (options.num_logits < 1 || options.num_logits > S) {
    throw Error("Forward: num_logits " + std::to_string(options.num_logits) + " is out of range [1, " +
                std::to_string(S) + "] (the number of tokens)");
  }
  const int E = c.n_embd;
  const std::int64_t first_logit = S - options.num_logits;  // token index of the first returned row
  st.logits.resize(static_cast<std::size_t>(options.num_logits) * static_cast<std::size_t>(c.n_vocab));
  try {
    for (std::int64_t c0 = 0; c0 < S; c0 += st.max_step_) {
      const std::int64_t n = std::min<std::int64_t>(st.max_step_, S - c0);
      RunChunk(st, tokens.subspan(static_cast<std::size_t>(c0), static_cast<std::size_t>(n)), pool);
      // Final norm and the (tied) output projection for the requested rows.
      const std::int64_t lo = std::max(c0, first_logit), hi = c0 + n;
      if (lo < hi) {
        float* rows = st.x.data() + (lo - c0) * E;
        RmsNorm(rows, hi - lo, E, out_norm_, c.rms_eps);
        MatMulRows(out_w_, rows, hi - lo, st.logits.data() + (lo - first_logit) * c.n_vocab, pool);
      }
    }
  } catch (...) {
    // Not expected once the inputs are validated; put the sequence back.
    try {
      st.cache.Rewind(0, start);
    } catch (const Error&) {
      st.cache.Reset(0);  // a ring no longer holds `start`
    }
    throw;
  }
  return st.logits;
}

void Gemma3::RunChunk(Gemma3State& st, std::span<const std::int32_t> tokens, ThreadPool* pool) const {
  const ModelConfig& c = cfg_;
  const std::int64_t S = static_cast<std::int64_t>(tokens.size());
  const int E = c.n_embd, Hd = c.head_dim, qd = c.n_head * Hd, kvd = c.n_head_kv * Hd;
  const auto sz = [](std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); };
  st.x.resize(sz(S, E));
  st.h.resize(sz(S, E));
  st.q.resize(sz(S, qd));
  st.k.resize(sz(S, kvd));
  st.v.resize(sz(S, kvd));
  st.attn.resize(sz(S, qd));
  st.o.resize(sz(S, E));
  st.g.resize(sz(S, c.n_ff));
  st.u.resize(sz(S, c.n_ff));

  // Embeddings scaled by sqrt(n_embd).
  const float emb_scale = std::sqrt(static_cast<float>(E));
  for (std::int64_t s = 0; s < S; ++s) {
    float* row = st.x.data() + s * E;
    DequantizeRow(embd_w_.type, static_cast<const std::uint8_t*>(embd_w_.data) + tokens[s] * embd_w_.row_bytes, row, E);
    for (int i = 0; i < E; ++i) row[i] *= emb_scale;
  }

  st.cache.Reserve(0, S);
  const LayerPlan& plan = st.cache.Plan();
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[l];
    const bool owns = plan.layers[static_cast<std::size_t>(l)].owns_cache;
    std::copy(st.x.begin(), st.x.end(), st.h.begin());
    RmsNorm(st.h.data(), S, E, L.attn_norm, c.rms_eps);
    MatMulRows(L.q, st.h.data(), S, st.q.data(), pool);
    RmsNorm(st.q.data(), S * c.n_head, Hd, L.q_norm, c.rms_eps);
    if (owns) {  // a KV-shared layer reads its source's K/V and computes none
      MatMulRows(L.k, st.h.data(), S, st.k.data(), pool);
      MatMulRows(L.v, st.h.data(), S, st.v.data(), pool);
      RmsNorm(st.k.data(), S * c.n_head_kv, Hd, L.k_norm, c.rms_eps);
    }

    const bool swa = c.is_sliding[l];
    const auto& cs = swa ? cos_swa_ : cos_full_;
    const auto& sn = swa ? sin_swa_ : sin_full_;
    LayerAttendArgs args;
    args.query = ConstTensorView{st.q.data(), DType::kFloat32, {1, S, qd}};
    if (owns) {
      args.key = ConstTensorView{st.k.data(), DType::kFloat32, {1, S, kvd}};
      args.value = ConstTensorView{st.v.data(), DType::kFloat32, {1, S, kvd}};
    }
    args.cos_cache = ConstTensorView{cs.data(), DType::kFloat32, {rope_len_, Hd / 2}};
    args.sin_cache = ConstTensorView{sn.data(), DType::kFloat32, {rope_len_, Hd / 2}};
    args.attrs.num_heads = c.n_head;
    args.attrs.scale = c.attn_scale;
    args.attrs.do_rotary = 1;
    args.attrs.rotary_interleaved = 0;  // NeoX half split
    args.output = TensorView{st.attn.data(), DType::kFloat32, {1, S, qd}};
    args.run.pool = pool;
    args.run.kernel = st.kernel_;
    AttendLayer(st.cache, l, args);  // window, ring / linear scatter and KV source from the cache

    MatMulRows(L.o, st.attn.data(), S, st.o.data(), pool);
    RmsNorm(st.o.data(), S, E, L.post_attn_norm, c.rms_eps);
    for (std::size_t i = 0; i < st.x.size(); ++i) st.x[i] += st.o[i];

    std::copy(st.x.begin(), st.x.end(), st.h.begin());
    RmsNorm(st.h.data(), S, E, L.ffn_norm, c.rms_eps);
    MatMulRows(L.gate, st.h.data(), S, st.g.data(), pool);
    MatMulRows(L.up, st.h.data(), S, st.u.data(), pool);
    detail::GeluTanhMul(st.g.data(), st.u.data(), st.g.data(), static_cast<std::int64_t>(st.g.size()));
    MatMulRows(L.down, st.g.data(), S, st.o.data(), pool);
    RmsNorm(st.o.data(), S, E, L.post_ffw_norm, c.rms_eps);
    for (std::size_t i = 0; i < st.x.size(); ++i) st.x[i] += st.o[i];
  }
  st.cache.Commit(0);
}

}  // namespace

std::unique_ptr<Model> LoadGemma3(GgufFile file) { return std::make_unique<Gemma3>(std::move(file)); }

}  // namespace kvshare
