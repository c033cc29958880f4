// What the GPU models of every family share below the model: device buffers,
// weight matrices uploaded at load, the element-wise and row kernels of a
// forward pass (fp32 activations, row-major [rows, width]), and the cuBLAS
// projections. Every launch and CUDA call is checked: a failure is a
// kvshare::Error naming the operation ("Forward (device cuda): ..."). Work runs
// in order on Stream(): the stream a StreamScope set on the calling thread
// (the model's, during a forward pass), else the legacy default stream.
// Internal to src/cuda_model.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cache/device_bytes.h"
#include "cuda/pinned_staging.h"
#include "kvshare/common/tensor.h"
#include "quant/quant.h"

namespace kvshare::detail {

// The stream this thread's launches, copies and products go on.
cudaStream_t Stream();
// Sets Stream() for the calling thread until destroyed (then the previous).
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t prev_;
};

// Device memory owned for a model's or a state's lifetime (zero-filled).
using DevBuf = DeviceBytes;
DevBuf DeviceBuffer(std::size_t bytes, const char* what);
template <typename T>
T* As(const DevBuf& b) {
  return reinterpret_cast<T*>(const_cast<unsigned char*>(b.data()));
}
// b reallocated (zero-filled, contents dropped) when smaller than `bytes`;
// throws kvshare::Error instead while Stream() is being captured into a CUDA
// graph (RequireNotCapturing).
void Grow(DevBuf& b, std::size_t bytes, const char* what);
// Host <-> device copies on Stream(), waiting for it (the host buffer may be
// reused on return): loading, and mid-step reads of an eager step.
void Upload(void* dev, const void* host, std::size_t bytes, const char* what);
void Download(void* host, const void* dev, std::size_t bytes, const char* what);
// A step's upload: host[0, bytes) copied into `staging` (pinned, unchanged
// until its Reset), then asynchronously to dev on Stream(); capturable (a
// memcpy node reading the staged copy at the graph's launch).
void StageUpload(PinnedStaging& staging, void* dev, const void* host, std::size_t bytes, const char* what);
// dev[0, bytes) copied to `host` (pinned memory) asynchronously on Stream().
void DownloadAsync(void* host, const void* dev, std::size_t bytes, const char* what);
DevBuf UploadFloats(const float* x, std::int64_t n, const char* what);

constexpr const char* kWeights = "GPU model weights allocation";
constexpr const char* kActivations = "GPU model activations allocation";

// A weight matrix [rows, cols] on the device, bf16 or fp32 (dtype).
struct DevMatrix {
  DevBuf data;
  std::int64_t rows = 0, cols = 0;
  DType dtype = DType::kBFloat16;
};
// w (a GGUF tensor, TensorLookup-checked) dequantized row by row with the
// CPU's own DequantizeRow, rounded to dtype (kBFloat16: nearest even; or
// kFloat32), a block of rows at a time.
DevMatrix UploadMatrix(const WeightMatrix& w, const std::string& name, DType dtype);

// x[s, :] = table[tok[s], :] * scale, s < n (tok: device int32 ids).
void EmbedRowsDevice(const DevMatrix& table, const int* tok, std::int64_t n, float scale, float* x);
// Each of `rows` rows of n: x / sqrt(mean(x^2) + eps) * w (sum of squares in
// double, as the CPU's RmsNorm); w == nullptr: the scale-free norm.
void RmsNormDevice(float* x, std::int64_t rows, int n, const float* w, float eps);
// g = gelu_tanh(g) * u over n values (activations.h's GeGLU product).
void GegluDevice(float* g, const float* u, std::int64_t n);
// out[r, i] = gelu_tanh(gu[r, i]) * gu[r, F + i]: a fused gate / up output
// [rows, 2F] (gate rows first).
void GegluPairsDevice(const float* gu, std::int64_t rows, int F, float* out);
// x = 0 over n values.
void ZeroDevice(float* x, std::int64_t n);
// dst = src over n values (device to device).
void CopyDevice(float* dst, const float* src, std::int64_t n);
// x += o over n values.
void AddDevice(float* x, const float* o, std::int64_t n);
// x *= s over n values.
void ScaleDevice(float* x, float s, std::int64_t n);
// x = cap * tanh(x / cap) over n values (the final logit softcap).
void SoftcapDevice(float* x, std::int64_t n, float cap);
// x[r, i] = x[r, i] * s * w[i] over rows of n.
void ScaleColumnsDevice(float* x, std::int64_t rows, int n, const float* w, float s);
// x = (x + y) * mix over n values.
void MixDevice(float* x, const float* y, std::int64_t n, float mix);
// dst[to[r], :] = src[r, :] for r < rows (rows of `width`); to[r] < 0 skips.
void ScatterRowsDevice(const float* src, std::int64_t rows, std::int64_t width, const std::int64_t* to, float* dst);
// dst[r, :] = src[from[r] * src_stride + (0 .. width)] for r < rows; from[r] < 0
// leaves dst row r as it is. dst rows are `width` apart.
void GatherRowsDevice(const float* src, std::int64_t src_stride, const std::int64_t* from, std::int64_t rows,
                      std::int64_t width, float* dst);
