// kvshare/model/model.h — decoder LLMs loaded from GGUF, run on the CPU.
//
// Model::Load maps a GGUF file (weights stay quantized in the mapping) and
// builds the architecture named by `general.architecture` (gemma3, gemma3n,
// gemma4; any size: every hyperparameter comes from metadata; and the
// embedding model gemma-embedding, which only embeds: Model::Embed). A Model is
// immutable and may be shared by many sessions; each ModelState owns a KV
// cache of ModelStateOptions::max_batch sequences (rows), run one at a time by
// Forward or together by ForwardBatch.
//
// Forward(state, tokens) appends `tokens` at positions state.length() ...
// and returns the logits of the last one (or of the last few, ForwardOptions).
// Inputs are run in chunks of at most ModelStateOptions::max_step tokens; each
// chunk runs every layer's attention as one GroupQueryAttention call in static
// scatter mode on the state's kvshare::KvCache (cache.h): full layers on
// linear buffers of max_context positions, sliding layers on window rings of
// window + max_step - 1 positions, KV-shared layers (the last
// num_kv_shared_layers) read their source layer's buffers zero-copy and
// compute no K/V. Decode passes one token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/tensor.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/model/embedding.h"

namespace kvshare {

class ThreadPool;
class AssistantModel;

// Which layers let the tokens of one image attend to each other in both
// directions (HF's blockwise overlay); the others stay causal.
enum class ImageAttention { kCausal, kAllLayers, kSlidingLayers };
// "causal", "all", "sliding"; ImageAttentionFromName throws kvshare::Error
// naming the valid names.
const char* ImageAttentionName(ImageAttention mode);
ImageAttention ImageAttentionFromName(const std::string& name);

// Hyperparameters read from metadata.
struct ModelConfig {
  std::string architecture;
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_vocab = 0;
  int context_length = 0;  // trained context
  float rms_eps = 1e-6f;
  int sliding_window = 0;  // 0: none
  float rope_base_full = 1e6f;
  float rope_base_sliding = 1e4f;
  float attn_scale = 0.0f;       // query scale
  std::vector<bool> is_sliding;  // [n_layer]
  // Per layer [n_layer]: head size H, KV heads N_kv and dense FFN width (0: the
  // layer has no dense FFN). Gemma 3: the scalars above, repeated; Gemma 4 mixes
  // them by layer type (sliding key_length_swa / full key_length; per-layer
  // head_count_kv and feed_forward_length arrays). The scalars n_ff, n_head_kv
  // and head_dim are layer 0's.
  std::vector<int> layer_head_dim;
  std::vector<int> layer_n_head_kv;
  std::vector<int> layer_n_ff;
  // Trailing layers that reuse an earlier layer's K/V (`<arch>.attention.
  // shared_kv_layers`, Gemma 3n / Gemma 4); 0 when the file has no such key.
  int num_kv_shared_layers = 0;
  // Where the soft tokens of one image see each other (EmbeddingSpan::
  // bidirectional). The GGUF carries no flag, so it follows the variant as HF
  // transformers does (docs/architecture.md §6): Gemma 3 every layer; Gemma 4
  // without per-layer embeddings (26B-A4B, 31B, the unified 12B) sliding
  // layers only; Gemma 3n and the Gemma 4 E-models causal.
  ImageAttention image_attention = ImageAttention::kCausal;
  // false: an encoder (gemma-embedding, HF use_bidirectional_attention):
  // every layer bidirectional, full layers see every key, sliding layers the
  // keys with |p - j| < sliding_window (the GGUF's window / 2 + 1, HF's
  // value). Such a model embeds (Model::Embed) and does not generate.
  bool causal = true;
  // The file's `<arch>.pooling_type` (kNone when absent: decoders).
  Pooling pooling = Pooling::kNone;
  // Values of Model::Embed's vectors: the last dense projection's output
  // width (gemma-embedding); 0 for a model without dense projections, whose
  // vectors have n_embd values.
  int embedding_dim = 0;
};

// The attention layers of `config` as a cache spec (per layer: sliding or
// full, window, N_kv, H, RoPE base) with the last `num_kv_shared_layers`
// layers KV-shared. Does not validate the sharing (BuildLayerPlan does).
ModelKvSpec KvSpecOf(const ModelConfig& config, int num_kv_shared_layers);

// Largest num_kv_shared_layers whose layer plan is valid for `config`: every
// shared layer needs a non-shared layer of its type (sliding / full) before the
// first shared layer (Gemma 3 270M: 12, since layer 5 is the first full layer).
// Every n in [0, MaxKvSharedLayers] is valid.
int MaxKvSharedLayers(const ModelConfig& config);

struct ModelStateOptions {
  // Positions the KV cache can hold (prompt + generated tokens), >= 1.
  int max_context = 4096;
  // S_max: most tokens per internal step, >= 1 (clamped to max_context).
  // Forward splits longer inputs into chunks of max_step tokens; sliding
  // layers keep rings of window + max_step - 1 positions, so a smaller value
  // keeps them smaller. The measurements behind the default:
  // docs/benchmarks.md, "Defaults chosen from measurements".
  int max_step = 256;
  // KV cache storage: float32, float16, bfloat16 or q8_0 (K/V are rounded to
  // it when written; attention accumulates in fp32). q8_0 (llama.cpp's
  // -ctk q8_0 -ctv q8_0: 32 int8 values along H per fp16 scale, 1.0625 bytes
  // per value) needs every layer's head size to be a multiple of 32.
  DType kv_dtype = DType::kFloat32;
  // KV-shared trailing layers; nullopt: the model's own
  // (ModelConfig::num_kv_shared_layers). Must be in [0, MaxKvSharedLayers].
  // Overriding it on a model trained without sharing changes its outputs
  // (the shared layers drop their own K/V projections); it is there to try
  // sharing and see the memory it saves.
  std::optional<int> num_kv_shared_layers;
  // The GQA kernel of every attention layer. kReference (plain loops, double
  // accumulation, slow) sums each query's keys in position order whatever the
  // chunking, ring wrap or step; tests use it to compare cache layouts
  // without kernel rounding differences.
  GqaKernel attention_kernel = GqaKernel::kAuto;
  // The arithmetic of every attention layer's score and value products
  // (GqaRunOptions::matmul_precision): kF32, or kBf16 (bf16 products with
  // f32 accumulation on Intel AMX tiles, error bound in gqa.h; every step of
  // a sequence, prefill, decode and verify alike, so a row's logits still do
  // not depend on how its tokens were batched or chunked). kBf16 needs
  // GqaBf16CoversCausal() and a KV dtype other than q8_0; the first forward
  // step throws kvshare::Error otherwise.
  GqaMatMulPrecision attention_precision = GqaMatMulPrecision::kF32;
  // Rows (sequences) of the state's cache, >= 1: ForwardBatch runs up to this
  // many sequences in one step. Every row gets max_context positions.
  int max_batch = 1;
  // Sliding layers keep every position (linear buffers of max_context, as
  // llama.cpp's --swa-full) instead of window rings, so Rewind works to any
  // length; costs the rings' savings (KvMemoryReport::saved_by_rings).
  bool exact_rewind = false;
  // In a prefill, run what writes no K/V only for the tokens whose logits are
  // returned: the last layer that writes K/V after its attention, and the
  // trailing KV-shared layers (the rest is never read; llama.cpp's
  // inp_out_ids, HF's _maybe_slice_kv_shared_inputs, vLLM's
  // kv_sharing_fast_prefill). Exact: off gives the same logits, bit for bit;
  // off exists to measure what it saves.
  bool prefill_shortcut = true;
  // Overrides ModelConfig::image_attention (nullopt: the model's), e.g. for a
  // fine-tune whose config says otherwise.
  std::optional<ImageAttention> image_attention;
};

// Input rows that replace token embeddings: an image's (or audio clip's) soft
// tokens, spliced in where the prompt holds their placeholder tokens.
struct EmbeddingSpan {
  std::int64_t begin = 0;       // index of its first token in the call's tokens
  std::int64_t count = 0;       // tokens it replaces, >= 1
  const float* rows = nullptr;  // [count, n_embd] float32, as the first layer takes them (no sqrt(n_embd) scale)
  // The span's tokens see each other (one image) on the layers
  // ModelConfig::image_attention names; false (audio) keeps them causal. A
  // bidirectional span must run in one internal step: count <= max_step.
  bool bidirectional = false;
};

// Rows that replace the token-table embedding of a range of ids
// (Model::SetHardTokenRows).
struct HardTokenRows {
  std::int32_t first = 0;   // the range's first id
  std::vector<float> rows;  // [n, n_embd] float32, n >= 1: ids [first, first + n), as the first layer takes them
};

// Options of one Forward call.
struct ForwardOptions {
  // Return the logits of the last num_logits tokens of the call, 1 <= num_logits
  // <= tokens.size(): [num_logits, n_vocab] row-major, in token order.
  std::int64_t num_logits = 1;
  // Sorted, disjoint spans of `tokens` whose embeddings come from the caller.
  // The token ids there are placeholders (the per-layer embeddings of Gemma
  // 3n / Gemma 4 E-models take id 0 there, as HF does).
  std::span<const EmbeddingSpan> embeddings;
};

// One row's part of a batched step (Model::ForwardBatch).
struct BatchEntry {
  int row = 0;                                // the state's row, in [0, max_batch)
  std::span<const std::int32_t> tokens;       // appended to the row; non-empty
  std::int64_t num_logits = 1;                // logits of the last num_logits tokens, [1, tokens.size()]
  std::span<const EmbeddingSpan> embeddings;  // as ForwardOptions::embeddings
};

// The KV cache of up to max_batch sequences (a KvCache with one row each) and
// scratch buffers. The row-less calls are row 0's.
class ModelState {
 public:
  virtual ~ModelState() = default;
  virtual int max_batch() const = 0;
  // Tokens already in the cache of `row`.
  virtual std::int64_t length(int row) const = 0;
  std::int64_t length() const { return length(0); }
  virtual int max_context() const = 0;
  // Bytes held by the KV cache buffers (kv_cache().Memory().total_bytes).
  virtual std::size_t kv_bytes() const = 0;
  // The cache: its layer plan (Plan()), options and memory report (Memory():
  // bytes per layer, saved by sharing and by rings).
  virtual const KvCache& kv_cache() const = 0;
  // Where the KV cache lives (kv_cache().Options().device): kCuda for the
  // GPU model's states (cuda_model/). Front ends decide what a state can
  // serve from it (runtime/device_support.h).
  virtual Device device() const { return kv_cache().Options().device; }
  // Forget the sequence of `row` (length 0); buffers are kept.
  virtual void Reset(int row) = 0;
  void Reset() { Reset(0); }
  // Drop the positions >= length of `row` (KvCache::Rewind: sliding rings can
  // only go back while the window still holds what decoding needs; the error
  // says which lengths work). Throws kvshare::Error, changing nothing.
  virtual void Rewind(int row, std::int64_t length) = 0;
  // Makes row `dst` a copy of row `src` (KvCache::CopyRow): what dst then
  // computes is bitwise what it would have computed after feeding src's
  // tokens itself. Returns false, changing nothing, where the state cannot
  // copy rows (the GPU model); throws kvshare::Error as KvCache::CopyRow.
  virtual bool CopyRow(int src, int dst) {
    (void)src;
    (void)dst;
    return false;
  }
  // [sum num_logits, n_embd]: the final hidden state of each logits row of the
  // last Forward / ForwardBatch, in the same order — after the output norm, the
  // LM head's input (what Gemma 4's assistant drafter takes, HF
  // `hidden_states[-1]`). Valid until the next call on the state (the GPU
  // model copies these rows back to the host with the logits).
  virtual std::span<const float> hidden() const { return {}; }
};

// How Model::Load prepares the weights.
struct ModelLoadOptions {
  // The products with F32 / F16 / BF16 weight matrices (quantized matrices
  // keep their int8 products). kF32 (the default): exact f32 products of the
  // stored values. kBf16: the weights are rounded to bf16 once at load and
  // the activations per product (nearest even), and the products run on
  // Intel AMX tiles with f32 sums (tdpbf16ps), for every row count, prefill,
  // decode and verify alike, so a row's logits still do not depend on how its
  // tokens were batched. Bound per output (u = 2^-8, one bf16 rounding):
  // |y - sum w x| <= (2u + u^2) sum |w x| + gamma_K sum |bf16(w) bf16(x)|
  // (gamma_K = K 2^-24 / (1 - K 2^-24)), as llama.cpp's F16 / BF16 weights
  // round their activations to f16 / bf16. Load throws kvshare::Error
  // where the tiles are not usable (no AMX-BF16, no OS permission, or
  // KVSHARE_KERNEL below amx).
  GqaMatMulPrecision weight_precision = GqaMatMulPrecision::kF32;
};

// Why ModelLoadOptions::weight_precision kBf16 cannot run in this process
// (no AMX or AVX512-BF16 on this CPU, no Linux tile permission, or
// KVSHARE_KERNEL set below amx), or "" when it can.
std::string Bf16WeightsUnavailableReason();

class Model {
 public:
  // Opens and validates `path`. Throws kvshare::Error for a missing file, an
  // unsupported architecture, missing/ill-shaped tensors, or options this
  // CPU cannot run.
  static std::unique_ptr<Model> Load(const std::string& path, const ModelLoadOptions& options = {});
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const GgufFile& gguf() const = 0;
  // What the loader noticed that does not stop the model, one sentence each
  // (e.g. that llama.cpp's fixed KV-sharing rule would read this file's shared
  // layers from other layers than HF's, which kvshare follows). Frontends print them.
  virtual const std::vector<std::string>& warnings() const = 0;
  // A state with an empty cache. Throws kvshare::Error when max_context or
  // max_step < 1, kv_dtype is not a KV cache dtype (or q8_0 with a head size
  // that is not a multiple of 32), or num_kv_shared_layers is
  // outside [0, MaxKvSharedLayers(config())] (the message gives the range).
  virtual std::unique_ptr<ModelState> NewState(const ModelStateOptions& options = {}) const = 0;

