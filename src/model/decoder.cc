// Pieces shared by the decoder forward passes (decoder.h).
#include "model/decoder.h"

#include <algorithm>
#include <cmath>

#include "common/str.h"
#include "kvshare/attention/gqa.h"
#include "kvshare/common/error.h"
#include "model/activations.h"
#include "model/batch_steps.h"

namespace kvshare::detail {

void RmsNorm(float* x, std::int64_t rows, int n, const float* w, float eps, ThreadPool* pool) {
  const auto norm_rows = [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* p = x + r * n;
      const double ss = SumOfSquares(p, n);
      const float inv = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
      if (w != nullptr) {
        for (int i = 0; i < n; ++i) p[i] = p[i] * inv * w[i];
      } else {
        for (int i = 0; i < n; ++i) p[i] = p[i] * inv;
      }
    }
  };
  // Rows are independent: ranges of rows on the pool (prefill, batched
  // steps); one row's arithmetic does not change.
  ParallelForRanges(pool, rows, RowGrain(pool, rows, n), norm_rows);
}

void MatMulRows(const WeightMatrix& w, const float* x, std::int64_t m, float* y, ThreadPool* pool) {
  MatMul(w, MatMulParams{.x = x, .m = m, .y = y, .pool = pool});
}

void MatMulRowsMany(std::span<const MatMulTarget> targets, const float* x, std::int64_t m, ThreadPool* pool) {
  MatMulMany(MatMulManyParams{.x = x, .m = m, .targets = targets, .pool = pool});
}

