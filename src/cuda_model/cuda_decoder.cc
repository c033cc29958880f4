// The GPU decoder shared by the families (cuda_decoder.h).
#include "cuda_model/cuda_decoder.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cuda/cuda_check.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"
#include "model/batch_steps.h"

namespace kvshare::detail {

float* Rows(DevBuf& b, std::int64_t rows, std::int64_t width) {
  Grow(b, static_cast<std::size_t>(rows * width) * 4, kActivations);
  return As<float>(b);
}

float* Sized(const DevBuf& b, std::int64_t rows, std::int64_t width, const char* what, int layer) {
  const auto need = static_cast<std::size_t>(rows * width) * 4;
  if (b.device() != Device::kCuda || b.size() < need) {
    throw Error("Forward (device cuda): layer " + std::to_string(layer) + ": step buffer '" + what + "' holds " +
                std::to_string(b.size()) + " bytes, needs " + std::to_string(rows) + " rows of " +
                std::to_string(width) + " floats (" + std::to_string(need) + " bytes): it was sized for another layer");
  }
  return As<float>(b);
}

CudaDecoder::CudaDecoder(std::unique_ptr<Model> cpu, const CudaModelOptions& options)
    : cpu_(std::move(cpu)), options_(options) {
  cpu_decoder_ = dynamic_cast<const DecoderModel*>(cpu_.get());
  if (cpu_decoder_ == nullptr) {
    throw Error("MoveModelToCuda: architecture '" + cpu_->config().architecture +
                "' is not a decoder model kvshare runs on the GPU; use device cpu");
  }
  if (options.weights != DType::kBFloat16 && options.weights != DType::kFloat32) {
    throw Error("MoveModelToCuda: CudaModelOptions::weights is " + std::string(DTypeName(options.weights)) +
                "; expected bfloat16 or float32");
  }
  RequireCudaDevice("MoveModelToCuda");
  graphs_ = options.cuda_graphs && CudaGraphsFromEnv();
  CudaCheck(cudaStreamCreate(&stream_), "MoveModelToCuda: stream creation");
  blas_ = std::make_unique<Blas>();
  const DecoderModel& m = *cpu_decoder_;
  embd_ = UploadMatrix(m.embedding_table(), "token_embd.weight", options.weights);
  if (m.lm_head().data != m.embedding_table().data)
    out_w_ = UploadMatrix(m.lm_head(), "output.weight", options.weights);
  out_norm_ = UploadFloats(m.output_norm(), config().n_embd, kWeights);
}

CudaDecoder::~CudaDecoder() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::unique_ptr<CudaDecoderState> CudaDecoder::MakeState(KvCache cache, const ModelStateOptions& o) const {
  return std::make_unique<CudaDecoderState>(std::move(cache), o);
}

std::unique_ptr<ModelState> CudaDecoder::NewState(const ModelStateOptions& o) const {
  const ModelConfig& c = config();
  std::unique_ptr<CudaDecoderState> st = MakeState(NewStateCache(c, o, Device::kCuda), o);
  st->step_spans.resize(static_cast<std::size_t>(st->max_batch()));
  st->rope_pos = o.max_context;
  st->bidirectional_layer = BidirectionalLayers(c, o.image_attention.value_or(c.image_attention));
  st->causal = c.causal;
  for (const RopeFamily& f : cpu().rope_families()) {
    const RopeTable t = BuildRopeTable(f, o.max_context);
    st->cos.push_back(UploadFloats(t.cos.data(), static_cast<std::int64_t>(t.cos.size()), "RoPE table allocation"));
    st->sin.push_back(UploadFloats(t.sin.data(), static_cast<std::int64_t>(t.sin.size()), "RoPE table allocation"));
    st->rope_half.push_back(t.half);
  }
  return st;
}

std::span<const float> CudaDecoder::Forward(ModelState& state, std::span<const std::int32_t> tokens, ThreadPool* pool,
                                            const ForwardOptions& options) const {
  if (tokens.empty()) throw Error("Forward: tokens is empty");
  const BatchEntry one{.row = 0, .tokens = tokens, .num_logits = options.num_logits, .embeddings = options.embeddings};
  return ForwardBatch(state, std::span<const BatchEntry>(&one, 1), pool);
}

std::span<const float> CudaDecoder::ForwardBatch(ModelState& base, std::span<const BatchEntry> entries,
                                                 ThreadPool*) const {
  auto* state = dynamic_cast<CudaDecoderState*>(&base);
  if (state == nullptr) throw Error("Forward: the state was not made by this model's NewState");
  CudaDecoderState& st = *state;
  const ModelConfig& c = config();
  if (entries.empty()) throw Error("ForwardBatch: no entries");
  const std::lock_guard<std::mutex> lock(device_mu_);
  RequireGenerates(c);
  const bool bidi =
      std::find(st.bidirectional_layer.begin(), st.bidirectional_layer.end(), true) != st.bidirectional_layer.end();
  BatchSteps steps(st, c, entries, st.max_step_, bidi);
  const std::int64_t E = c.n_embd, V = c.n_vocab;
  st.logits.resize(static_cast<std::size_t>(steps.total_logits() * V));
  st.hidden_rows.resize(static_cast<std::size_t>(steps.total_logits() * E));
  const StreamScope on(stream_);
  try {
    Step step;
    while (steps.Next(step, st.step_spans)) {
      // The previous step's work is complete (its synchronize below).
      st.staging.Reset();
      st.attn_ws.Reset();
      const std::int64_t kept = DecoderModel::KeptRows(step);
      float* logits = nullptr;
      float* rows = DeviceStep(st, step, kept, &logits);
      if (kept == 0) {
        CudaCheck(cudaStreamSynchronize(stream_), "Forward (device cuda)");
        continue;
      }
      const auto hidden_bytes = static_cast<std::size_t>(kept * E) * 4,
                 head_bytes = static_cast<std::size_t>(kept * V) * 4;
      auto* hidden = static_cast<float*>(st.staging.Take(hidden_bytes, stream_, "Forward (device cuda): hidden rows"));
      auto* head = static_cast<float*>(st.staging.Take(head_bytes, stream_, "Forward (device cuda): logits"));
      DownloadAsync(hidden, rows, hidden_bytes, "Forward (device cuda): hidden rows download");
      DownloadAsync(head, logits, head_bytes, "Forward (device cuda): logits download");
      CudaCheck(cudaStreamSynchronize(stream_), "Forward (device cuda)");
      const std::span<const std::int64_t> dest = steps.dest();
      std::int64_t at = 0;
      for (std::size_t r = 0; r < step.rows.size(); ++r) {
        const std::int64_t keep = step.rows[r].keep;
        std::copy(hidden + at * E, hidden + (at + keep) * E, st.hidden_rows.begin() + dest[r] * E);
        std::copy(head + at * V, head + (at + keep) * V, st.logits.begin() + dest[r] * V);
        at += keep;
      }
    }
  } catch (...) {
    cudaStreamSynchronize(stream_);  // nothing queued may still read the staging memory
    cudaGetLastError();
    steps.Restore(st);
    throw;
  }
  return st.logits;
}

float* CudaDecoder::DeviceStep(CudaDecoderState& st, const Step& step, std::int64_t kept, float** logits) const {
  float* rows = nullptr;
  const auto work = [&] {
    rows = RunStep(st, step);
    if (kept > 0) *logits = Head(st, rows, kept);
  };
  const DecodeGraphPolicy policy{
      .enabled = graphs_, .family_capturable = CapturableDecode(), .probing = static_cast<bool>(st.layer_probe)};
  if (CaptureDecodeStep(step, policy) && st.graphs.Warm(DecodeGraphKey(step))) {
    std::vector<std::int64_t> before;  // the step rows' lengths, to put back after a failed capture
    for (const StepRow& r : step.rows) before.push_back(st.cache.Length(r.row));
    const bool fail = st.fail_captures > 0;
    if (fail) --st.fail_captures;
    std::string why;
    if (st.graphs.Run(stream_, DecodeGraphKey(step), work, fail, &why, st.graph_stats)) return rows;
    // Nothing of the capture ran on the device: the host side (the cache's
    // reservations and lengths) goes back to before the step.
    for (std::size_t i = 0; i < step.rows.size(); ++i) st.Rewind(step.rows[i].row, before[i]);
    ++st.graph_stats.capture_failures;
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      std::fprintf(stderr, "kvshare: a decode step ran eagerly, not as a CUDA graph (%s); later steps capture again "
                   "(expected once where a step buffer grows; printed once)\n",
                   why.c_str());
    }
  }
  ++st.graph_stats.eager_steps;
  rows = nullptr;
  *logits = nullptr;
  work();
  return rows;
}