  // Appends tokens (non-empty, ids in [0, n_vocab)) to `state` and returns the
  // logits of the last options.num_logits tokens ([num_logits, n_vocab]; by
  // default the last token's [n_vocab]), valid until the next call on state.
  // Throws kvshare::Error, leaving the state unchanged, if the cache would
  // overflow (length() + tokens.size() > max_context()), a token id is out of
  // range, num_logits is out of [1, tokens.size()], or an embedding span is
  // empty, out of the tokens, unsorted or overlapping, has no rows, or is
  // bidirectional (on a model that applies it) and longer than max_step (the
  // message says which max_step it needs). An error while running
  // (not expected once these checks pass) rewinds the state to its length
  // before the call, or resets it (length 0) when a sliding ring no longer
  // holds that length. Results do not depend on the thread count of `pool`
  // (null: the calling thread).
  virtual std::span<const float> Forward(ModelState& state, std::span<const std::int32_t> tokens, ThreadPool* pool,
                                         const ForwardOptions& options = {}) const = 0;

  // Runs several rows of `state` in one step: every entry appends its tokens to
  // its row (decode rows 1 token, prefill rows a chunk or a whole prompt; rows
  // distinct, any order), and every weight matrix is read once per internal step
  // for all of them (inputs longer than max_step run in lock-step chunks).
  // Returns [sum of num_logits, n_vocab]: entry by entry, in the given order,
  // each its last num_logits tokens' logits; valid until the next call on state.
  // A row's logits do not depend on which other rows share its step, nor on
  // how its tokens were cut into calls: bitwise equal to running them alone
  // through Forward, in any chunks (matmuls are row by row; the attention
  // kernel's KV blocks and splits sit at absolute positions). Throws kvshare::Error, changing no
  // row, for an empty entry list, a row out of range or repeated, and for what
  // Forward checks per row (overflow of max_context, token ids, num_logits).
  virtual std::span<const float> ForwardBatch(ModelState& state, std::span<const BatchEntry> entries,
                                              ThreadPool* pool) const = 0;

