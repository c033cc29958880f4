// What the Gemma 3 and Gemma 4 forward passes share: RMSNorm, tensor lookup with
// shape checks, NeoX RoPE tables, the attention call on the state's KvCache,
// the GeGLU MLP, embedding rows, and DecoderModel — the Model that validates a
// Forward call, runs it in chunks (RunChunk, per architecture), rolls the cache
// back on failure and produces the logits (final norm, LM head, softcap).
// Internal to src/model.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvshare/cache/kv_cache.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/model/model.h"
#include "quant/quant.h"
#include "quant/tensor_lookup.h"

namespace kvshare::detail {

// y = x / sqrt(mean(x^2) + eps) * w over each of `rows` rows of n, in place;
// w == nullptr: the scale-free norm (Gemma 4's V norm, its router input).
// Sum of squares in double.
// Rows to the pool in ranges of RowGrain(pool, rows, n) rows.
void RmsNorm(float* x, std::int64_t rows, int n, const float* w, float eps, ThreadPool* pool = nullptr);

// Y[m, w.rows] = X[m, w.cols] W^T (MatMul with default options).
void MatMulRows(const WeightMatrix& w, const float* x, std::int64_t m, float* y, ThreadPool* pool);
// The same for several weights that share X (MatMulMany: one pool job, X
// quantized once); each y as MatMulRows gives it, bit for bit.
void MatMulRowsMany(std::span<const MatMulTarget> targets, const float* x, std::int64_t m, ThreadPool* pool);

// NeoX RoPE cos/sin tables [max_pos, R/2] for one layer family: pair i of the
// first R dims (i, i + R/2) turns by theta_i = p * base^(-2i/R) / factor_i.
// factors empty: all 1. A factor >= 1e29 marks a pair that does not turn (the
// GGUF converter's `rope_freqs` encoding of Gemma 4's proportional RoPE, whose
// HF frequency is exactly 0): cos = 1, sin = 0 exactly. Computed in double.
struct RopeFamily {
  float base = 10000.f;
  int rotary_dim = 0;          // R: dims rotated (<= H, R/2 a multiple of 8)
  std::vector<float> factors;  // [R/2] or empty
};
struct RopeTable {
  std::int64_t max_pos = 0;
  int half = 0;  // R/2
  std::vector<float> cos, sin;
};
RopeTable BuildRopeTable(const RopeFamily& family, std::int64_t max_pos);

// Tables for a set of families at one max_pos; immutable once built.
struct RopeSet {
  std::int64_t max_pos = 0;
  std::vector<RopeTable> tables;  // one per family
};

// The KV caches of up to max_batch sequences (a KvCache row each), their RoPE
// tables, the logits of the last Forward, and the scratch of packed attention
// inputs. Architectures derive their scratch from it.
class DecoderState : public ModelState {
 public:
  DecoderState(KvCache cache, const ModelStateOptions& options, std::shared_ptr<const RopeSet> rope);
  using ModelState::length;
  using ModelState::Reset;
  int max_batch() const override { return cache.Options().max_batch; }
  std::int64_t length(int row) const override { return cache.Length(row); }
  int max_context() const override { return max_context_; }
  std::size_t kv_bytes() const override { return kv_bytes_; }
  const KvCache& kv_cache() const override { return cache; }
  void Reset(int row) override { cache.Reset(row); }
  void Rewind(int row, std::int64_t length) override { cache.Rewind(row, length); }
  bool CopyRow(int src, int dst) override {
    if (cache.Options().device != Device::kCpu) return false;
    cache.CopyRow(src, dst);
    return true;
  }

