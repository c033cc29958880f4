// Gemma 3 on the GPU (model_cuda.h): the forward pass of src/model/gemma3.cc
// step for step over device buffers. Weights dequantized to bf16 at load
// (DequantizeRow, the CPU's own dequantizer), projections through cuBLAS
// (bf16 inputs, fp32 accumulation and output), RMSNorm / GeGLU / residuals in
// fp32 kernels below, attention through AttendLayer on a device KvCache.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cache/device_bytes.h"
#include "common/float_convert.h"
#include "cuda/cuda_check.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"
#include "kvshare/cuda_model/gemma3_cuda.h"
#include "model/decoder.h"
#include "model/gemma3.h"
#include "quant/quant.h"

namespace kvshare {
namespace {

using detail::CudaCheck;

constexpr int kThreads = 256;

// Device memory owned for a model's or a state's lifetime: the KV cache's
// zero-filled owning buffer (cache/device_bytes.h).
using DevBuf = detail::DeviceBytes;

DevBuf DeviceBuffer(std::size_t bytes, const char* what) { return DevBuf(Device::kCuda, bytes, what); }

template <typename T>
T* As(const DevBuf& b) {
  return reinterpret_cast<T*>(const_cast<unsigned char*>(b.data()));
}

unsigned Blocks(std::int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void CheckLaunch(const char* what) { CudaCheck(cudaGetLastError(), what); }

// x[s, :] = table[tok[s], :] * scale.
__global__ void EmbedKernel(const __nv_bfloat16* table, const int* tok, std::int64_t n, int E, float scale, float* x) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * E) return;
  const std::int64_t s = i / E, e = i % E;
  x[i] = __bfloat162float(table[static_cast<std::int64_t>(tok[s]) * E + e]) * scale;
}

// Each row of n: x / sqrt(mean(x^2) + eps) * w (sum of squares in double, as
// the CPU's RmsNorm), one block per row.
__global__ void RmsNormKernel(float* x, int n, const float* w, float eps) {
  __shared__ double part[kThreads];
  float* row = x + static_cast<std::int64_t>(blockIdx.x) * n;
  double ss = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) ss += static_cast<double>(row[i]) * row[i];
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (static_cast<int>(threadIdx.x) < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(part[0] / n) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) row[i] = row[i] * scale * w[i];
}