  // Embeddings of `inputs` (each non-empty token ids in [0, n_vocab), at most
  // context_length of them): [inputs.size(), d] row-major, d = dimensions or
  // config().embedding_dim (n_embd when 0), each row L2-normalized (embedding.h). Runs on
  // states of its own (no caller state, no cache shared with anything), the
  // inputs as rows of batched steps, each input in one step; causal models
  // pool causal hidden states. Results do not depend on how inputs are
  // grouped or on the thread count (on the GPU: up to its rounding, as a
  // batched step's rows; docs/gpu.md). Throws kvshare::Error, naming the input
  // index, for no inputs, an empty or too long input, a token id out of
  // range, no pooling (the option to set), or dimensions out of range. The
  // GPU model (cuda_model/) runs the layers on the device and the rest as
  // the CPU does. This default (a Model that does not embed) throws saying so.
  virtual std::vector<float> Embed(std::span<const std::vector<std::int32_t>> inputs, const EmbedOptions& options,
                                   ThreadPool* pool) const;

  // out[i, :] = the input embedding of tokens[i] as the first layer takes it,
  // [tokens.size(), n_embd] (Gemma: the token_embd row scaled by
  // sqrt(n_embd)). Ids must be in [0, n_vocab) (kvshare::Error otherwise).
  virtual void EmbedTokens(std::span<const std::int32_t> tokens, float* out) const = 0;