  KvCache cache;
  int max_context_;
  int max_step_;  // S_max: tokens per chunk
  GqaKernel kernel_;
  GqaMatMulPrecision precision_;  // ModelStateOptions::attention_precision
  bool prefill_shortcut_;  // ModelStateOptions::prefill_shortcut
  std::size_t kv_bytes_;
  std::shared_ptr<const RopeSet> rope;
  std::span<const float> hidden() const override { return hidden_rows; }
  std::vector<float> logits;                        // [sum num_logits, n_vocab]
  std::vector<float> hidden_rows;                   // [sum num_logits, n_embd]: ModelState::hidden()
  std::vector<float> head_out;                      // [rows, n_vocab] LM head output of a multi-entry step
  std::vector<float> pad_q, pad_k, pad_v, pad_out;  // [B, S_max, ...] packed attention inputs
  std::vector<std::int64_t> query_offsets;
  // Layers where an image's tokens see each other ([n_layer]; all false for
  // a causal variant), and the current step's bidirectional spans per cache
  // row ([max_batch] lists of absolute [start, end)); Attend passes them to
  // the op on those layers.
  std::vector<bool> bidirectional_layer;
  std::vector<std::vector<std::int64_t>> step_spans;
  std::vector<std::int64_t> spans_arg;  // [B, K, 2] scratch of the op's input
  // Tests and debugging: when set, called after every layer of a step with
  // the residual rows that ran ([rows, n_embd] host memory, Gemma 3n: its
  // active AltUp stream; the step's tokens, after the prefill cut only the
  // kept ones in PackKeptRows order). The GPU models (src/cuda_model/) copy
  // their rows back for it, so a GPU step can be compared with the CPU's
  // layer by layer. Unset: no cost.
  std::function<void(int layer, std::span<const float> x)> layer_probe;
  // ModelConfig::causal: false runs every layer bidirectional (the op's
  // causal = 0, a sliding layer's window symmetric); needs linear buffers
  // (exact_rewind) and each sequence in one step (Model::Embed does both).
  bool causal = true;
};

// One step of a batched forward: tokens of several cache rows, flat.
struct StepRow {
  int row = 0;             // cache row
  std::int64_t begin = 0;  // its first token's index in Step::tokens
  std::int64_t n = 0;      // its tokens in this step (its reservation)
  std::int64_t keep = 0;   // the last `keep` of them are read at the output (logits)
};
// Caller-given input rows of a step (EmbeddingSpan): step tokens
// [at, at + count) take `rows` instead of their token embeddings.
struct StepEmbedding {
  std::int64_t at = 0;
  std::int64_t count = 0;
  const float* rows = nullptr;  // [count, n_embd]
};
struct Step {
  std::vector<std::int32_t> tokens;  // [T] row by row (0 at embedding rows)
  std::vector<StepRow> rows;
  std::vector<StepEmbedding> embeddings;
};

// A row's query rows in the flat activations of one attention layer: n rows
// from `begin`, the row's reserved tokens after the first `skip` (skip > 0 only
// on KV-shared layers, LayerAttendArgs::query_offsets).
struct QuerySpan {
  int row = 0;
  std::int64_t begin = 0;
  std::int64_t n = 0;
  std::int64_t skip = 0;
};

// One attention layer on the state's cache (AttendLayer: static scatter mode,
// window / ring / KV source from the layer plan) for the rows of `spans`. q:
// [T, n_head * H] flat rows; k, v: [T, N_kv * H] for owning layers, null for
// KV-shared ones; out: [T, n_head * H]. A single span of row 0 runs in place;
// otherwise rows are packed into (B, S_max, ...) with B = 1 + the largest row.
struct AttentionCall {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  int n_head = 0;
  int head_dim = 0;
  int kv_dim = 0;  // N_kv * H
  const RopeTable* rope = nullptr;
  float scale = 1.0f;
};
void Attend(DecoderState& st, int layer, const AttentionCall& call, std::span<const QuerySpan> spans, ThreadPool* pool);

// The op's bidirectional_spans [B, K, 2] on `layer` for the rows of `spans`
// (st.step_spans of each; rows without spans padded with (0, 0); B: the
// op's rows, 1 in place), in st.spans_arg (host memory, as the op reads it
// on either device); nullopt when the layer is causal or no row has a span.
std::optional<ConstTensorView> BidirectionalSpansArg(DecoderState& st, int layer, std::span<const QuerySpan> spans,
                                                     int B);

// How Attend lays the query rows of `spans` out for the op (the CPU's Attend
// and the GPU models' alike). in_place: one span of row 0, whose flat rows
// [begin, begin + n) are the op's (1, n, ...) as they are. Otherwise packed
// into (B, S, ...), B = 1 + the largest row, S = the longest span (>= 1):
// flat row spans[i].begin + j goes to packed row spans[i].row * S + j
// (packed_row[flat], -1 for a flat row no span covers; flat_rows = the end of
// the last span). query_offsets: the op's (LayerAttendArgs::query_offsets),
// one per op row (1 in place, B packed) when a span skips rows, else empty.
struct AttentionPacking {
  bool in_place = false;
  int B = 1;
  std::int64_t S = 1;
  std::int64_t flat_rows = 0;
  std::vector<std::int64_t> packed_row;     // [flat_rows] (empty in place)
  std::vector<std::int64_t> query_offsets;  // [1] or [B], or empty
};
AttentionPacking PlanAttention(std::span<const QuerySpan> spans);

// out[S, E] = down(gelu_tanh(gate x) * up x), x: [S, E]; g, u: scratch grown to
// [S, n_ff]. out may not alias x. With a finite topk_std_multiplier k (Gemma
// 3n's activation sparsity, HF Gemma3nTextMLP._gaussian_topk), each row of
// gate x is first replaced by relu(g - (mean(g) + k * std(g))) (population
// std over the row; k = Phi^-1(sparsity), GGUF activation_sparsity_scale).
void GegluMlp(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down, const float* x,
              std::int64_t S, float* out, std::vector<float>& g, std::vector<float>& u, ThreadPool* pool,
              float topk_std_multiplier = -INFINITY);

// out[s, :] = row tokens[s] of `table` (dequantized) * scale.
void EmbedRows(const WeightMatrix& table, std::span<const std::int32_t> tokens, float scale, float* out);

// The row of `id` in the hard-token ranges (Model::SetHardTokenRows; sorted,
// disjoint, rows [n, n_embd]), null when no range holds it.
const float* HardRow(const std::vector<HardTokenRows>& hard, std::int32_t id, int n_embd);

// The rows of a step's input that are not its scaled token-table rows, as
// DecoderModel::EmbedStep writes them (and the GPU models upload them): an
// installed hard-token row (`hard`, may be null; HardRow) for each id in its
// ranges, then the caller-given rows (Step::embeddings) over their tokens'.
// at: step token indices, ascending, each once; rows[i]: the host row
// [n_embd] of token at[i] (into `hard` or the caller's rows: valid while
// they are). ple_ids (when given): step.tokens with the ids of the hard
// ranges replaced by 0, the per-layer inputs' ids (Gemma 3n; a span's tokens
// are 0 already, AddStepInputs).
struct StepInputRows {
  std::vector<std::int64_t> at;
  std::vector<const float*> rows;
};
StepInputRows GivenStepRows(const Step& step, const std::vector<HardTokenRows>* hard, int n_embd,
                            std::vector<std::int32_t>* ple_ids = nullptr);

// The KV cache of a new state of `config` on `device`: Model::NewState's
// checks of `o` (max_context, max_step, max_batch >= 1, a KV cache dtype,
// num_kv_shared_layers in [0, MaxKvSharedLayers]; kvshare::Error naming the
// option and the valid values), then the cache (max_step clamped to
// max_context). For every Model implementation, on either device.
KvCache NewStateCache(const ModelConfig& config, const ModelStateOptions& o, Device device);

// ForwardBatch's checks of one entry before anything runs: the row in
// [0, max_batch), tokens non-empty, no cache overflow (the message names the
// row when the call has more than one entry), token ids in [0, n_vocab),
// num_logits in [1, tokens]. Throws kvshare::Error.
void CheckBatchEntry(const ModelState& st, const ModelConfig& config, const BatchEntry& e, std::size_t entries);

// Model::Embed's host side (embed.cc), shared by the CPU and GPU models: the
// checks (inputs, pooling, dimensions; kvshare::Error as model.h says), the
// inputs grouped into steps (consecutive inputs while rows x the longest <=
// step_tokens; each input whole, keep = n), and per step the output norm
// (out_norm [n_embd], rms_eps), the pooling (mean in double, or last), the
// dense projections (`dense`, in order, MatMulRows) and the L2 norms (the
// first `dimensions` renormalized), all on the host. run(step, options)
// runs one step on a new state made with `options` (EmbedStateOptions:
// max_batch = the step's rows, max_context = max_step = the longest input,
// exact_rewind) and returns its final residual rows [T, n_embd] (host
// memory, before the output norm, step.rows order), valid until the next
// call. Returns [inputs, d] row-major.
using EmbedStepRunner = std::function<const float*(const Step& step, const ModelStateOptions& options)>;
ModelStateOptions EmbedStateOptions(int rows, std::int64_t longest);
std::vector<float> EmbedInputs(const ModelConfig& c, const float* out_norm, std::span<const WeightMatrix> dense,
                               std::span<const std::vector<std::int32_t>> inputs, const EmbedOptions& o,
                               ThreadPool* pool, const EmbedStepRunner& run);

// ForwardBatch's refusal of an encoder (ModelConfig::causal false: it
// embeds, Model::Embed, and computes no next-token logits); kvshare::Error.
void RequireGenerates(const ModelConfig& config);

// Embedding spans (embedding_spans.cc). BidirectionalLayers: the layers where
// `mode` lets an image's tokens see each other. CheckEmbeddings: Forward's
// checks of e.embeddings (model.h), kvshare::Error naming the row and span.
// ChunkLength: tokens of e from pos in the next step, at most max_step and
// cut before a bidirectional span that would straddle the cut. AddStepInputs:
// appends e's tokens [pos, pos + n) to step with their embedding rows (ids 0
// there) and sets row_spans to the bidirectional spans in this chunk as
// absolute positions (start: the row's length before the call).
std::vector<bool> BidirectionalLayers(const ModelConfig& config, ImageAttention mode);
void CheckEmbeddings(const BatchEntry& e, int max_step, bool bidirectional_applies);
std::int64_t ChunkLength(const BatchEntry& e, std::int64_t pos, int max_step, bool bidirectional_applies);
void AddStepInputs(const BatchEntry& e, std::int64_t pos, std::int64_t n, std::int64_t start, int n_embd,
                   bool bidirectional_applies, Step& step, std::vector<std::int64_t>& row_spans);

// The Model of a decoder-only family. Derived classes fill cfg_, the LM head
// (out_w_, out_norm_, final_softcap_), the RoPE families and their layer map,
// and implement MakeState / RunStep.
class DecoderModel : public Model {
 public:
  const ModelConfig& config() const override { return cfg_; }
  const GgufFile& gguf() const override { return file_; }
  const std::vector<std::string>& warnings() const override { return warnings_; }
  std::unique_ptr<ModelState> NewState(const ModelStateOptions& options) const override;
  std::span<const float> Forward(ModelState& state, std::span<const std::int32_t> tokens, ThreadPool* pool,
                                 const ForwardOptions& options) const override;
  std::span<const float> ForwardBatch(ModelState& state, std::span<const BatchEntry> entries,
                                      ThreadPool* pool) const override;
  void EmbedTokens(std::span<const std::int32_t> tokens, float* out) const override;
  void SetHardTokenRows(std::vector<HardTokenRows> ranges) override;  // hard_tokens.cc
  std::shared_ptr<const std::vector<HardTokenRows>> hard_token_rows() const override { return hard_.load(); }
  std::vector<float> Embed(std::span<const std::vector<std::int32_t>> inputs, const EmbedOptions& options,
                           ThreadPool* pool) const override;  // embed.cc