namespace {
// BuildLayerPlan's message for n shared layers of config ("" when valid).
std::string PlanErrorOf(const ModelConfig& config, int n) {
  try {
    BuildLayerPlan(KvSpecOf(config, n));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

// ---- RoPE ----

RopeTable BuildRopeTable(const RopeFamily& f, std::int64_t max_pos) {
  RopeTable t;
  t.max_pos = max_pos;
  t.half = f.rotary_dim / 2;
  t.cos.resize(static_cast<std::size_t>(max_pos * t.half));
  t.sin.resize(t.cos.size());
  for (int i = 0; i < t.half; ++i) {
    const double factor = f.factors.empty() ? 1.0 : f.factors[static_cast<std::size_t>(i)];
    const bool still = factor >= 1e29;
    const double freq = std::pow(static_cast<double>(f.base), -2.0 * i / f.rotary_dim) / factor;
    for (std::int64_t p = 0; p < max_pos; ++p) {
      const double theta = static_cast<double>(p) * freq;
      const std::size_t at = static_cast<std::size_t>(p * t.half + i);
      t.cos[at] = still ? 1.0f : static_cast<float>(std::cos(theta));
      t.sin[at] = still ? 0.0f : static_cast<float>(std::sin(theta));
    }
  }
  return t;
}

// ---- State and layer pieces ----

DecoderState::DecoderState(KvCache c, const ModelStateOptions& o, std::shared_ptr<const RopeSet> r)
    : cache(std::move(c)),
      max_context_(o.max_context),
      max_step_(static_cast<int>(cache.Options().max_step)),
      kernel_(o.attention_kernel),
      precision_(o.attention_precision),
      prefill_shortcut_(o.prefill_shortcut),
      kv_bytes_(cache.Memory().total_bytes),
      rope(std::move(r)) {}

std::optional<ConstTensorView> BidirectionalSpansArg(DecoderState& st, int layer, std::span<const QuerySpan> spans,
                                                     int B) {
  if (st.bidirectional_layer.empty() || !st.bidirectional_layer[static_cast<std::size_t>(layer)]) return std::nullopt;
  std::size_t K = 0;
  for (const QuerySpan& sp : spans) K = std::max(K, st.step_spans[static_cast<std::size_t>(sp.row)].size() / 2);
  if (K == 0) return std::nullopt;
  st.spans_arg.assign(static_cast<std::size_t>(B) * K * 2, 0);
  for (const QuerySpan& sp : spans) {
    const std::vector<std::int64_t>& v = st.step_spans[static_cast<std::size_t>(sp.row)];
    std::copy(v.begin(), v.end(), st.spans_arg.begin() + static_cast<std::ptrdiff_t>(sp.row * K * 2));
  }
  return ConstTensorView{st.spans_arg.data(), DType::kInt64, {B, static_cast<std::int64_t>(K), 2}};
}

AttentionPacking PlanAttention(std::span<const QuerySpan> spans) {
  AttentionPacking p;
  if (spans.size() == 1 && spans[0].row == 0) {  // one sequence: in place
    p.in_place = true;
    p.S = spans[0].n;
    p.flat_rows = spans[0].begin + spans[0].n;
    if (spans[0].skip > 0) p.query_offsets.assign(1, spans[0].skip);
    return p;
  }
  bool any_skip = false;
  for (const QuerySpan& sp : spans) {
    p.B = std::max(p.B, sp.row + 1);
    p.S = std::max(p.S, sp.n);
    p.flat_rows = std::max(p.flat_rows, sp.begin + sp.n);
    any_skip = any_skip || sp.skip > 0;
  }
  p.packed_row.assign(static_cast<std::size_t>(p.flat_rows), -1);
  for (const QuerySpan& sp : spans) {
    for (std::int64_t j = 0; j < sp.n; ++j) p.packed_row[static_cast<std::size_t>(sp.begin + j)] = sp.row * p.S + j;
  }
  if (any_skip) {
    p.query_offsets.assign(static_cast<std::size_t>(p.B), 0);
    for (const QuerySpan& sp : spans) p.query_offsets[static_cast<std::size_t>(sp.row)] = sp.skip;
  }
  return p;
}

void Attend(DecoderState& st, int layer, const AttentionCall& c, std::span<const QuerySpan> spans, ThreadPool* pool) {
  const std::int64_t qd = static_cast<std::int64_t>(c.n_head) * c.head_dim;
  const bool owns = c.k != nullptr;
  LayerAttendArgs args;
  args.cos_cache = ConstTensorView{c.rope->cos.data(), DType::kFloat32, {c.rope->max_pos, c.rope->half}};
  args.sin_cache = ConstTensorView{c.rope->sin.data(), DType::kFloat32, {c.rope->max_pos, c.rope->half}};
  args.attrs.num_heads = c.n_head;
  args.attrs.scale = c.scale;
  args.attrs.causal = st.causal ? 1 : 0;
  args.attrs.do_rotary = 1;
  args.attrs.rotary_interleaved = 0;  // NeoX half split
  args.run.pool = pool;
  args.run.kernel = st.kernel_;
  args.run.matmul_precision = st.precision_;
  const AttentionPacking pack = PlanAttention(spans);
  st.query_offsets = pack.query_offsets;
  args.query_offsets = st.query_offsets;
  if (pack.in_place) {
    const QuerySpan& sp = spans[0];
    const std::int64_t S = sp.n;
    args.query = ConstTensorView{c.q + sp.begin * qd, DType::kFloat32, {1, S, qd}};
    if (owns) {
      args.key = ConstTensorView{c.k + sp.begin * c.kv_dim, DType::kFloat32, {1, S, c.kv_dim}};
      args.value = ConstTensorView{c.v + sp.begin * c.kv_dim, DType::kFloat32, {1, S, c.kv_dim}};
    }
    args.output = TensorView{c.out + sp.begin * qd, DType::kFloat32, {1, S, qd}};
    args.bidirectional_spans = BidirectionalSpansArg(st, layer, spans, 1);
    AttendLayer(st.cache, layer, args);
    return;
  }
  // Several rows: pack them into (B, S_max, ...), rows without tokens padded.
  const int B = pack.B;
  const std::int64_t S = pack.S;
  // Padding (rows past their n tokens) is never read: the op skips padding
  // queries and writes no padding K/V, and it writes every output row.
  const auto fill = [&](std::vector<float>& pad, const float* src, std::int64_t width) {
    if (pad.size() < static_cast<std::size_t>(B * S * width)) pad.resize(static_cast<std::size_t>(B * S * width));
    if (src == nullptr) return;
    for (const QuerySpan& sp : spans) {
      std::copy(src + sp.begin * width, src + (sp.begin + sp.n) * width, pad.begin() + sp.row * S * width);
    }
  };
  fill(st.pad_q, c.q, qd);
  fill(st.pad_out, nullptr, qd);
  args.query = ConstTensorView{st.pad_q.data(), DType::kFloat32, {B, S, qd}};
  args.output = TensorView{st.pad_out.data(), DType::kFloat32, {B, S, qd}};
  if (owns) {
    fill(st.pad_k, c.k, c.kv_dim);
    fill(st.pad_v, c.v, c.kv_dim);
    args.key = ConstTensorView{st.pad_k.data(), DType::kFloat32, {B, S, c.kv_dim}};
    args.value = ConstTensorView{st.pad_v.data(), DType::kFloat32, {B, S, c.kv_dim}};
  }
  args.bidirectional_spans = BidirectionalSpansArg(st, layer, spans, B);
  AttendLayer(st.cache, layer, args);
  for (const QuerySpan& sp : spans) {
    const auto from = st.pad_out.begin() + sp.row * S * qd;
    std::copy(from, from + sp.n * qd, c.out + sp.begin * qd);
  }
}

void GegluMlp(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down, const float* x,
              std::int64_t S, float* out, std::vector<float>& g, std::vector<float>& u, ThreadPool* pool,
              float topk_std_multiplier) {
  const std::size_t n = static_cast<std::size_t>(S * gate.rows);
  if (g.size() < n) g.resize(n);
  if (u.size() < n) u.resize(n);
  const MatMulTarget gate_up[] = {{.w = gate, .y = g.data()}, {.w = up, .y = u.data()}};
  MatMulRowsMany(gate_up, x, S, pool);
  if (std::isfinite(topk_std_multiplier)) {
    const std::int64_t F = gate.rows;
    ParallelForRanges(pool, S, RowGrain(pool, S, static_cast<int>(F)), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        float* row = g.data() + r * F;
        double sum = 0;
        for (std::int64_t i = 0; i < F; ++i) sum += row[i];
        const double mean = sum / static_cast<double>(F);
        double var = 0;
        for (std::int64_t i = 0; i < F; ++i) var += (row[i] - mean) * (row[i] - mean);
        const float cutoff = static_cast<float>(mean) +
                             static_cast<float>(std::sqrt(var / static_cast<double>(F))) * topk_std_multiplier;
        for (std::int64_t i = 0; i < F; ++i) row[i] = std::max(0.0f, row[i] - cutoff);
      }
    });
  }
  // Elementwise: ranges of kParallelGrainValues (a multiple of every vector
  // length, so each element takes the same path as in one call).
  ParallelForRanges(pool, static_cast<std::int64_t>(n), kParallelGrainValues, [&](std::int64_t i0, std::int64_t i1) {
    GeluTanhMul(g.data() + i0, u.data() + i0, g.data() + i0, i1 - i0);
  });
  MatMulRows(down, g.data(), S, out, pool);
}

void EmbedRows(const WeightMatrix& table, std::span<const std::int32_t> tokens, float scale, float* out) {
  const std::int64_t E = table.cols;
  for (std::size_t s = 0; s < tokens.size(); ++s) {
    float* row = out + static_cast<std::int64_t>(s) * E;
    DequantizeRow(table.type, static_cast<const std::uint8_t*>(table.data) + tokens[s] * table.row_bytes, row, E);
    for (std::int64_t i = 0; i < E; ++i) row[i] *= scale;
  }
}

// ---- DecoderModel ----

void DecoderModel::EmbedTokens(std::span<const std::int32_t> tokens, float* out) const {
  const std::shared_ptr<const std::vector<HardTokenRows>> hard = hard_.load();
  EmbedWith(hard.get(), tokens, out);
}

std::string DecoderModel::PlanError(int n) const { return PlanErrorOf(cfg_, n); }

void DecoderModel::ValidateSharing(const std::string& key) const {
  const int n = cfg_.num_kv_shared_layers;
  if (n == 0) return;
  if (n < 0 || n >= cfg_.n_layer) {
    throw Error(
        Str(key, " = ", n, " is out of range for ", cfg_.n_layer, " layers (valid: 0..", cfg_.n_layer - 1, ")"));
  }
  const std::string why = PlanError(n);
  if (!why.empty()) {
    throw Error(Str(key, " = ", n, " is not a valid layer plan for this model (valid: 0..", MaxKvSharedLayers(cfg_),
                    "): ", why));
  }
}

void DecoderModel::WarnIfLlamaCppSharesDifferently() {
  const int n = cfg_.num_kv_shared_layers;
  if (n == 0) return;
  const LayerPlan plan = BuildLayerPlan(KvSpecOf(cfg_, n));
  const int n_kv = cfg_.n_layer - n;
  std::string diffs;
  for (int il = n_kv; il < cfg_.n_layer; ++il) {
    const int llama_src = n_kv - (cfg_.is_sliding[static_cast<std::size_t>(il)] ? 2 : 1);
    const int src = plan.layers[static_cast<std::size_t>(il)].source_layer;
    if (llama_src != src)
      diffs += Str(diffs.empty() ? "" : ", ", "layer ", il, " reads ", src, " (llama.cpp: ", llama_src, ")");
  }
  if (!diffs.empty()) {
    warnings_.push_back(
        Str("KV sharing: this file's layer pattern makes llama.cpp's fixed rule (n_kv - 2 for sliding, ",
            "n_kv - 1 for full layers) pick other source layers than HF's rule (the last owning layer ",
            "of the same type), which kvshare follows: ", diffs,
            ". llama.cpp computes this model differently from HF transformers."));
  }
}

void DecoderModel::RequireKvWeights(const LayerPlan& plan, const std::function<bool(int)>& has_kv) const {
  for (int l = 0; l < plan.first_shared; ++l) {
    if (!has_kv(l)) {
      throw Error(Str("num_kv_shared_layers = ", cfg_.n_layer - plan.first_shared, " makes layer ", l,
                      " compute its own K/V, but the file has no blk.", l, ".attn_k.weight (the file shares that ",
                      "layer's KV); use at least ", cfg_.n_layer - l,
                      " shared layers (the file's own: ", cfg_.num_kv_shared_layers, ")"));
    }
  }
}

std::shared_ptr<const RopeSet> DecoderModel::RopeFor(std::int64_t max_pos) const {
  std::lock_guard<std::mutex> lock(rope_mu_);
  if (!rope_ || rope_->max_pos < max_pos) {
    auto set = std::make_shared<RopeSet>();
    set->max_pos = max_pos;
    for (const RopeFamily& f : rope_families_) set->tables.push_back(BuildRopeTable(f, max_pos));
    rope_ = std::move(set);
  }
  return rope_;
}

std::vector<QuerySpan> DecoderModel::FullSpans(const Step& step) {
  std::vector<QuerySpan> spans;
  for (const StepRow& r : step.rows) spans.push_back({.row = r.row, .begin = r.begin, .n = r.n, .skip = 0});
  return spans;
}

std::int64_t DecoderModel::KeptRows(const Step& step) {
  std::int64_t kept = 0;
  for (const StepRow& r : step.rows) kept += r.keep;
  return kept;
}

int DecoderModel::CutAfterAttention(const DecoderState& st, const LayerPlan& plan, std::int64_t kept,
                                     std::int64_t T) {
  return st.prefill_shortcut_ && kept < T ? plan.first_shared - 1 : -1;
}

void DecoderModel::PackKeptRows(const Step& step, std::span<std::vector<float>> buffers, int width,
                                std::vector<QuerySpan>* spans, std::vector<std::int64_t>* src) {
  const std::int64_t E = width;
  std::int64_t at = 0;
  for (std::size_t i = 0; i < step.rows.size(); ++i) {
    const StepRow& r = step.rows[i];
    const std::int64_t from = r.begin + r.n - r.keep;
    for (std::vector<float>& v : buffers)
      std::copy(v.begin() + from * E, v.begin() + (from + r.keep) * E, v.begin() + at * E);
    if (spans != nullptr) (*spans)[i] = QuerySpan{.row = r.row, .begin = at, .n = r.keep, .skip = r.n - r.keep};
    if (src != nullptr) {
      for (std::int64_t j = 0; j < r.keep; ++j) (*src)[static_cast<std::size_t>(at + j)] = from + j;
    }
    at += r.keep;
  }
}

KvCache NewStateCache(const ModelConfig& config, const ModelStateOptions& o, Device device) {
  if (o.max_context < 1) throw Error(Str("max_context must be >= 1, got ", o.max_context));
  if (o.max_step < 1) throw Error(Str("max_step must be >= 1 (tokens per chunk), got ", o.max_step));
  if (o.max_batch < 1) throw Error(Str("max_batch must be >= 1 (rows), got ", o.max_batch));
  if (!IsKvCacheDType(o.kv_dtype)) {
    throw Error(Str("kv_dtype must be float32, float16, bfloat16 or q8_0, got ", DTypeName(o.kv_dtype)));
  }
  const int shared = o.num_kv_shared_layers.value_or(config.num_kv_shared_layers);
  const int max_shared = MaxKvSharedLayers(config);
  if (shared < 0 || shared > max_shared) {
    const std::string why = shared < 0 ? "it must be >= 0 (0 means no sharing)" : PlanErrorOf(config, shared);
    throw Error(Str("num_kv_shared_layers = ", shared, " is out of range for this model: valid 0..", max_shared, " (",
                    config.n_layer, " layers); ", why));
  }
  const int step = std::min(o.max_step, o.max_context);
  return KvCache(KvSpecOf(config, shared), KvCacheOptions{.max_batch = o.max_batch,
                                                          .max_seq = o.max_context,
                                                          .max_step = step,
                                                          .dtype = o.kv_dtype,
                                                          .exact_rewind = o.exact_rewind,
                                                          .device = device});
}

void CheckBatchEntry(const ModelState& st, const ModelConfig& config, const BatchEntry& e, std::size_t entries) {
  if (e.row < 0 || e.row >= st.max_batch()) {
    throw Error(Str("ForwardBatch: row ", e.row, " is out of range [0, max_batch = ", st.max_batch(), ")"));
  }
  const std::int64_t S = static_cast<std::int64_t>(e.tokens.size());
  if (S == 0) throw Error(Str("Forward: row ", e.row, ": tokens is empty"));
  const std::int64_t len = st.length(e.row);
  if (len + S > st.max_context()) {
    throw Error(Str("KV cache overflow: ", len, " cached + ", S, " new tokens exceed max_context ", st.max_context(),
                    entries > 1 ? Str(" in row ", e.row) : std::string(), "; increase max_context to at least ",
                    len + S));
  }
  for (std::int32_t t : e.tokens) {
    if (t < 0 || t >= config.n_vocab) throw Error(Str("token id ", t, " out of range [0, ", config.n_vocab, ")"));
  }
  if (e.num_logits < 1 || e.num_logits > S) {
    throw Error(Str("Forward: num_logits ", e.num_logits, " is out of range [1, ", S, "] (the number of tokens)"));
  }
}

void RequireGenerates(const ModelConfig& c) {
  if (c.causal) return;
  throw Error("model " + c.architecture +
              " is an embedding model (bidirectional attention): it computes embeddings (Model::Embed, "
              "/v1/embeddings), not next-token logits");
}

std::unique_ptr<ModelState> DecoderModel::NewState(const ModelStateOptions& o) const {
  // The cache first: it checks the options, which the RoPE table's size trusts.
  KvCache cache = NewStateCache(cfg_, o, Device::kCpu);
  std::unique_ptr<DecoderState> st = MakeState(std::move(cache), o, RopeFor(o.max_context));
  st->bidirectional_layer = BidirectionalLayers(cfg_, o.image_attention.value_or(cfg_.image_attention));
  st->step_spans.resize(static_cast<std::size_t>(st->max_batch()));
  st->causal = cfg_.causal;
  return st;
}

void DecoderModel::EmbedStep(const Step& step, float* out, std::vector<std::int32_t>* ple_ids) const {
  const std::shared_ptr<const std::vector<HardTokenRows>> hard = hard_.load();
  EmbedWith(nullptr, step.tokens, out);
  const StepInputRows given = GivenStepRows(step, hard.get(), cfg_.n_embd, ple_ids);
  const std::int64_t E = cfg_.n_embd;
  for (std::size_t i = 0; i < given.at.size(); ++i) std::copy(given.rows[i], given.rows[i] + E, out + given.at[i] * E);
}

std::span<const float> DecoderModel::Forward(ModelState& state, std::span<const std::int32_t> tokens, ThreadPool* pool,
                                             const ForwardOptions& options) const {
  if (tokens.empty()) throw Error("Forward: tokens is empty");
  const BatchEntry one{.row = 0, .tokens = tokens, .num_logits = options.num_logits, .embeddings = options.embeddings};
  return ForwardBatch(state, std::span<const BatchEntry>(&one, 1), pool);
}

std::span<const float> DecoderModel::ForwardBatch(ModelState& base, std::span<const BatchEntry> entries,
                                                  ThreadPool* pool) const {
  auto* state = dynamic_cast<DecoderState*>(&base);
  if (state == nullptr) throw Error("Forward: the state was not made by this model's NewState");
  DecoderState& st = *state;
  const ModelConfig& c = cfg_;
  if (entries.empty()) throw Error("ForwardBatch: no entries");
  RequireGenerates(c);
  const bool bidi =
      std::find(st.bidirectional_layer.begin(), st.bidirectional_layer.end(), true) != st.bidirectional_layer.end();
  BatchSteps steps(st, c, entries, st.max_step_, bidi);
  const int E = c.n_embd;
  const std::int64_t V = c.n_vocab;
  st.logits.resize(static_cast<std::size_t>(steps.total_logits() * V));
  st.hidden_rows.resize(static_cast<std::size_t>(steps.total_logits() * E));
  try {
    Step step;
    while (steps.Next(step, st.step_spans)) {
      const std::int64_t kept = KeptRows(step);
      float* rows = RunStep(st, step, pool);
      if (kept == 0) continue;
      // Final norm and the (tied) output projection of every kept row at once.
      RmsNorm(rows, kept, E, out_norm_, c.rms_eps);
      // Where each step row's kept logits go in st.logits (entry order). When
      // each follows the one before, as in a decode step or a one-entry
      // prefill, the head writes there directly; otherwise through head_out.
      const std::span<const std::int64_t> dest = steps.dest();
      const bool direct = steps.contiguous();
      std::int64_t at = 0;
      for (std::size_t r = 0; r < step.rows.size(); ++r) {
        const std::int64_t keep = step.rows[r].keep;
        std::copy(rows + at * E, rows + (at + keep) * E, st.hidden_rows.begin() + dest[r] * E);
        at += keep;
      }
      float* out = nullptr;
      if (direct) {
        out = st.logits.data() + dest[0] * V;
      } else {
        st.head_out.resize(static_cast<std::size_t>(kept * V));
        out = st.head_out.data();
      }
      MatMulRows(out_w_, rows, kept, out, pool);
      if (final_softcap_ > 0) Softcap(out, kept * V, final_softcap_);
      if (!direct) {
        std::int64_t at = 0;
        for (std::size_t r = 0; r < step.rows.size(); ++r) {
          const std::int64_t keep = step.rows[r].keep;
          std::copy(out + at * V, out + (at + keep) * V, st.logits.begin() + dest[r] * V);
          at += keep;
        }
      }
    }
  } catch (...) {
    // Not expected once the inputs are validated; put the sequences back.
    steps.Restore(st);
    throw;
  }
  return st.logits;
}

}  // namespace kvshare::detail