// out[to[r], :] += w[r] * y[r, :] for r < rows (rows of width; the to[r]
// distinct within one call).
void AddWeightedRowsDevice(const float* y, std::int64_t rows, int width, const std::int64_t* to, const float* w,
                           float* out);

// x[r, :] *= rms(ref[r, :]) / max(rms(x[r, :]), sqrt(1e-5)) over rows of n,
// rms = sqrt(mean of squares), sums in double (Gemma 3n's AltUp stream
// rescaling).
void RescaleRowsDevice(float* x, const float* ref, std::int64_t rows, int n);
// x = tanh(x) over n values.
void TanhDevice(float* x, std::int64_t n);
// x += s over n values.
void AddScalarDevice(float* x, float s, std::int64_t n);
// Each row of F: g = max(0, g - (mean + k * std)) (population std, sums in
// double; GegluMlp's Gaussian top-k activation sparsity).
void GaussianTopKDevice(float* g, std::int64_t rows, int F, float k);
// o = ((act + o) + (h + laurel)) / sqrt(2) over n values (Gemma 3n's
// attention and Laurel sum).
void LaurelMixDevice(float* o, const float* act, const float* h, const float* laurel, std::int64_t n);

// Gemma 3n's AltUp streams: up to kMaxStreams buffers of [rows, E].
constexpr int kMaxStreams = 16;
struct Streams {
  float* p[kMaxStreams] = {};
};
// pred_j[s, d] = sum_i x_i[s, d] * coef[s, j n + i] + x_j[s, d], j < n
// (coef: [rows, n * n]).
void AltUpPredictDevice(const Streams& x, int n, std::int64_t rows, int E, const float* coef, const Streams& pred);
// x_j[s, d] = (y[s, d] - active[s, d]) * coef[s, j] + pred_j[s, d], j < n
// (coef: [rows, n]).
void AltUpCorrectDevice(const Streams& x, const Streams& pred, const float* y, const float* active, const float* coef,
                        int n, std::int64_t rows, int E);

// The cuBLAS handle of a model and its projections, on Stream(), with a
// workspace of its own allocated once (so that a captured product allocates
// nothing). A model's states run one forward pass at a time.
class Blas {
 public:
  Blas();  // throws kvshare::Error when cublasCreate fails
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  // y[S, w.rows] = x[S, w.cols] W^T, x in w's dtype, fp32 accumulation and
  // output (cuBLAS column-major: C[w.rows, S] = op_T(W) X).
  void Gemm(const DevMatrix& w, const void* x, std::int64_t S, float* y) const;
  // The same from fp32 x: rounded to bf16 into xb (grown) for a bf16 w.
  // Returns the input the product read, for another matrix of w's dtype over
  // the same x (Gemm with it).
  const void* Project(const DevMatrix& w, const float* x, std::int64_t S, float* y, DevBuf& xb) const;

 private:
  // The handle on Stream() with the workspace (cublasSetStream resets it).
  void Bind() const;

  cublasHandle_t handle_ = nullptr;
  DevBuf workspace_;
  mutable cudaStream_t bound_ = nullptr;
  mutable bool bound_once_ = false;
};

}  // namespace kvshare::detail