  // The LM head and RoPE as loaded, for a copy of the model on another device
  // (src/cuda_model/): the token table (stored rows), the LM head (the tied
  // table unless the file has output.weight; `data` holds the stored rows even
  // when packed), the output norm [n_embd], the final softcap (0: off), the
  // RoPE families and each layer's family.
  const WeightMatrix& embedding_table() const { return embd_w_; }
  const WeightMatrix& lm_head() const { return out_w_; }
  const float* output_norm() const { return out_norm_; }
  float final_softcap() const { return final_softcap_; }
  const std::vector<RopeFamily>& rope_families() const { return rope_families_; }
  const std::vector<int>& layer_rope() const { return layer_rope_; }
  // Embed's dense projections after pooling, in order (empty for a decoder).
  const std::vector<WeightMatrix>& dense() const { return dense_; }

  // Step helpers every RunStep uses (and the GPU models' steps).
  // The QuerySpans of a step's rows, every token computed.
  static std::vector<QuerySpan> FullSpans(const Step& step);
  // The rows read at the output: sum of keep over step.rows.
  static std::int64_t KeptRows(const Step& step);
  // Packs the kept rows to the front, as RunStep returns them: each step
  // row's last `keep` rows of every buffer ([T, width] flat, T = the step's
  // tokens) move to rows 0, 1, ... in step.rows order (a row never moves
  // back past rows still to be read, so one forward copy per row suffices).
  // With `spans` and `src` (the step's QuerySpans and the step token of each
  // buffer row), also points the spans at the packed rows (skip = n - keep)
  // and records the step token each packed row holds: the layers after the
  // cut then run on the kept rows only (CutAfterAttention).
  static void PackKeptRows(const Step& step, std::span<std::vector<float>> buffers, int width,
                           std::vector<QuerySpan>* spans = nullptr, std::vector<std::int64_t>* src = nullptr);
  // The layer after whose attention a step runs on its kept rows only: the
  // last one that writes K/V (plan.first_shared - 1). What follows writes no
  // K/V, so rows whose outputs are not read never matter there (llama.cpp's
  // inp_out_ids; HF's _maybe_slice_kv_shared_inputs for the KV-shared
  // layers). -1 when every row is kept or the state turns the shortcut off.
  // At the cut, RunStep packs its buffers with PackKeptRows (spans and src
  // given) and, when kept == 0, stops there.
  static int CutAfterAttention(const DecoderState& st, const LayerPlan& plan, std::int64_t kept, std::int64_t T);