float* CudaDecoder::Head(CudaDecoderState& st, float* rows, std::int64_t kept) const {
  const ModelConfig& c = config();
  const std::int64_t V = c.n_vocab;
  RmsNormDevice(rows, kept, c.n_embd, As<float>(out_norm_), c.rms_eps);
  const DevMatrix& head = out_w_.rows > 0 ? out_w_ : embd_;
  float* logits = Rows(st.head, kept, V);
  blas_->Project(head, rows, kept, logits, st.xb);
  if (cpu().final_softcap() > 0) SoftcapDevice(logits, kept * V, cpu().final_softcap());
  return logits;
}

void CudaDecoder::EmbedStep(CudaDecoderState& st, const Step& step, std::vector<std::int32_t>* ple_ids) const {
  const ModelConfig& c = config();
  const auto T = static_cast<std::int64_t>(step.tokens.size());
  const std::int64_t E = c.n_embd;
  Grow(st.tok, static_cast<std::size_t>(T) * 4, kActivations);
  StepUpload(st, st.tok.data(), step.tokens.data(), static_cast<std::size_t>(T) * 4,
             "Forward (device cuda): token upload");
  float* x = Rows(st.x, T, E);
  EmbedRowsDevice(embd_, As<int>(st.tok), T, std::sqrt(static_cast<float>(E)), x);
  // Image / audio rows and hard-token rows: gathered on the host in step
  // order, uploaded once (staged: a decode step with a hard token is
  // captured too), scattered over their tokens' rows.
  const std::shared_ptr<const std::vector<HardTokenRows>> hard = cpu_->hard_token_rows();
  const StepInputRows given = GivenStepRows(step, hard.get(), c.n_embd, ple_ids);
  const auto n = static_cast<std::int64_t>(given.at.size());
  if (n > 0) {
    st.given_host.resize(static_cast<std::size_t>(n * E));
    for (std::int64_t i = 0; i < n; ++i) {
      const float* row = given.rows[static_cast<std::size_t>(i)];
      std::copy(row, row + E, st.given_host.begin() + i * E);
    }
    float* rows = Rows(st.given, n, E);
    StepUpload(st, rows, st.given_host.data(), st.given_host.size() * 4,
               "Forward (device cuda): embedding rows upload");
    Grow(st.given_at, static_cast<std::size_t>(n) * 8, kActivations);
    StepUpload(st, st.given_at.data(), given.at.data(), static_cast<std::size_t>(n) * 8,
               "Forward (device cuda): embedding row map upload");
    ScatterRowsDevice(rows, n, E, As<std::int64_t>(st.given_at), x);
  }
  st.src.resize(static_cast<std::size_t>(T));
  for (std::int64_t i = 0; i < T; ++i) st.src[static_cast<std::size_t>(i)] = i;
  Grow(st.src_dev, static_cast<std::size_t>(T) * 8, kActivations);
  StepUpload(st, st.src_dev.data(), st.src.data(), static_cast<std::size_t>(T) * 8,
             "Forward (device cuda): row map upload");
}

