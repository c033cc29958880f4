// kvshare/cache/kv_cache.h — static KV caches, sliding-window rings and KV-shared
// layers, driving the GroupQueryAttention op's static scatter mode.
//
// Lifetimes. A ModelKvSpec describes the attention layers of a model; a
// LayerPlan (built once from it) says which layers own a cache and which layer
// a KV-shared layer reads; a KvCache owns the buffers of one set of sequences
// (up to max_batch rows) and their per-row lengths. The caller owns the cache.
//
// One decode / prefill step of a batch:
//   1. for every row taking part: w = cache.Reserve(row, n_new)   (rows not
//      taking part keep n_new = 0: they write nothing and output zeros);
//   2. for every layer, in order: AttendLayer(cache, layer, args) — owning
//      layers write their new K/V (RoPE'd at absolute positions w + s) and
//      attend; shared layers read their source layer's buffers, write nothing,
//      and rotate only Q at w + s;
//   3. cache.Commit(row) (or CommitAll()).
// Rows advance independently: different prompt lengths, different n_new per
// step, rows reset or rewound while others continue.
//
// Capacities. Full-attention layers: a linear buffer of max_seq positions.
// Sliding layers (window W): a ring of C = W + max_step - 1 positions (the
// op's circular scatter; every key a query needs stays resident), or a linear
// buffer of max_seq positions when exact_rewind is set (or when the ring
// would not be smaller). Buffers are allocated once, zero-filled, only for
// owning layers, each with its own N_kv and H.
//
// Errors raise kvshare::Error saying what to change; a failing call leaves the
// cache exactly as it was (state and buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvshare/attention/gqa.h"
#include "kvshare/common/tensor.h"