__global__ void ToBf16Kernel(const float* x, __nv_bfloat16* y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

// g = gelu_tanh(g) * u (activations.h's GeGLU product).
__global__ void GegluKernel(float* g, const float* u, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = g[i];
  g[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * u[i];
}

__global__ void AddKernel(float* x, const float* o, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += o[i];
}

void RmsNorm(float* x, std::int64_t rows, int n, const float* w, float eps) {
  if (rows == 0) return;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads>>>(x, n, w, eps);
  CheckLaunch("Forward (device cuda): RMSNorm launch");
}

// A weight matrix [rows, cols] in bf16 on the device.
struct DevMatrix {
  DevBuf data;
  std::int64_t rows = 0, cols = 0;
};

constexpr const char* kWeights = "GPU model weights allocation";
constexpr const char* kActivations = "GPU model activations allocation";

// w (a GGUF tensor, TensorLookup-checked) dequantized (DequantizeRow) to bf16
// on the device, a block of rows at a time.
DevMatrix UploadMatrix(const WeightMatrix& w, const std::string& name) {
  DevMatrix m{DeviceBuffer(static_cast<std::size_t>(w.rows * w.cols) * 2, kWeights), w.rows, w.cols};
  constexpr std::int64_t kBlockRows = 1024;
  std::vector<float> row(static_cast<std::size_t>(w.cols));
  std::vector<std::uint16_t> block(static_cast<std::size_t>(std::min(w.rows, kBlockRows) * w.cols));
  for (std::int64_t r0 = 0; r0 < w.rows; r0 += kBlockRows) {
    const std::int64_t n = std::min(kBlockRows, w.rows - r0);
    for (std::int64_t r = 0; r < n; ++r) {
      DequantizeRow(w.type, static_cast<const std::uint8_t*>(w.data) + (r0 + r) * w.row_bytes, row.data(), w.cols);
      for (std::int64_t c = 0; c < w.cols; ++c)
        block[static_cast<std::size_t>(r * w.cols + c)] = detail::F32ToBF16(row[static_cast<std::size_t>(c)]);
    }
    CudaCheck(cudaMemcpy(As<std::uint16_t>(m.data) + r0 * w.cols, block.data(),
                         static_cast<std::size_t>(n * w.cols) * 2, cudaMemcpyHostToDevice),
              (name + ": upload").c_str());
  }
  return m;
}

DevBuf UploadFloats(const float* x, std::int64_t n, const char* what) {
  DevBuf b = DeviceBuffer(static_cast<std::size_t>(n) * 4, what);
  CudaCheck(cudaMemcpy(As<float>(b), x, static_cast<std::size_t>(n) * 4, cudaMemcpyHostToDevice), what);
  return b;
}

using DevLayer = detail::Gemma3Layer<DevMatrix, DevBuf>;

class CudaGemma3State final : public ModelState {
 public:
  CudaGemma3State(KvCache c, const ModelStateOptions& o) : cache(std::move(c)), max_context_(o.max_context) {}
  int max_batch() const override { return cache.Options().max_batch; }
  std::int64_t length(int row) const override { return cache.Length(row); }
  int max_context() const override { return max_context_; }
  std::size_t kv_bytes() const override { return cache.Memory().total_bytes; }
  const KvCache& kv_cache() const override { return cache; }
  void Reset(int row) override { cache.Reset(row); }
  void Rewind(int row, std::int64_t length) override { cache.Rewind(row, length); }

  KvCache cache;
  int max_context_;
  std::vector<DevBuf> cos, sin;  // per RoPE family: [max_context, H / 2]
  int rope_half = 0;
  // Scratch for one step: x, h, o [S_max, E]; q, attn [B * S_max, N * H];
  // k, v [B * S_max, N_kv * H]; g, u [S_max, n_ff]; xb (bf16) the widest input.
  DevBuf x, h, o, q, attn, k, v, g, u, xb, tok, logits_dev;
  std::vector<float> logits;
};

class CudaGemma3 final : public Model {
 public:
  explicit CudaGemma3(std::unique_ptr<Model> cpu) : cpu_(std::move(cpu)) {
    const ModelConfig& c = cpu_->config();
    if (c.architecture != "gemma3") {
      throw Error("MoveModelToCuda: architecture '" + c.architecture +
                  "' has no GPU forward pass yet (gemma3 has); run it with device cpu");
    }
    detail::RequireCudaDevice("MoveModelToCuda");
    // The tensors as the CPU model checked them (TensorLookup: names, shapes, types).
    const detail::TensorLookup t(cpu_->gguf());
    const auto mat = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
      return UploadMatrix(t.Mat(name, rows, cols), name);
    };
    const auto vec = [&](const std::string& name, std::int64_t n) { return UploadFloats(t.Vec(name, n), n, kWeights); };
    embd_ = mat("token_embd.weight", c.n_vocab, c.n_embd);
    if (const auto w = t.MatOpt("output.weight", c.n_vocab, c.n_embd)) out_ = UploadMatrix(*w, "output.weight");
    out_norm_ = vec("output_norm.weight", c.n_embd);
    for (int i = 0; i < c.n_layer; ++i) layers_.push_back(detail::LoadGemma3Layer<DevMatrix, DevBuf>(c, i, mat, vec));
    const cublasStatus_t st = cublasCreate(&blas_);
    if (st != CUBLAS_STATUS_SUCCESS) {
      blas_ = nullptr;
      throw Error("MoveModelToCuda: cublasCreate failed with status " + std::to_string(st));
    }
  }
  ~CudaGemma3() override {
    if (blas_ != nullptr) cublasDestroy(blas_);
  }

  const ModelConfig& config() const override { return cpu_->config(); }
  const GgufFile& gguf() const override { return cpu_->gguf(); }
  const std::vector<std::string>& warnings() const override { return cpu_->warnings(); }
  void EmbedTokens(std::span<const std::int32_t> tokens, float* out) const override { cpu_->EmbedTokens(tokens, out); }

  std::unique_ptr<ModelState> NewState(const ModelStateOptions& o) const override {
    const ModelConfig& c = config();
    KvCache cache = detail::NewStateCache(c, o, Device::kCuda);
    const int step = cache.Options().max_step;
    auto st = std::make_unique<CudaGemma3State>(std::move(cache), o);
    for (const float base : {c.rope_base_full, c.rope_base_sliding}) {
      const detail::RopeTable t = detail::BuildRopeTable({.base = base, .rotary_dim = c.head_dim}, o.max_context);
      st->cos.push_back(UploadFloats(t.cos.data(), static_cast<std::int64_t>(t.cos.size()), "RoPE table allocation"));
      st->sin.push_back(UploadFloats(t.sin.data(), static_cast<std::int64_t>(t.sin.size()), "RoPE table allocation"));
      st->rope_half = t.half;
    }
    const std::int64_t S = step, B = o.max_batch, E = c.n_embd, qd = static_cast<std::int64_t>(c.n_head) * c.head_dim,
                       kvd = static_cast<std::int64_t>(c.n_head_kv) * c.head_dim, F = c.n_ff;
    const auto f32 = [](std::int64_t n) { return static_cast<std::size_t>(n) * 4; };
    st->x = DeviceBuffer(f32(S * E), kActivations);
    st->h = DeviceBuffer(f32(S * E), kActivations);
    st->o = DeviceBuffer(f32(S * E), kActivations);
    st->q = DeviceBuffer(f32(B * S * qd), kActivations);
    st->attn = DeviceBuffer(f32(B * S * qd), kActivations);
    st->k = DeviceBuffer(f32(B * S * kvd), kActivations);
    st->v = DeviceBuffer(f32(B * S * kvd), kActivations);
    st->g = DeviceBuffer(f32(S * F), kActivations);
    st->u = DeviceBuffer(f32(S * F), kActivations);
    st->xb = DeviceBuffer(static_cast<std::size_t>(S * std::max({E, qd, F})) * 2, kActivations);
    st->tok = DeviceBuffer(static_cast<std::size_t>(S) * 4, kActivations);
    st->logits_dev = DeviceBuffer(f32(S * c.n_vocab), kActivations);
    return st;
  }

  std::span<const float> Forward(ModelState& state, std::span<const std::int32_t> tokens, ThreadPool* pool,
                                 const ForwardOptions& options) const override {
    if (tokens.empty()) throw Error("Forward: tokens is empty");
    const BatchEntry one{
        .row = 0, .tokens = tokens, .num_logits = options.num_logits, .embeddings = options.embeddings};
    return ForwardBatch(state, std::span<const BatchEntry>(&one, 1), pool);
  }

  std::span<const float> ForwardBatch(ModelState& base, std::span<const BatchEntry> entries,
                                      ThreadPool*) const override {
    auto* state = dynamic_cast<CudaGemma3State*>(&base);
    if (state == nullptr) throw Error("Forward: the state was not made by this model's NewState");
    CudaGemma3State& st = *state;
    const ModelConfig& c = config();
    if (entries.empty()) throw Error("ForwardBatch: no entries");
    if (entries.size() != 1) {
      throw Error("ForwardBatch (device cuda): " + std::to_string(entries.size()) +
                  " entries; the GPU forward pass runs one row per call so far (use device cpu for batched steps)");
    }
    const BatchEntry& e = entries[0];
    detail::CheckBatchEntry(st, c, e, entries.size());
    if (!e.embeddings.empty()) {
      throw Error("Forward (device cuda): embedding inputs (image soft tokens) run on the CPU model only so far; "
                  "use device cpu for prompts with images");
    }
    const auto n = static_cast<std::int64_t>(e.tokens.size());
    const std::int64_t start = st.length(e.row);
    st.logits.resize(static_cast<std::size_t>(e.num_logits * c.n_vocab));
    const std::int64_t step = st.cache.Options().max_step;
    try {
      for (std::int64_t b = 0; b < n; b += step) {
        const std::int64_t m = std::min(step, n - b);
        RunChunk(st, e.row, e.tokens.subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(m)));
        // This chunk's tokens among the last num_logits of the call.
        const std::int64_t first = std::max(b, n - e.num_logits);
        if (first < b + m)
          Logits(st, first - b, b + m - first, st.logits.data() + (first - (n - e.num_logits)) * c.n_vocab);
      }
      CudaCheck(cudaDeviceSynchronize(), "Forward (device cuda)");
    } catch (...) {
      cudaGetLastError();
      try {
        st.cache.Rewind(e.row, start);
      } catch (const Error&) {
        st.cache.Reset(e.row);
      }
      throw;
    }
    return st.logits;
  }

 private:
  // Y[S, w.rows] = X[S, w.cols] W^T: cuBLAS column-major C[w.rows, S] = W^T(op T of
  // the row-major W) X.
  void Gemm(const DevMatrix& w, const __nv_bfloat16* x, std::int64_t S, float* y) const {
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t s = cublasGemmEx(
        blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), static_cast<int>(S), static_cast<int>(w.cols), &one,
        As<__nv_bfloat16>(w.data), CUDA_R_16BF, static_cast<int>(w.cols), x, CUDA_R_16BF, static_cast<int>(w.cols),
        &zero, y, CUDA_R_32F, static_cast<int>(w.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      throw Error("Forward (device cuda): cublasGemmEx failed with status " + std::to_string(s));
  }

  // X (fp32, [S, n]) to bf16 into st.xb, then Y = X W^T.
  void Project(CudaGemma3State& st, const DevMatrix& w, const float* x, std::int64_t S, float* y) const {
    const std::int64_t count = S * w.cols;
    ToBf16Kernel<<<Blocks(count), kThreads>>>(x, As<__nv_bfloat16>(st.xb), count);
    CheckLaunch("Forward (device cuda): bf16 conversion launch");
    Gemm(w, As<__nv_bfloat16>(st.xb), S, y);
  }

  void RunChunk(CudaGemma3State& st, int row, std::span<const std::int32_t> tokens) const {
    const ModelConfig& c = config();
    const auto S = static_cast<std::int64_t>(tokens.size());
    const int E = c.n_embd, Hd = c.head_dim;
    const std::int64_t qd = static_cast<std::int64_t>(c.n_head) * Hd, kvd = static_cast<std::int64_t>(c.n_head_kv) * Hd;
    const int B = row + 1;  // rows before `row` are padding of the attention call (nothing reserved, nothing read)
    CudaCheck(cudaMemcpy(As<int>(st.tok), tokens.data(), static_cast<std::size_t>(S) * 4, cudaMemcpyHostToDevice),
              "Forward (device cuda): token upload");
    EmbedKernel<<<Blocks(S * E), kThreads>>>(As<__nv_bfloat16>(embd_.data), As<int>(st.tok), S, E,
                                             std::sqrt(static_cast<float>(E)), As<float>(st.x));
    CheckLaunch("Forward (device cuda): embedding launch");
    st.cache.Reserve(row, S);
    const LayerPlan& plan = st.cache.Plan();
    float* x = As<float>(st.x);
    float* h = As<float>(st.h);
    float* o = As<float>(st.o);
    float* q = As<float>(st.q) + row * S * qd;
    float* k = As<float>(st.k) + row * S * kvd;
    float* v = As<float>(st.v) + row * S * kvd;
    float* attn = As<float>(st.attn) + row * S * qd;
    const std::size_t act_bytes = static_cast<std::size_t>(S * E) * 4;
    for (int l = 0; l < c.n_layer; ++l) {
      const DevLayer& L = layers_[static_cast<std::size_t>(l)];
      const bool owns = plan.layers[static_cast<std::size_t>(l)].owns_cache;
      CudaCheck(cudaMemcpy(h, x, act_bytes, cudaMemcpyDeviceToDevice), "Forward (device cuda): copy");
      RmsNorm(h, S, E, As<float>(L.attn_norm), c.rms_eps);
      Project(st, L.q, h, S, q);
      if (owns) {                                   // a KV-shared layer reads its source's K/V and computes none
        Gemm(L.k, As<__nv_bfloat16>(st.xb), S, k);  // xb still holds h in bf16
        Gemm(L.v, As<__nv_bfloat16>(st.xb), S, v);
        RmsNorm(k, S * c.n_head_kv, Hd, As<float>(L.k_norm), c.rms_eps);
      }
      RmsNorm(q, S * c.n_head, Hd, As<float>(L.q_norm), c.rms_eps);

      const int family = c.is_sliding[static_cast<std::size_t>(l)] ? 1 : 0;
      LayerAttendArgs a;
      a.query = ConstTensorView{As<float>(st.q), DType::kFloat32, {B, S, qd}};
      if (owns) {
        a.key = ConstTensorView{As<float>(st.k), DType::kFloat32, {B, S, kvd}};
        a.value = ConstTensorView{As<float>(st.v), DType::kFloat32, {B, S, kvd}};
      }
      const std::int64_t max_pos = st.max_context();
      a.cos_cache = ConstTensorView{
          As<float>(st.cos[static_cast<std::size_t>(family)]), DType::kFloat32, {max_pos, st.rope_half}};
      a.sin_cache = ConstTensorView{
          As<float>(st.sin[static_cast<std::size_t>(family)]), DType::kFloat32, {max_pos, st.rope_half}};
      a.attrs.num_heads = c.n_head;
      a.attrs.scale = c.attn_scale;
      a.attrs.do_rotary = 1;
      a.attrs.rotary_interleaved = 0;  // NeoX half split
      a.output = TensorView{As<float>(st.attn), DType::kFloat32, {B, S, qd}};
      a.run.device = Device::kCuda;
      AttendLayer(st.cache, l, a);

      Project(st, L.o, attn, S, o);
      RmsNorm(o, S, E, As<float>(L.post_attn_norm), c.rms_eps);
      AddKernel<<<Blocks(S * E), kThreads>>>(x, o, S * E);
      CheckLaunch("Forward (device cuda): residual launch");

      CudaCheck(cudaMemcpy(h, x, act_bytes, cudaMemcpyDeviceToDevice), "Forward (device cuda): copy");
      RmsNorm(h, S, E, As<float>(L.ffn_norm), c.rms_eps);
      Project(st, L.gate, h, S, As<float>(st.g));
      Gemm(L.up, As<__nv_bfloat16>(st.xb), S, As<float>(st.u));
      GegluKernel<<<Blocks(S * c.n_ff), kThreads>>>(As<float>(st.g), As<float>(st.u), S * c.n_ff);
      CheckLaunch("Forward (device cuda): GeGLU launch");
      Project(st, L.down, As<float>(st.g), S, o);
      RmsNorm(o, S, E, As<float>(L.post_ffw_norm), c.rms_eps);
      AddKernel<<<Blocks(S * E), kThreads>>>(x, o, S * E);
      CheckLaunch("Forward (device cuda): residual launch");
    }
    st.cache.Commit(row);
  }

  // Logits of the chunk's rows [first, first + count) into out (host).
  void Logits(CudaGemma3State& st, std::int64_t first, std::int64_t count, float* out) const {
    const ModelConfig& c = config();
    float* rows = As<float>(st.x) + first * c.n_embd;
    RmsNorm(rows, count, c.n_embd, As<float>(out_norm_), c.rms_eps);
    const DevMatrix& head = out_.rows > 0 ? out_ : embd_;  // tied embeddings unless output.weight
    Project(st, head, rows, count, As<float>(st.logits_dev));
    CudaCheck(cudaMemcpy(out, As<float>(st.logits_dev), static_cast<std::size_t>(count * c.n_vocab) * 4,
                         cudaMemcpyDeviceToHost),
              "Forward (device cuda): logits download");
  }

  std::unique_ptr<Model> cpu_;
  cublasHandle_t blas_ = nullptr;
  DevMatrix embd_, out_;
  DevBuf out_norm_;
  std::vector<DevLayer> layers_;
};

}  // namespace

std::unique_ptr<Model> MoveModelToCuda(std::unique_ptr<Model> model) {
  if (model == nullptr) throw Error("MoveModelToCuda: no model");
  return std::make_unique<CudaGemma3>(std::move(model));
}

}  // namespace kvshare