void CudaDecoder::StepUpload(CudaDecoderState& st, void* dev, const void* host, std::size_t bytes, const char* what) {
  StageUpload(st.staging, dev, host, bytes, what);
}

void CudaDecoder::SetSpans(CudaDecoderState& st, std::span<const QuerySpan> spans) const {
  st.pack = PlanAttention(spans);
  st.spans.assign(spans.begin(), spans.end());
  if (st.pack.in_place) return;
  const std::size_t bytes = st.pack.packed_row.size() * 8;
  Grow(st.pack_map, bytes, kActivations);
  StepUpload(st, st.pack_map.data(), st.pack.packed_row.data(), bytes,
             "Forward (device cuda): attention row map upload");
}

void CudaDecoder::Attend(CudaDecoderState& st, int layer, bool owns, int head_dim, int kv_dim, float scale) const {
  const AttentionPacking& p = st.pack;
  const int n_head = config().n_head;
  const std::int64_t qd = static_cast<std::int64_t>(n_head) * head_dim;
  const std::int64_t rows = p.flat_rows;
  const float* q = Sized(st.q, rows, qd, "q", layer);
  const float* k = owns ? Sized(st.k, rows, kv_dim, "k", layer) : nullptr;
  const float* v = owns ? Sized(st.v, rows, kv_dim, "v", layer) : nullptr;
  float* out = Sized(st.attn, rows, qd, "attn", layer);
  const auto family = static_cast<std::size_t>(cpu().layer_rope()[static_cast<std::size_t>(layer)]);
  LayerAttendArgs args;
  args.cos_cache = ConstTensorView{As<float>(st.cos[family]), DType::kFloat32, {st.rope_pos, st.rope_half[family]}};
  args.sin_cache = ConstTensorView{As<float>(st.sin[family]), DType::kFloat32, {st.rope_pos, st.rope_half[family]}};
  args.attrs.num_heads = n_head;
  args.attrs.scale = scale;
  args.attrs.causal = st.causal ? 1 : 0;  // an encoder's layers: bidirectional, a window symmetric
  args.attrs.do_rotary = 1;
  args.attrs.rotary_interleaved = 0;  // NeoX half split
  args.run.device = Device::kCuda;
  args.run.cuda_stream = Stream();
  args.run.cuda_workspace = &st.attn_ws;
  args.run.cuda_async = true;
  args.query_offsets = p.query_offsets;
  args.bidirectional_spans = BidirectionalSpansArg(st, layer, st.spans, p.in_place ? 1 : p.B);
  if (p.in_place) {  // one span of row 0: its flat rows as they are
    const std::int64_t begin = p.flat_rows - p.S, S = p.S;
    args.query = ConstTensorView{q + begin * qd, DType::kFloat32, {1, S, qd}};
    if (owns) {
      args.key = ConstTensorView{k + begin * kv_dim, DType::kFloat32, {1, S, kv_dim}};
      args.value = ConstTensorView{v + begin * kv_dim, DType::kFloat32, {1, S, kv_dim}};
    }
    args.output = TensorView{out + begin * qd, DType::kFloat32, {1, S, qd}};
    AttendLayer(st.cache, layer, args);
    return;
  }
  // Packed (B, S, ...): padding rows are never read (the op skips padding
  // queries, writes no padding K/V and writes every output row).
  const std::int64_t B = p.B, S = p.S, R = p.flat_rows;
  const auto* map = As<std::int64_t>(st.pack_map);
  float* pq = Rows(st.pq, B * S, qd);
  float* pout = Rows(st.pout, B * S, qd);
  ScatterRowsDevice(q, R, qd, map, pq);
  args.query = ConstTensorView{pq, DType::kFloat32, {B, S, qd}};
  args.output = TensorView{pout, DType::kFloat32, {B, S, qd}};
  if (owns) {
    float* pk = Rows(st.pk, B * S, kv_dim);
    float* pv = Rows(st.pv, B * S, kv_dim);
    ScatterRowsDevice(k, R, kv_dim, map, pk);
    ScatterRowsDevice(v, R, kv_dim, map, pv);
    args.key = ConstTensorView{pk, DType::kFloat32, {B, S, kv_dim}};
    args.value = ConstTensorView{pv, DType::kFloat32, {B, S, kv_dim}};
  }
  AttendLayer(st.cache, layer, args);
  GatherRowsDevice(pout, qd, map, R, qd, out);
}