namespace kvshare {

enum class AttentionType { kSliding, kFull };
const char* AttentionTypeName(AttentionType type);  // "sliding", "full"

// One attention layer's KV-relevant shape.
struct LayerSpec {
  AttentionType type = AttentionType::kFull;
  int window = 0;             // W keys including the current one; > 0 for sliding, ignored for full
  int kv_heads = 0;           // N_kv > 0
  int head_size = 0;          // H > 0, a multiple of 8 (16 with RoPE)
  float rope_base = 10000.f;  // must match the source's for a shared layer
};

// The model's attention layers. The last num_kv_shared_layers layers are
// KV-shared (HF Gemma 3n / Gemma 4 `num_kv_shared_layers`); 0 means none.
struct ModelKvSpec {
  std::vector<LayerSpec> layers;
  int num_kv_shared_layers = 0;
};

struct LayerPlanEntry {
  bool owns_cache = true;
  int source_layer = 0;  // the layer whose K/V this layer reads (itself when it owns a cache)
  int cache_slot = 0;    // index of the owned buffers (the source's slot for a shared layer)
};

struct LayerPlan {
  std::vector<LayerPlanEntry> layers;  // one per layer
  int num_slots = 0;                   // owning layers = cache slots
  int first_shared = 0;                // L - num_kv_shared_layers (L when none)
  // "layer 20 (sliding) -> layer 18" lines, for logs and the CLI.
  std::string ToString() const;
};

// Builds the plan. Layers >= first = L - n are shared; each reads the last
// layer < first of the same attention type (HF Gemma 3n / Gemma 4 rule).
// Throws kvshare::Error when: the spec has no layers; n < 0 or n >= L; a layer
// has kv_heads / head_size <= 0 or a sliding layer window <= 0; a shared layer
// has no non-shared layer of its type before it; or a shared layer's N_kv, H,
// window or RoPE base differ from its source's.
LayerPlan BuildLayerPlan(const ModelKvSpec& spec);

// Memory layout of the cache buffers.
enum class KvLayout {
  kBnsh,        // [max_batch, N_kv, C, H] (default; the op's BNSH cache)
  kTokenMajor,  // [max_batch, C, N_kv * H] (3-D, for ONNX TensorScatter interop)
};

struct KvCacheOptions {
  int max_batch = 1;         // rows B
  std::int64_t max_seq = 0;  // positions per row (> 0)
  int max_step = 1;          // S_max: most new tokens per row and per step (chunk size)
  // Storage: float32, float16, bfloat16, or q8_0 (blocks of 32 int8 values
  // along H with an fp16 scale, 34 bytes per 32 values: 1.0625 bytes per
  // value; every layer's head_size must then be a multiple of 32). K/V rows
  // are rounded / quantized to it when written; attention accumulates in fp32.
  DType dtype = DType::kFloat32;
  bool exact_rewind = false;  // sliding layers keep every position (linear max_seq buffers)
  KvLayout layout = KvLayout::kBnsh;
  // Where the K/V buffers live (tensor.h). Device::kCuda: in GPU memory
  // (cudaMalloc, zero-filled; KVSHARE_CUDA builds), so every AttendLayer on
  // this cache runs the op with run.device = kCuda, its query / key / value /
  // output in device memory; the row lengths (WriteIndices, NonpadKvSeqlen)
  // stay on the host, as the op's index inputs do. The constructor throws
  // kvshare::Error when no GPU is usable or the allocation fails.
  Device device = Device::kCpu;
};

// Bytes of one layer's K+V storage.
struct LayerMemory {
  int layer = 0;
  AttentionType type = AttentionType::kFull;
  int kv_heads = 0;   // N_kv
  int head_size = 0;  // H
  bool owns_cache = true;
  int source_layer = 0;
  std::int64_t capacity = 0;  // C positions per row (of the source for a shared layer)
  bool ring = false;
  std::size_t bytes = 0;              // allocated for this layer (0 when shared)
  std::size_t bytes_if_owned = 0;     // what it would take with its own cache (same ring policy)
  std::size_t bytes_full_length = 0;  // what its own cache would take at max_seq positions
};

struct KvMemoryReport {
  std::vector<LayerMemory> layers;
  std::size_t total_bytes = 0;            // allocated K+V, all layers
  std::size_t bytes_without_sharing = 0;  // every layer with its own cache, same ring policy
  std::size_t saved_by_sharing = 0;       // bytes_without_sharing - total_bytes
  std::size_t saved_by_rings = 0;         // owning sliding layers at max_seq minus as allocated
  // A table, one line per layer, then the totals in bytes and MB (10^6).
  std::string ToString() const;
};

// Memory of a cache with these options, without allocating it.
KvMemoryReport EstimateKvMemory(const ModelKvSpec& spec, const KvCacheOptions& options);

// What to bind to the GQA op for one layer (all views point into the cache).
struct LayerKvView {
  int layer = 0;
  int source_layer = 0;  // == layer when the layer owns its cache
  bool shared = false;   // true: read-only, pass no key/value to the op
  // The source's K buffer, BNSH [B, N_kv, C, H] or 3-D [B, C, kv_hidden], in
  // KvCacheOptions::dtype (shape in elements; a q8_0 row of H takes H / 32 * 34 bytes).
  TensorView key;
  TensorView value;                  // likewise V
  ConstTensorView write_indices;     // int64 [B]: Length(row)
  ConstTensorView nonpad_kv_seqlen;  // int64 [B]: Length(row) + reserved n_new
  GqaAttributes::ScatterMode scatter_mode = GqaAttributes::ScatterMode::kLinear;  // kCircular for rings
  int window = -1;  // local_window_size for the op (-1 for full layers)
  std::int64_t capacity = 0;
};

struct LayerAttendArgs;

class KvCache {
 public:
  // Builds the plan and allocates zeroed buffers for the owning layers.
  // Throws kvshare::Error on a bad spec (see BuildLayerPlan) or options
  // (max_batch, max_seq, max_step >= 1, max_step <= max_seq, a KV cache dtype:
  // float32 / float16 / bfloat16 / q8_0, q8_0 only when every head_size is a
  // multiple of 32).
  KvCache(const ModelKvSpec& spec, const KvCacheOptions& options);
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const ModelKvSpec& Spec() const;
  const KvCacheOptions& Options() const;
  const LayerPlan& Plan() const;