 protected:
  // out[T, n_embd]: the step's token embeddings * sqrt(n_embd), then the
  // rows GivenStepRows gives over theirs (installed hard-token rows, the
  // caller-given rows). ple_ids (when given): GivenStepRows' per-layer ids,
  // from the same snapshot of the ranges as `out`.
  void EmbedStep(const Step& step, float* out, std::vector<std::int32_t>* ple_ids = nullptr) const;
  // pack: how the family's TensorLookup prepares its matrices (the load
  // options' weight precision).
  explicit DecoderModel(GgufFile file, PackOptions pack = {}) : file_(std::move(file)), pack_(pack) {}

  // A state over `cache` (the architecture adds its scratch).
  virtual std::unique_ptr<DecoderState> MakeState(KvCache cache, const ModelStateOptions& options,
                                                  std::shared_ptr<const RopeSet> rope) const = 0;
  // Runs one step (every row <= max_step tokens) through every layer: reserves
  // each row's tokens, runs the layers, commits. Returns the final residual rows
  // ([sum keep, n_embd], before the output norm) of each row's last `keep`
  // tokens, row after row in step.rows order (null when no row keeps any); they
  // stay valid until the next call on st.
  virtual float* RunStep(DecoderState& st, const Step& step, ThreadPool* pool) const = 0;

