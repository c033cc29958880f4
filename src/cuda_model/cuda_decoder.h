// What the GPU models of the decoder families share (the GPU twin of
// model/decoder.h's DecoderModel): the state (a DecoderState over a device
// KvCache, with RoPE tables and step scratch in device memory), ForwardBatch
// over the CPU model's own step plan (BatchSteps: decode rows and prompt
// chunks of any rows in lock-step), the attention call with its rows packed
// as the CPU's Attend packs them (PlanAttention), the prefill cut
// (CutAfterAttention, PackKeptRows' order), and the LM head (output norm,
// projection, final softcap). Families implement RunStep. Internal to
// src/cuda_model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "cuda/gqa_workspace.h"
#include "cuda/pinned_staging.h"
#include "cuda_model/device_ops.h"
#include "cuda_model/step_graphs.h"
#include "kvshare/cuda_model/model_cuda.h"
#include "model/decoder.h"

namespace kvshare::detail {

class CudaDecoderState : public DecoderState {
 public:
  CudaDecoderState(KvCache cache, const ModelStateOptions& o) : DecoderState(std::move(cache), o, nullptr) {}

  std::vector<DevBuf> cos, sin;  // per RoPE family (DecoderModel::rope_families): [rope_pos, rope_half]
  std::vector<int> rope_half;
  std::int64_t rope_pos = 0;
  // One step's scratch, fp32 rows of the step's T tokens unless said; grown
  // to the largest step so far (Grow / Rows).
  DevBuf x, h, o, f;                          // [T, E]: residual, normed input, block outputs
  DevBuf q, attn, k, v;                       // [T, N * H], [T, N_kv * H] (the widest layer)
  DevBuf g, u;                                // [T, widest MLP or per-layer input]
  DevBuf tmp;                                 // [T, widest row] PackKept's gather target
  DevBuf xb;                                  // bf16 projection input (Blas::Project)
  DevBuf tok;                                 // int32 [T] token ids
  DevBuf pq, pk, pv, pout;                    // (B, S, ...) packed attention rows
  DevBuf pack_map;                            // int64 [flat rows]: pack.packed_row
  DevBuf src_dev;                             // int64 [rows of x]: src
  DevBuf head;                                // [kept, n_vocab] logits
  AttentionPacking pack;                      // the current spans' packing (SetSpans)
  std::vector<QuerySpan> spans;               // the current spans (SetSpans): the op's bidirectional spans
  DevBuf given, given_at;                     // [n, E] rows over the token embeddings (EmbedStep), int64 [n]
  std::vector<float> given_host;              // given's host staging
  std::vector<std::int64_t> src;              // the step token each row of x holds (identity until the cut)
  // CUDA graphs of decode steps (docs/gpu.md): the step's uploads (pinned,
  // StageUpload) and downloads, reused from each step's start; the attention
  // op's scratch (GqaRunOptions::cuda_workspace, its calls asynchronous); the
  // executable graphs by row count; counts; FailCudaGraphCaptures' hook.
  PinnedStaging staging;
  GqaCudaWorkspace attn_ws;
  StepGraphs graphs;
  CudaGraphStats graph_stats;
  int fail_captures = 0;
};

class CudaDecoder : public Model {
 public:
  ~CudaDecoder() override;
  const ModelConfig& config() const override { return cpu_->config(); }
  const GgufFile& gguf() const override { return cpu_->gguf(); }
  const std::vector<std::string>& warnings() const override { return cpu_->warnings(); }
  void EmbedTokens(std::span<const std::int32_t> tokens, float* out) const override { cpu_->EmbedTokens(tokens, out); }
  // Gemma 3n's hard-token rows live in the CPU model (its checks, its
  // snapshot); EmbedStep uploads the rows a step uses.
  void SetHardTokenRows(std::vector<HardTokenRows> ranges) override { cpu_->SetHardTokenRows(std::move(ranges)); }
  std::shared_ptr<const std::vector<HardTokenRows>> hard_token_rows() const override { return cpu_->hard_token_rows(); }
  std::unique_ptr<ModelState> NewState(const ModelStateOptions& options) const override;
  std::span<const float> Forward(ModelState& state, std::span<const std::int32_t> tokens, ThreadPool* pool,
                                 const ForwardOptions& options) const override;
  // The CPU model's checks and steps (BatchSteps), embedding spans (image
  // and audio rows; bidirectional on the layers of the state's image
  // attention, BidirectionalLayers) included.
  std::span<const float> ForwardBatch(ModelState& state, std::span<const BatchEntry> entries,
                                      ThreadPool* pool) const override;
  // Sentence embeddings (embed_cuda.cc): each group's step through the
  // layers on the device (an encoder bidirectional: ModelConfig::causal),
  // its final rows downloaded, then the CPU model's pooling, dense head and
  // norms on the host (EmbedInputs, model/decoder.h).
  std::vector<float> Embed(std::span<const std::vector<std::int32_t>> inputs, const EmbedOptions& options,
                           ThreadPool* pool) const override;
  // Gemma 4's assistant on this model's device (gemma4_assistant_cuda.h).
  std::unique_ptr<AssistantModel> AssistantOnDevice(const AssistantModel& assistant) const override;

 protected:
  // cpu: a loaded DecoderModel. Checks for a usable device, then uploads the
  // token table, the LM head (shared with the table when tied) and the
  // output norm. Throws kvshare::Error.
  CudaDecoder(std::unique_ptr<Model> cpu, const CudaModelOptions& options);