  // Reserves n_new positions for row: returns the write index (= Length(row));
  // nonpad_kv_seqlen[row] becomes Length(row) + n_new. Throws, changing
  // nothing, when row is out of range, n_new < 0 or > max_step, row already
  // has an uncommitted reservation, or Length(row) + n_new > max_seq.
  std::int64_t Reserve(int row, std::int64_t n_new);
  // Length(row) += reserved n_new (no-op when nothing is reserved).
  void Commit(int row);
  void CommitAll();
  // Drops positions >= length (0 <= length <= Length(row)) and any
  // reservation. Throws, changing nothing, when a sliding ring has already
  // overwritten positions that decoding from `length` needs (length - W + 1 ...
  // length - 1); the message names them and the lengths that still work.
  // Rewinding to 0 always works; with exact_rewind any length works.
  void Rewind(int row, std::int64_t length);
  // Empties row (length 0, no reservation); other rows are untouched.
  void Reset(int row);
  // Makes row `dst` a copy of row `src` (its K/V buffers, length and ring
  // state): the sequences then go on independently, `dst` exactly as if it
  // had computed src's tokens itself. Throws, changing nothing, when a row is
  // out of range, either row has a reservation, or the buffers are not in
  // host memory (Device::kCpu). src == dst does nothing.
  void CopyRow(int src, int dst);

  std::int64_t Length(int row) const;
  std::int64_t Reserved(int row) const;  // uncommitted n_new (0 when none)
  // Smallest length > 0 that Rewind(row, ·) accepts now (1 when nothing was evicted).
  std::int64_t OldestRewindLength(int row) const;

  // int64 [max_batch] vectors the op consumes (stay valid while the cache lives).
  ConstTensorView WriteIndices() const;
  ConstTensorView NonpadKvSeqlen() const;

  // Views of layer's KV (its source's for a shared layer) for the first
  // `batch` rows (0 => max_batch).
  LayerKvView Layer(int layer, int batch = 0);

  KvMemoryReport Memory() const;

 private:
  friend void AttendLayer(KvCache& cache, int layer, const LayerAttendArgs& args);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Arguments of one attention layer run through the cache.
struct LayerAttendArgs {
  ConstTensorView query;               // (B, S, N*H), B <= max_batch, S <= max_step
  std::optional<ConstTensorView> key;  // (B, S, N_kv*H): required for owning layers, absent for shared
  std::optional<ConstTensorView> value;
  std::optional<ConstTensorView> cos_cache;  // (max_pos, R/2) when attrs.do_rotary
  std::optional<ConstTensorView> sin_cache;
  std::optional<ConstTensorView> head_sink;
  // num_heads, scale, softcap, do_rotary, ... as for the op. kv_num_heads and
  // local_window_size are taken from the layer (0 / -1 mean "from the layer";
  // any other value must match it); scatter_mode is set by the cache.
  GqaAttributes attrs;
  TensorView output;  // (B, S, N*H)
  GqaRunOptions run;
  // KV-shared layers only: int64 values, one per row b < B (empty: all 0). Row
  // b's query holds its reserved rows from query_offsets[b] on (positions
  // write_index + query_offsets[b] + s); the rows before are not computed.
  // Shared layers write nothing, so a prefill needs them only for the rows
  // whose outputs are read (HF's _maybe_slice_kv_shared_inputs, vLLM's
  // kv_sharing_fast_prefill).
  std::span<const std::int64_t> query_offsets;
  // The op's bidirectional_spans (int64 [B, K, 2], absolute positions): the
  // tokens of one image that see each other on this layer. The spans must lie
  // in the rows' current reservations' ends (end <= the row's length after
  // this step); the op checks them.
  std::optional<ConstTensorView> bidirectional_spans;
};

// Runs the GQA op for `layer` in static scatter mode on the cache's buffers:
// owning layers write their reserved rows and attend; shared layers attend
// read-only over their source's rows. Throws kvshare::Error naming the layer
// on any mismatch (args.run.device other than the cache's device included),
// and when a shared layer runs before its source layer has
// written the rows reserved since the last Reserve (run layers in order), and
// when query_offsets are given for an owning layer, for other than B rows, or
// outside [0, reserved] of their row.
void AttendLayer(KvCache& cache, int layer, const LayerAttendArgs& args);

}  // namespace kvshare
