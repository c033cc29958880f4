// kvshare/attention/gqa.h — the GroupQueryAttention (GQA) operator.
//
// Semantics follow ONNX Runtime's com.microsoft.GroupQueryAttention (contrib op
// schema, bert_defs.cc; CPU kernel group_query_attention.cc / gqa_attention_base.h)
// plus kvshare's extensions: omitted key/value (past-only), external K/V as
// key/value, optional present outputs, a static in-place scatter cache
// (ONNX TensorScatter-24 + Attention-24 `nonpad_kv_seqlen`), and blocked KV with
// an online softmax (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022).
//
// Terms: B batch, S query length (new tokens this step), T total KV length,
// N query heads (num_heads), N_kv KV heads (kv_num_heads), G = N / N_kv,
// H head size, kv_hidden = N_kv * H. BSNH = [B, S, N*H]; BNSH = [B, N, S, H].
//
// ---------------------------------------------------------------------------
// Score pipeline (query s of row b, query head h, key j; kv head = h / G):
//   x_j = scale * (q_s . k_j)              scale = 1/sqrt(H) when attrs.scale == 0
//   x_j = softcap * tanh(x_j / softcap)    when softcap > 0
//   x_j = x_j + attention_bias[b, h, s, j] visible keys only
//   p_j = exp(x_j - m) / (sum_k exp(x_k - m) + [exp(sink - m)])
//   out = sum_j p_j v_j
// sink = head_sink[h], or 0 when smooth_softmax == 1 (ORT "smooth softmax";
// gpt-oss attention sinks); m = max over visible x and the sink.
// A query with no visible key outputs zeros.
//
// Visibility. T_b = seqlens_k[b] + 1 keys exist for row b. The query s sits at
// absolute position p = off_b + s, where off_b is the causal offset of the mode
// (below). Key j is visible iff j < T_b, and (causal) j <= p, and (window,
// local_window_size = W > 0) p - j < W: W keys including the current one, as in
// HF `sliding_window` and ORT >= PR #25927. With causal = 0 a window is
// symmetric (kvshare extension): |p - j| < W, HF's bidirectional sliding
// overlay (Gemma 3 `use_bidirectional_attention`, EmbeddingGemma); not in the
// circular scatter mode.
//
// Bidirectional spans (kvshare extension; input bidirectional_spans, int64
// [B, K, 2], K >= 0): row b's spans [start, end) of absolute positions, sorted
// and disjoint, then (0, 0) pairs as padding up to K (rows with fewer spans).
// A query at position p inside a span also sees the later keys p < j < end of
// its span; the window still applies and never hides them (j > p). Key j is
// then visible iff j < T_b, and (j <= p or j and p lie in the same span), and
// p - j < W. This is HF transformers' blockwise overlay (masking_utils) for the
// soft tokens of one image: full layers causal OR same block, sliding layers
// (p - j < W) AND (causal OR same block); Gemma 3 applies it on every layer,
// Gemma 4 26B-A4B / 31B on sliding layers only (docs/architecture.md §6).
// Queries outside every span, and keys outside the query's span, keep the
// causal rule, so a query's visible keys stay one range: [p - W + 1, end - 1]
// inside a span, [p - W + 1, p] outside (clipped to [0, T_b)). Touching spans
// (one's end == the next's start) are separate blocks; HF's block is a maximal
// run of image tokens, so a caller merges runs it wants as one. A span of
// length 1 changes nothing.
// Every key of a span must be in the cache when its queries attend: each
// span's end must be <= T_b (seqlens_k[b] + 1, or nonpad_kv_seqlen[b] in static
// scatter mode). So a chunked prefill ends its chunks at span boundaries (or
// outside spans) and passes the spans that end by the chunk's T_b: those of
// earlier chunks change nothing for later queries, and keeping them is
// harmless. Requires causal = 1 (with causal = 0 every key is visible
// already). Valid in every KV mode: append, share buffer, static scatter
// (linear and circular: the span's keys after p are newer than p, so a ring of
// C >= W + S - 1 still holds them), and the borrowed and external modes (a
// KV-shared layer reads its source layer's rows over the same positions). The
// CPU kernels and the CUDA kernels take it (GqaRunOptions).
//
// RoPE (do_rotary = 1) rotates Q and the *new* K only, at absolute positions;
// cached and borrowed K is never re-rotated. Half (GPT-NeoX) mode pairs
// (i, i + R/2), interleaved (GPT-J) mode pairs (2i, 2i+1), R = 2 * cos_cache.dim1;
// dims >= R pass through (partial rotary). Position of query s: position_ids
// given: on a first prompt position_ids[b, 0] + s, else position_ids[b, s];
// absent: p (the absolute position above).
//
// ---------------------------------------------------------------------------
// KV sources. The op recognizes six modes from which inputs are present
// (`DetectKvMode` reports the choice):
//
//  kAppend       key/value (B, S, kv_hidden) (or packed QKV) given; past
//                absent, or past given and present a different buffer. present
//                = past rows [0, P_b) followed by the S new rows, P_b = T_b - S
//                (0 on a first prompt, i.e. S == total_sequence_length). present
//                is (B, N_kv, max(total_sequence_length, past.dim2), H), zero
//                beyond row P_b + S. On a right-padded first prompt that is
//                every row [0, S): the padding rows s >= T_b are written too (as
//                ORT does), e.g. seqlens_k = [2, 15, 8], S = 16 fills all 16
//                rows of each batch row; attention still sees keys j < T_b only.
//                With past given and present omitted the op attends over
//                past + new without writing anything (kvshare definition; ORT
//                leaves this undefined).
//  kShareBuffer  past and present are the same buffers (pointer equality, as in
//                ORT) of capacity C = past.dim2; the new rows are written in place
//                at rows T_b - S ... T_b - 1 (rows 0 ... S - 1 on a first prompt).
//  kBorrowedEmptyKv  key/value are (B, 0, kv_hidden) and past holds the whole KV
//                of a source layer (ORT's Gemma-4 design, PR #28242). Nothing is
//                appended; Q-only RoPE; present optional (copied, or aliased).
//  kBorrowedOmittedKv  key/value absent and query not packed (query last dim ==
//                N*H; a packed query has (N + 2*N_kv)*H), past given. Head size
//                comes from past_key dim 3 (ORT issue #28318). Same math as
//                kBorrowedEmptyKv: exact attention over the source KV.
//  kExternalKv   key/value *are* the whole borrowed cache, BSNH (B, T_kv,
//                kv_hidden) with T_kv != S, no past. off_b = T_b - S (ONNX
//                Attention-24 external cache; the design ORT's reviewer preferred).
//                Q-only RoPE; present outputs, if given, receive a BNSH copy.
//  kStaticScatter  write_indices and nonpad_kv_seqlen given (see below).
//
// Causal offset off_b: 0 on a first prompt (S == total_sequence_length, no
// past rows used) and T_b - S otherwise; in kBorrowed* modes off_b = T_b - S
// unless S == total_sequence_length (then 0); in kExternalKv T_b - S.
//
// Static scatter mode (onnxruntime-genai StaticScatterKeyValueCache PR #2235;
// ONNX TensorScatter-24, Attention-24). Inputs: write_indices [B] and
// nonpad_kv_seqlen [B] (int64), new key/value (B, S, kv_hidden) (or packed
// query), and the cache buffers as present_key/present_value, shaped 3-D
// [B, C, kv_hidden] or BNSH [B, N_kv, C, H]; past_key/past_value must be absent
// or alias the present buffers; seqlens_k and total_sequence_length must be
// absent. Row b has n_b = nonpad_kv_seqlen[b] - write_indices[b] valid new rows
// (0 <= n_b <= S). Row s < n_b is written at slot write_indices[b] + s
// (kLinear; must stay < C, never wraps) or (write_indices[b] + s) mod C
// (kCircular, window-sized caches). Query s attends at absolute position
// p = write_indices[b] + s over keys j < nonpad_kv_seqlen[b], j <= p, p - j < W.
// Query rows s >= n_b are padding: their output is zero and they write nothing.
// kCircular requires causal = 1, local_window_size = W > 0 and C >= W + S - 1
// (every key a query needs is still resident).
// Read-only form (KV-shared layers, kvshare extension): key/value absent and the
// query unpacked (last dim N*H, H taken from the cache: dim 3 of BNSH, or
// kv_hidden / N_kv of 3-D). Same positions and visibility as above, Q-only RoPE
// at write_indices[b] + s, and NOTHING is written: rows [write_indices[b],
// nonpad_kv_seqlen[b]) must already hold this step's K/V (written by the source
// layer's call). The cache is still bound as present_key/present_value.
//
// Blocked KV: the optimized kernel walks keys in blocks with an online softmax
// (running max and denominator). kv_block_size (or num_kv_blocks) fixes the
// block length; every block length gives the unblocked result to fp32
// rounding. Results are bitwise identical for any thread count.
//
// ---------------------------------------------------------------------------
// q8_0 caches (DType::kQ8_0, tensor.h; llama.cpp's -ctk q8_0 -ctv q8_0). Past,
// present and scatter caches (and external K/V) may be q8_0: per row of H
// values, H / 32 blocks of {fp16 scale d, int8 q[32]}, 34 bytes per 32 values;
// shapes stay in elements, and H must be a multiple of 32 (else kvshare::Error
// naming the input and head_size). New K/V rows (K after RoPE) are quantized
// per block when written: d = max|x| / 127 rounded to fp16, q = round(x / d),
// element error e <= (1 + 2^-10) * max|x| / 254 + 2^-17 (common/q8_0.h). Both
// kernels read the blocks in place (the reference dequantizes element by
// element and accumulates in double; the optimized kernel widens codes in
// registers). Error against the same op on a float32 cache holding the
// unquantized K/V, for query head h, query s (scores x_j, weights p_j):
//   |dx_j| <= scale * sum over blocks c of ||q_c||_1 * eK_{j,c} =: eps_j
//   (softcap is 1-Lipschitz, bias is exact),
//   |d out_i| <= (exp(2 eps) - 1) * max_j |v_{j,i}| + max_j eV_{j,i},
// eps = max over visible j of eps_j, eK / eV the element bounds of the K / V
// blocks. (Each p_j moves by a factor within exp(+-2 eps): the numerator by
// exp(+-eps), the normalizer, a weighted mean of exp(dx), by exp(+-eps); the V
// error enters through weights summing to <= 1.) tests/attention_q8_test.cc
// checks this bound per output element.
//
// ---------------------------------------------------------------------------
// Errors: every bad shape, dtype, range or combination raises kvshare::Error
// naming the input, the expected and the actual value (ORT's wording where one
// exists). Out-of-range seqlens_k, write_indices, nonpad_kv_seqlen,
// position_ids and bidirectional_spans are errors, never out-of-bounds
// accesses. bidirectional_spans errors name the row b and the pair k: a
// wrong dtype or shape, causal = 0, start < 0, start >= end (other than
// padding), a span after padding, a span that starts before the previous one
// ends (unsorted or overlapping), end > T_b. Validation completes
// before any output or cache is written.
#pragma once