  // Gemma 3n's hard tokens (docs/vision.md "Gemma 3n's hard tokens"): HF's
  // Gemma3nModel.forward embeds every id of the vision and audio
  // vocabularies through the mmproj's embedders (their token path), not the
  // text table. Replaces the installed ranges by `ranges` (empty: none).
  // From then on the embedding of an id in a range is that range's row, as
  // is (HF replaces the scaled text embedding by it: no sqrt(n_embd) scale),
  // wherever the model embeds ids: Forward / ForwardBatch tokens (prompts,
  // decode steps, drafts under verification; an EmbeddingSpan's rows still
  // win over it) and EmbedTokens; the per-layer input (Gemma 3n) of such an
  // id is id 0's, as HF's get_per_layer_inputs gives it. Other ids, and
  // every id while no range is installed, are embedded as before. Safe while
  // other threads run the model: a call already running keeps the rows it
  // started with. Throws kvshare::Error, changing nothing, for a range
  // without rows or whose rows are not a multiple of n_embd, ids outside
  // [0, n_vocab), overlapping ranges, and (ranges not empty) a model that
  // does not take them (the GPU model).
  virtual void SetHardTokenRows(std::vector<HardTokenRows> ranges);
  // The installed ranges, sorted by first id (null: none); a snapshot that
  // later SetHardTokenRows calls do not change.
  virtual std::shared_ptr<const std::vector<HardTokenRows>> hard_token_rows() const { return nullptr; }

  // Gemma 4's assistant drafter (kvshare/model/gemma4_assistant.h) made to
  // run where this model's states live: null where `assistant` runs as it is
  // (the CPU model); the GPU model returns a twin on its device (its weights
  // uploaded, its attention on the device cache) that borrows `assistant`,
  // which must outlive it. Throws kvshare::Error when the device cannot run
  // it (for example out of device memory).
  virtual std::unique_ptr<AssistantModel> AssistantOnDevice(const AssistantModel& assistant) const;
};

}  // namespace kvshare
