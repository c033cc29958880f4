// Gemma 3 forward pass on the CPU: fp32 activations, quantized weights through
// MatMul, attention through GroupQueryAttention in static-scatter mode over a
// linear per-layer cache (sliding layers apply the window in the op).
#include "model/gemma3.h"

#include <cmath>
#include <string>
#include <vector>

#include "kvshare/attention.h"
#include "kvshare/error.h"
#include "kvshare/thread_pool.h"
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

float GeluTanh(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}

class Gemma3State final : public ModelState {
 public:
  Gemma3State(const ModelConfig& c, int max_context) : max_context_(max_context) {
    const std::size_t per_layer = static_cast<std::size_t>(c.n_head_kv) * max_context * c.head_dim;
    k_.assign(c.n_layer, std::vector<float>(per_layer, 0.0f));
    v_.assign(c.n_layer, std::vector<float>(per_layer, 0.0f));
    kv_bytes_ = 2 * static_cast<std::size_t>(c.n_layer) * per_layer * sizeof(float);
  }
  std::int64_t length() const override { return length_; }
  int max_context() const override { return max_context_; }
  std::size_t kv_bytes() const override { return kv_bytes_; }
  void Reset() override { length_ = 0; }

  int max_context_;
  std::int64_t length_ = 0;
  std::size_t kv_bytes_ = 0;
  std::vector<std::vector<float>> k_, v_;
  // Scratch.
  std::vector<float> x, h, q, k, v, attn, o, g, u, logits;
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
    EnsureRope(o.max_context);
    return std::make_unique<Gemma3State>(cfg_, o.max_context);
  }

  std::span<const float> Forward(ModelState& base, std::span<const std::int32_t> tokens,
                                 ThreadPool* pool) const override;

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

std::span<const float> Gemma3::Forward(ModelState& base, std::span<const std::int32_t> tokens,
                                       ThreadPool* pool) const {
  auto& st = static_cast<Gemma3State&>(base);
  const ModelConfig& c = cfg_;
  const std::int64_t S = static_cast<std::int64_t>(tokens.size());
  if (S == 0) throw Error("Forward: tokens is empty");
  if (st.length_ + S > st.max_context_) {
    throw Error("KV cache overflow: " + std::to_string(st.length_) + " cached + " + std::to_string(S) +
                " new tokens exceed max_context " + std::to_string(st.max_context_));
  }
  for (std::int32_t t : tokens) {
    if (t < 0 || t >= c.n_vocab) {
      throw Error("token id " + std::to_string(t) + " out of range [0, " + std::to_string(c.n_vocab) + ")");
    }
  }
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

  const std::int64_t start = st.length_;
  std::int64_t write_index = start, nonpad = start + S;
  const int C = st.max_context_;
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[l];
    std::copy(st.x.begin(), st.x.end(), st.h.begin());
    RmsNorm(st.h.data(), S, E, L.attn_norm, c.rms_eps);
    MatMulRows(L.q, st.h.data(), S, st.q.data(), pool);
    MatMulRows(L.k, st.h.data(), S, st.k.data(), pool);
    MatMulRows(L.v, st.h.data(), S, st.v.data(), pool);
    RmsNorm(st.q.data(), S * c.n_head, Hd, L.q_norm, c.rms_eps);
    RmsNorm(st.k.data(), S * c.n_head_kv, Hd, L.k_norm, c.rms_eps);

    const bool swa = c.is_sliding[l];
    GqaAttributes attrs;
    attrs.num_heads = c.n_head;
    attrs.kv_num_heads = c.n_head_kv;
    attrs.scale = c.attn_scale;
    attrs.local_window_size = swa ? c.sliding_window : -1;
    attrs.do_rotary = 1;
    attrs.rotary_interleaved = 0;
    attrs.scatter_mode = GqaAttributes::ScatterMode::kLinear;
    const auto& cs = swa ? cos_swa_ : cos_full_;
    const auto& sn = swa ? sin_swa_ : sin_full_;
    GqaInputs in;
    in.query = {st.q.data(), DType::kFloat32, {1, S, qd}};
    in.key = ConstTensorView{st.k.data(), DType::kFloat32, {1, S, kvd}};
    in.value = ConstTensorView{st.v.data(), DType::kFloat32, {1, S, kvd}};
    in.cos_cache = ConstTensorView{cs.data(), DType::kFloat32, {rope_len_, Hd / 2}};
    in.sin_cache = ConstTensorView{sn.data(), DType::kFloat32, {rope_len_, Hd / 2}};
    in.write_indices = ConstTensorView{&write_index, DType::kInt64, {1}};
    in.nonpad_kv_seqlen = ConstTensorView{&nonpad, DType::kInt64, {1}};
    GqaOutputs out;
    out.output = {st.attn.data(), DType::kFloat32, {1, S, qd}};
    out.present_key = TensorView{st.k_[l].data(), DType::kFloat32, {1, c.n_head_kv, C, Hd}};
    out.present_value = TensorView{st.v_[l].data(), DType::kFloat32, {1, c.n_head_kv, C, Hd}};
    GroupQueryAttention(attrs, in, out, {.pool = pool});

    MatMulRows(L.o, st.attn.data(), S, st.o.data(), pool);
    RmsNorm(st.o.data(), S, E, L.post_attn_norm, c.rms_eps);
    for (std::size_t i = 0; i < st.x.size(); ++i) st.x[i] += st.o[i];

    std::copy(st.x.begin(), st.x.end(), st.h.begin());
    RmsNorm(st.h.data(), S, E, L.ffn_norm, c.rms_eps);
    MatMulRows(L.gate, st.h.data(), S, st.g.data(), pool);
    MatMulRows(L.up, st.h.data(), S, st.u.data(), pool);
    for (std::size_t i = 0; i < st.g.size(); ++i) st.g[i] = GeluTanh(st.g[i]) * st.u[i];
    MatMulRows(L.down, st.g.data(), S, st.o.data(), pool);
    RmsNorm(st.o.data(), S, E, L.post_ffw_norm, c.rms_eps);
    for (std::size_t i = 0; i < st.x.size(); ++i) st.x[i] += st.o[i];
  }
  st.length_ += S;

  // Last token only: final norm and the (tied) output projection.
  float* last = st.x.data() + (S - 1) * E;
  RmsNorm(last, 1, E, out_norm_, c.rms_eps);
  st.logits.resize(static_cast<std::size_t>(c.n_vocab));
  MatMulRows(out_w_, last, 1, st.logits.data(), pool);
  return st.logits;
}

}  // namespace

std::unique_ptr<Model> LoadGemma3(GgufFile file) { return std::make_unique<Gemma3>(std::move(file)); }

}  // namespace kvshare