void CudaDecoder::PackKept(CudaDecoderState& st, const Step& step, std::span<const std::pair<DevBuf*, int>> buffers,
                           std::vector<QuerySpan>* spans) const {
  const std::int64_t kept = DecoderModel::KeptRows(step);
  std::vector<std::int64_t> from(step.tokens.size());
  DecoderModel::PackKeptRows(step, {}, 1, spans, &from);  // no host buffers: the spans and the row map only
  from.resize(static_cast<std::size_t>(kept));
  Grow(st.src_dev, static_cast<std::size_t>(std::max<std::int64_t>(kept, 1)) * 8, kActivations);
  StepUpload(st, st.src_dev.data(), from.data(), from.size() * 8, "Forward (device cuda): row map upload");
  for (const auto& [buf, width] : buffers) {
    float* tmp = Rows(st.tmp, kept, width);
    GatherRowsDevice(As<float>(*buf), width, As<std::int64_t>(st.src_dev), kept, width, tmp);
    CopyDevice(As<float>(*buf), tmp, kept * width);
  }
  st.src = std::move(from);  // src_dev's host copy
  if (spans != nullptr) SetSpans(st, *spans);
}

bool CudaDecoder::RunLayers(CudaDecoderState& st, const Step& step, const LayerFn& layer,
                            const std::function<const float*()>& probed) const {
  const ModelConfig& c = config();
  for (const StepRow& r : step.rows) st.cache.Reserve(r.row, r.n);
  const LayerPlan& plan = st.cache.Plan();
  std::vector<QuerySpan> spans = DecoderModel::FullSpans(step);
  SetSpans(st, spans);
  const std::int64_t kept = DecoderModel::KeptRows(step);
  const int cut = DecoderModel::CutAfterAttention(st, plan, kept, static_cast<std::int64_t>(step.tokens.size()));
  for (int l = 0; l < c.n_layer; ++l) {
    if (!layer(l, spans, plan.layers[static_cast<std::size_t>(l)].owns_cache, l == cut ? &step : nullptr)) break;
    if (st.layer_probe) {
      std::int64_t rows = 0;
      for (const QuerySpan& sp : spans) rows += sp.n;
      std::vector<float> host(static_cast<std::size_t>(rows * c.n_embd));
      Download(host.data(), probed(), host.size() * 4, "Forward (device cuda): layer probe download");
      st.layer_probe(l, host);
    }
  }
  for (const StepRow& r : step.rows) st.cache.Commit(r.row);
  return cut >= 0;
}

void CudaDecoder::GrowStep(CudaDecoderState& st, std::int64_t T, int E, std::int64_t qd, std::int64_t kvd,
                           std::int64_t ff) {
  for (DevBuf* b : {&st.h, &st.o, &st.f}) Rows(*b, T, E);
  Rows(st.q, T, qd);
  Rows(st.attn, T, qd);
  Rows(st.k, T, kvd);
  Rows(st.v, T, kvd);
  Rows(st.g, T, ff);
  Rows(st.u, T, ff);
}

}  // namespace kvshare::detail

namespace kvshare {

CudaGraphStats CudaGraphStatsOf(const ModelState& state) {
  const auto* st = dynamic_cast<const detail::CudaDecoderState*>(&state);
  return st != nullptr ? st->graph_stats : CudaGraphStats{};
}

void FailCudaGraphCaptures(ModelState& state, int n) {
  if (auto* st = dynamic_cast<detail::CudaDecoderState*>(&state)) st->fail_captures = n;
}

}  // namespace kvshare