  // A state over the device `cache` (families add scratch); the base uploads
  // the RoPE tables after.
  virtual std::unique_ptr<CudaDecoderState> MakeState(KvCache cache, const ModelStateOptions& options) const;
  // One step through every layer, as the CPU family's RunStep: reserves each
  // row's tokens, runs the layers, commits. Returns the final residual rows
  // ([kept, E] device memory, before the output norm) in step.rows order, or
  // null when no row keeps any.
  virtual float* RunStep(CudaDecoderState& st, const Step& step) const = 0;
  // Whether a decode step's device work may be captured into a CUDA graph:
  // false when the family reads device results on the host mid-step (Gemma
  // 4's MoE routing), which a graph cannot.
  virtual bool CapturableDecode() const { return true; }

  // Pieces of a RunStep.
  // st.x [T, E] = the step's token embeddings * sqrt(E), then the rows of
  // GivenStepRows (hard-token rows, the step's embedding spans; host rows,
  // uploaded) over theirs, unscaled, as DecoderModel::EmbedStep; st.src = 0
  // .. T-1. ple_ids (when given): GivenStepRows' per-layer ids.
  void EmbedStep(CudaDecoderState& st, const Step& step, std::vector<std::int32_t>* ple_ids = nullptr) const;
  // A step's upload of host data into device memory (StageUpload through
  // st.staging on the model's stream: capturable).
  static void StepUpload(CudaDecoderState& st, void* dev, const void* host, std::size_t bytes, const char* what);
  // The rows the next attention calls run on: plans their packing
  // (PlanAttention), uploads its map and keeps the spans (st.spans).
  void SetSpans(CudaDecoderState& st, std::span<const QuerySpan> spans) const;
  // Layer l's attention over the current spans (AttendLayer on the device
  // cache, RoPE of the layer's family): st.q [rows, n_head * head_dim] into
  // st.attn, with st.k, st.v [rows, kv_dim] written to the cache when the
  // layer owns its K/V (a KV-shared layer reads its source's). On the
  // state's bidirectional layers the step's image spans go to the op
  // (BidirectionalSpansArg), as the CPU's Attend passes them.
  void Attend(CudaDecoderState& st, int layer, bool owns, int head_dim, int kv_dim, float scale) const;
  // Packs each buffer's kept rows (its rows are the step's tokens in order)
  // to the front as PackKeptRows does; with spans, also repoints them and
  // st.src (the cut) and calls SetSpans.
  void PackKept(CudaDecoderState& st, const Step& step, std::span<const std::pair<DevBuf*, int>> buffers,
                std::vector<QuerySpan>* spans) const;

  // The layers of a step: reserves each row's tokens, plans the spans
  // (SetSpans), runs layer(l, spans, owns, cut) for l = 0, 1, ... until one
  // returns false (cut: the step when l is its prefill cut,
  // CutAfterAttention, else null; the layer packs its rows there and returns
  // false when none is kept), calls DecoderState::layer_probe after each with
  // the rows of probed() (device [rows, E]), commits. Returns whether a cut
  // packed the kept rows (otherwise the caller packs them, PackKept).
  using LayerFn = std::function<bool(int layer, std::vector<QuerySpan>& spans, bool owns, const Step* cut)>;
  bool RunLayers(CudaDecoderState& st, const Step& step, const LayerFn& layer,
                 const std::function<const float*()>& probed) const;
  // st's step buffers grown to T rows: h, o, f [T, E]; q, attn [T, qd]; k,
  // v [T, kvd]; g, u [T, ff].
  static void GrowStep(CudaDecoderState& st, std::int64_t T, int E, std::int64_t qd, std::int64_t kvd, std::int64_t ff);

  const Model& cpu_model() const { return *cpu_; }
  const DecoderModel& cpu() const { return *cpu_decoder_; }
  const Blas& blas() const { return *blas_; }
  const CudaModelOptions& options() const { return options_; }

 private:
  // The kept rows' output norm (in place), the LM head and softcap into
  // st.head; returns the logits [kept, n_vocab] (device).
  float* Head(CudaDecoderState& st, float* rows, std::int64_t kept) const;
  // One step's device work (RunStep, Head) on the model's stream, captured
  // and launched as a graph when it may be (CaptureDecodeStep), else eager;
  // a failed capture puts the step rows back (Rewind) and runs it eagerly.
  // Returns the final rows (null when none is kept); *logits the head's.
  float* DeviceStep(CudaDecoderState& st, const Step& step, std::int64_t kept, float** logits) const;

  std::unique_ptr<Model> cpu_;
  const DecoderModel* cpu_decoder_ = nullptr;
  CudaModelOptions options_;
  std::unique_ptr<Blas> blas_;
  DevMatrix embd_, out_w_;  // out_w_.rows == 0: the LM head is embd_
  DevBuf out_norm_;
  cudaStream_t stream_ = nullptr;  // every state's work (blocking: ordered after default-stream work)
  // Held by ForwardBatch and Embed: they share stream_ and blas_, and the
  // server embeds on its HTTP thread while the scheduler steps (a capture
  // must not see another thread's work on stream_).
  mutable std::mutex device_mu_;
  bool graphs_ = true;             // options.cuda_graphs and KVSHARE_CUDA_GRAPHS
};

// b grown to rows x width floats; its data.
float* Rows(DevBuf& b, std::int64_t rows, std::int64_t width);
// b's data as rows x width floats; throws kvshare::Error naming `what` and
// the layer when b holds fewer (a step buffer sized for a narrower layer
// would otherwise be overrun on the device, silently).
float* Sized(const DevBuf& b, std::int64_t rows, std::int64_t width, const char* what, int layer);

}  // namespace kvshare::detail