  // An encoder's head (embed.cc; gemma-embedding): ModelConfig::causal
  // false, the window made symmetric (`prefix`attention.sliding_window W
  // becomes W / 2 + 1: |p - j| <= W / 2), the pooling type and the dense
  // projections dense_2 / dense_3 (bias-free, as llama.cpp's converter writes
  // them). Throws kvshare::Error for what kvshare does not run (cls / rank
  // pooling, dense biases, shapes that do not chain).
  void LoadEmbeddingHead(const std::string& prefix);
  // BuildLayerPlan's message for n shared layers ("" when the plan is valid).
  std::string PlanError(int n) const;
  // Throws when the file's own num_kv_shared_layers gives no valid plan.
  void ValidateSharing(const std::string& key) const;
  // Adds a warning when llama.cpp's fixed sharing rule (shared layer il >= n_kv
  // = n_layer - N reads n_kv - 2 if sliding, n_kv - 1 if full) picks other
  // source layers than HF's (the last owning layer of the same type), which
  // kvshare follows.
  void WarnIfLlamaCppSharesDifferently();
  // Throws when `plan` makes a layer compute its own K/V but has_kv(layer) is
  // false (the file shares that layer's KV), naming the smallest valid count.
  void RequireKvWeights(const LayerPlan& plan, const std::function<bool(int)>& has_kv) const;
  // Layer l's RoPE table in st's set (its family: layer_rope_).
  const RopeTable* LayerRope(const DecoderState& st, int l) const {
    return &st.rope->tables[static_cast<std::size_t>(layer_rope_[static_cast<std::size_t>(l)])];
  }

  GgufFile file_;
  PackOptions pack_;
  ModelConfig cfg_;
  WeightMatrix embd_w_;  // token_embd rows, as stored (looked up, not multiplied)
  WeightMatrix out_w_;
  const float* out_norm_ = nullptr;
  float final_softcap_ = 0.0f;  // 0: off
  std::vector<RopeFamily> rope_families_;
  std::vector<int> layer_rope_;      // [n_layer]: index into rope_families_
  std::vector<WeightMatrix> dense_;  // Embed's projections after pooling, in order (may be empty)
  std::vector<std::string> warnings_;

 private:
  std::shared_ptr<const RopeSet> RopeFor(std::int64_t max_pos) const;
  // Token embeddings of `tokens` (ids checked) with the rows of `hard` over
  // the ids in its ranges (hard_tokens.cc).
  void EmbedWith(const std::vector<HardTokenRows>* hard, std::span<const std::int32_t> tokens, float* out) const;
  // Model::SetHardTokenRows' ranges, swapped whole (readers take a snapshot).
  std::atomic<std::shared_ptr<const std::vector<HardTokenRows>>> hard_;
  mutable std::mutex rope_mu_;
  mutable std::shared_ptr<const RopeSet> rope_;
};

}  // namespace kvshare::detail