#include <cstdint>
#include <optional>

#include "kvshare/common/tensor.h"

namespace kvshare {

class ThreadPool;

// Attributes of com.microsoft.GroupQueryAttention, plus kvshare extensions.
struct GqaAttributes {
  int num_heads = 0;           // N, > 0
  int kv_num_heads = 0;        // N_kv, > 0, N % N_kv == 0
  int causal = 1;              // 1 causal, 0 bidirectional (a window then is symmetric)
  float scale = 0.0f;          // 0 => 1/sqrt(H)
  float softcap = 0.0f;        // > 0 => softcap * tanh(x / softcap); < 0 is an error
  int local_window_size = -1;  // W keys including the current one; -1 off; 0 is an error
  int do_rotary = 0;           // 1 => RoPE from cos_cache / sin_cache
  int rotary_interleaved = 0;  // 1 => GPT-J pairs (2i, 2i+1); 0 => half split
  int smooth_softmax = -1;     // exactly 1 => sink logit 0 (ORT enables only on 1)
  int qk_output = 0;           // 0 none, 1 scores before softmax, 2 probabilities
  // Extensions.
  int kv_block_size = 0;  // keys per block in the optimized kernel; 0 => chosen
  int num_kv_blocks = 0;  // alternative: split max T into this many blocks; 0 => unused
  enum class ScatterMode { kLinear, kCircular };
  ScatterMode scatter_mode = ScatterMode::kLinear;  // static scatter mode only
};

// Inputs. Absent optional inputs are std::nullopt; a present input may have
// zero elements (the empty K/V of kBorrowedEmptyKv).
struct GqaInputs {
  // (B, S, N*H), or packed QKV (B, S, (N + 2*N_kv)*H), per token [Q | K | V],
  // when key/value are absent, with or without past (append and share-buffer
  // modes; with past, a last dim of N*H instead means kBorrowedOmittedKv).
  // float32, float16 or bfloat16 (call it T).
  ConstTensorView query;
  // (B, S_kv, N_kv*H), T; in kExternalKv (the whole borrowed cache) T or q8_0
  // (key and value alike).
  std::optional<ConstTensorView> key;
  std::optional<ConstTensorView> value;  // (B, S_kv, N_kv*H), as key
  // BNSH (B, N_kv, P, H); float32, float16, bfloat16 or q8_0 (the cache dtype;
  // K and V caches share one dtype, which may differ from T). See "q8_0 caches"
  // above for the block layout, the head-size rule and the error bound.
  std::optional<ConstTensorView> past_key;
  std::optional<ConstTensorView> past_value;
  std::optional<ConstTensorView> seqlens_k;              // int32 [B] ([B,1], [1,B] accepted)
  std::optional<ConstTensorView> total_sequence_length;  // int32 scalar or [1]
  std::optional<ConstTensorView> cos_cache;              // (max_pos, R/2), any float dtype
  std::optional<ConstTensorView> sin_cache;              // (max_pos, R/2)
  std::optional<ConstTensorView> position_ids;           // int64 (B, S)
  std::optional<ConstTensorView> attention_bias;         // (B|1, N|1, S, T_cols), any float dtype
  std::optional<ConstTensorView> head_sink;              // (N), any float dtype
  // Static scatter mode.
  std::optional<ConstTensorView> write_indices;     // int64 [B]
  std::optional<ConstTensorView> nonpad_kv_seqlen;  // int64 [B]
  // int64 [B, K, 2]: per row K pairs [start, end) of absolute positions,
  // sorted, disjoint, each end <= T_b, then (0, 0) padding ("Bidirectional
  // spans" above). causal = 1 only; CPU only.
  std::optional<ConstTensorView> bidirectional_spans;
};

// Outputs. The caller allocates every buffer.
struct GqaOutputs {
  TensorView output;  // (B, S, N*H), dtype T
  // BNSH (B, N_kv, C, H) (or 3-D in scatter mode), a KV cache dtype (float or
  // q8_0): the past's dtype when past is given.
  std::optional<TensorView> present_key;
  std::optional<TensorView> present_value;
  std::optional<TensorView> output_qk;  // (B, N, S, T_cols), float32 or T
};

enum class GqaKernel {
  kAuto,       // optimized CPU kernel
  kReference,  // plain loops, double accumulation (the oracle)
  kOptimized,  // blocked online-softmax kernel (Highway SIMD, threads)
};

// Arithmetic of the optimized CPU kernel's score (Q K^T) and value (P V)
// products (GqaRunOptions::matmul_precision).
enum class GqaMatMulPrecision {
  kF32,   // f32 throughout (the optimized kernel; the default)
  kBf16,  // bf16 products with f32 accumulation (AMX tiles or oneDNN), see below
};

struct GqaRunOptions {
  GqaKernel kernel = GqaKernel::kAuto;
  // Threads for the optimized kernel; null => run on the calling thread.
  ThreadPool* pool = nullptr;
  // Where the op runs. Device::kCuda (src/cuda/, KVSHARE_CUDA builds):
  //  - in device memory (cudaMalloc or managed): query, key, value, past_*,
  //    present_*, cos_cache, sin_cache, attention_bias, head_sink, output,
  //    output_qk;
  //  - in host memory: the index inputs seqlens_k, total_sequence_length,
  //    position_ids, write_indices, nonpad_kv_seqlen and bidirectional_spans.
  //    Validation reads them there, with the same code and messages as on the
  //    CPU, before anything is launched; the kernels get a device copy (of the
  //    spans: the per-query causal bound they imply).
  // kernel must be kAuto or kOptimized (the reference kernel is CPU-only).
  // The call returns when the work on cuda_stream is complete (unless
  // cuda_async, below); a CUDA failure
  // (no device or driver, a host pointer where device memory is required, a
  // failed launch or allocation) raises kvshare::Error naming the call.
  // Numerics: fp32 accumulation and the same score pipeline; the cache rows
  // written (RoPE, fp16 / bf16 / q8_0 rounding) are bitwise the CPU's. Over
  // fp16 / bf16 K/V without attention_bias or output_qk (H 64 / 128 / 256 /
  // 512) the tensor-core kernel runs, which rounds the queries and the
  // probabilities to the K/V dtype (FlashAttention-2's scheme, Dao 2023):
  // outputs then match the CPU within the 16-bit tolerance (1e-2 relative to
  // the largest output; measured errors in docs/kernels.md). Every other case, and every case with KVSHARE_CUDA_PLAIN=1
  // in the environment, runs fp32 kernels that match within the fp32 / fp16 tolerance table (1e-5 / 1e-2 relative).
  Device device = Device::kCpu;
  void* cuda_stream = nullptr;  // cudaStream_t for kCuda; null => the legacy default stream
  // kCuda, for kvshare's own callers (the GPU model): scratch the op reuses
  // across calls (a detail::GqaCudaWorkspace, src/cuda/gqa_workspace.h)
  // instead of allocating and freeing it in each call; null => per call.
  void* cuda_workspace = nullptr;
  // kCuda with cuda_workspace: true => the call returns once its work is
  // queued on cuda_stream, without waiting for it (the index inputs are
  // copied into the workspace's pinned memory, which stays valid until the
  // caller resets it); once the workspace has grown the call allocates,
  // frees and synchronizes nothing, so it may be captured into a CUDA graph
  // (a growth while capturing raises kvshare::Error instead). false, or no
  // workspace: the call returns when the work is complete.
  bool cuda_async = false;
  // kBf16 (src/attention/cpu_attend_bf16.cc, the vision encoders' bf16
  // precision, docs/vision.md "Precision"): per query head h (KV head h / G)
  // and batch row b, the T_b keys and values are rounded to bf16 (nearest
  // even) once; each block of 64 queries (bf16) gets f32 scores x = Q K^T
  // from one oneDNN bf16 matmul, then per row p_j = bf16(exp(scale (x_j -
  // max x))) in f32, out = (P V) / sum_j p_j with P V a second bf16 matmul in
  // f32. Blocks are pool tasks; a row's result does not depend on the thread
  // count. Error against exact attention over the same f32 inputs, u = 2^-8
  // (one bf16 rounding), gamma_n = n 2^-24 / (1 - n 2^-24), per output
  // element i of query head h, query s:
  //   eps = scale * max_j sum_d |q_d k_jd| * (2u + u^2 + gamma_H (1 + u)^2)
  //   r   = exp(2 eps) (1 + u) / (1 - u) * (1 + 2^-16) - 1
  //   |d out_i| <= ((1 + r)(1 + u)(1 + gamma_T)^2 (1 + 2^-24) - 1) max_j |v_ji|
  // Why: bf16 times bf16 is exact in f32, so a score moves by <= eps (the
  // two roundings, then H f32 sums), and each softmax weight by a factor
  // within exp(+-2 eps) (numerator and normalizer); rounding p_j to bf16
  // moves a weight by (1 +- u) / (1 -+ u); 2^-16 covers f32 exp, its
  // argument's rounding (|argument| < 88, else p_j underflows to a
  // negligible 0) and the division; the bf16 V adds u, the f32 sums of p
  // and of P V gamma_T each, the final product 2^-24; the weights sum to 1.
  // A worst case (every rounding aligned): about 0.1 max |v| for unit-normal
  // q, k at H = 64 and scale 1/8; tests/attention_bf16_test.cc checks it per
  // element and measures 3e-3 to 7e-3 absolute there (the 1e-3 level of
  // max |v|, under 5% of the bound).
  // On a CPU where GqaBf16CoversCausal() (Intel AMX), kBf16 runs the
  // optimized kernel's blocked online softmax instead, with its two products
  // on AMX tiles (tdpbf16ps; src/attention/amx_attend.h): the same bf16
  // roundings of the scaled queries, K, p and V (p before normalization, per
  // block of keys), f32 sums in a fixed order, and per block of keys one f32
  // rescale of the running sums; the bound above holds with gamma_T replaced
  // by gamma_2T. It covers every mode of the optimized kernel but q8_0 K/V,
  // and a row's result depends only on its own query and visible keys: not
  // on the other rows, chunks or steps of a sequence, nor the thread count.
  // Elsewhere (oneDNN):
  // It covers bidirectional attention over the call's key / value inputs
  // (append mode, or kExternalKv): causal = 0, no local window, softcap,
  // attention_bias, head_sink / smooth_softmax, output_qk, past_key /
  // past_value or static scatter (write_indices), K/V not q8_0, kernel kAuto
  // or kOptimized, device kCpu; RoPE, GQA groups, the query dtypes, packed
  // QKV and present outputs work as in f32. Any other combination throws
  // kvshare::Error naming matmul_precision and the parameter (never a silent
  // fallback), as does a CPU where oneDNN has no bf16 matmul (below
  // AVX-512), before anything is written.
  GqaMatMulPrecision matmul_precision = GqaMatMulPrecision::kF32;
};

// Whether GqaMatMulPrecision::kBf16 covers every mode of the optimized CPU
// kernel but q8_0 K/V (causal prompts and decode steps, windows, softcap,
// bias, sinks, past / present, scatter, output_qk) in this process: the AMX
// tile form (Intel AMX-BF16 usable, AVX512-BF16, KVSHARE_KERNEL unset or
// amx). false: kBf16 covers the bidirectional calls listed above only.
bool GqaBf16CoversCausal();

enum class KvMode {
  kAppend,
  kShareBuffer,
  kBorrowedEmptyKv,
  kBorrowedOmittedKv,
  kExternalKv,
  kStaticScatter,
};
const char* KvModeName(KvMode mode);

// Which KV-source mode the inputs select. Throws kvshare::Error when they
// select none (for example key without value).
KvMode DetectKvMode(const GqaAttributes& attrs, const GqaInputs& inputs, const GqaOutputs& outputs);

// Runs the op. Validates everything first (throws kvshare::Error and writes
// nothing on bad input), then writes present / cache rows, then attention.
// Thread-safe for distinct outputs. On the CPU each calling thread keeps its
// rotated-query scratch (B * S * num_heads * head_size floats, up to 64 MiB;
// larger ones are freed after the call) for its next call.
void GroupQueryAttention(const GqaAttributes& attrs, const GqaInputs& inputs, const GqaOutputs& outputs,
                         const GqaRunOptions& options = {});

}  // namespace kvshare
