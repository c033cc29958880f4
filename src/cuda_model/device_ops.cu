// The GPU models' shared device pieces (device_ops.h).
#include "cuda_model/device_ops.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/float_convert.h"
#include "cuda/cuda_check.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(std::int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void CheckLaunch(const char* what) { CudaCheck(cudaGetLastError(), what); }

// One thread per element of n; i the flat index.
#define KV_ELEMENT_INDEX(n)                                                                \
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
  if (i >= (n)) return

__device__ float LoadWeight(const void* table, bool bf16, std::int64_t at) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(table)[at]) : static_cast<const float*>(table)[at];
}

__global__ void EmbedKernel(const void* table, bool bf16, const int* tok, std::int64_t n, int E, float scale,
                            float* x) {
  KV_ELEMENT_INDEX(n * E);
  const std::int64_t s = i / E, e = i % E;
  x[i] = LoadWeight(table, bf16, static_cast<std::int64_t>(tok[s]) * E + e) * scale;
}

// One block per row.
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
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) row[i] = w ? row[i] * scale * w[i] : row[i] * scale;
}

__global__ void ToBf16Kernel(const float* x, __nv_bfloat16* y, std::int64_t n) {
  KV_ELEMENT_INDEX(n);
  y[i] = __float2bfloat16_rn(x[i]);
}

__device__ float GeluTanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

__global__ void GegluKernel(float* g, const float* u, std::int64_t n) {
  KV_ELEMENT_INDEX(n);
  g[i] = GeluTanh(g[i]) * u[i];
}

__global__ void GegluPairsKernel(const float* gu, std::int64_t rows, int F, float* out) {
  KV_ELEMENT_INDEX(rows * F);
  const std::int64_t r = i / F, c = i % F;
  out[i] = GeluTanh(gu[r * 2 * F + c]) * gu[r * 2 * F + F + c];
}

__global__ void AddKernel(float* x, const float* o, std::int64_t n) {
  KV_ELEMENT_INDEX(n);
  x[i] += o[i];
}

__global__ void ScaleKernel(float* x, float s, std::int64_t n) {
  KV_ELEMENT_INDEX(n);
  x[i] *= s;
}

__global__ void SoftcapKernel(float* x, std::int64_t n, float cap) {
  KV_ELEMENT_INDEX(n);
  x[i] = cap * tanhf(x[i] * (1.0f / cap));
}

__global__ void ScaleColumnsKernel(float* x, std::int64_t rows, int n, const float* w, float s) {
  KV_ELEMENT_INDEX(rows * n);
  x[i] = x[i] * s * w[i % n];
}

__global__ void MixKernel(float* x, const float* y, std::int64_t n, float mix) {
  KV_ELEMENT_INDEX(n);
  x[i] = (x[i] + y[i]) * mix;
}

__global__ void ScatterRowsKernel(const float* src, std::int64_t rows, std::int64_t width, const std::int64_t* to,
                                  float* dst) {
  KV_ELEMENT_INDEX(rows * width);
  const std::int64_t r = i / width, c = i % width;
  if (to[r] >= 0) dst[to[r] * width + c] = src[i];
}

__global__ void GatherRowsKernel(const float* src, std::int64_t src_stride, const std::int64_t* from, std::int64_t rows,
                                 std::int64_t width, float* dst) {
  KV_ELEMENT_INDEX(rows * width);
  const std::int64_t r = i / width, c = i % width;
  if (from[r] >= 0) dst[i] = src[from[r] * src_stride + c];
}

__global__ void AddWeightedRowsKernel(const float* y, std::int64_t rows, int width, const std::int64_t* to,
                                      const float* w, float* out) {
  KV_ELEMENT_INDEX(rows * width);
  const std::int64_t r = i / width, c = i % width;
  out[to[r] * width + c] += w[r] * y[i];
}

// One block per row: sum of squares of x and of ref in double.
__global__ void RescaleRowsKernel(float* x, const float* ref, int n) {
  __shared__ double part[2][kThreads];
  float* row = x + static_cast<std::int64_t>(blockIdx.x) * n;
  const float* r = ref + static_cast<std::int64_t>(blockIdx.x) * n;
  double sx = 0.0, sr = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) {
    sx += static_cast<double>(row[i]) * row[i];
    sr += static_cast<double>(r[i]) * r[i];
  }
  part[0][threadIdx.x] = sx;
  part[1][threadIdx.x] = sr;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (static_cast<int>(threadIdx.x) < o) {
      part[0][threadIdx.x] += part[0][threadIdx.x + o];
      part[1][threadIdx.x] += part[1][threadIdx.x + o];
    }
    __syncthreads();
  }
  const float target = sqrtf(static_cast<float>(part[1][0] / n));
  const float now = sqrtf(fmaxf(static_cast<float>(part[0][0] / n), 1e-5f));
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) row[i] = row[i] * target / now;
}

__global__ void TanhKernel(float* x, std::int64_t n) {
  KV_ELEMENT_INDEX(n);
  x[i] = tanhf(x[i]);
}

__global__ void AddScalarKernel(float* x, float s, std::int64_t n) {
  KV_ELEMENT_INDEX(n);
  x[i] += s;
}

// One block per row: mean and population variance in double.
__global__ void GaussianTopKKernel(float* g, int F, float k) {
  __shared__ double part[kThreads];
  __shared__ double mean;
  float* row = g + static_cast<std::int64_t>(blockIdx.x) * F;
  double s = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < F; i += kThreads) s += row[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (static_cast<int>(threadIdx.x) < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) mean = part[0] / F;
  __syncthreads();
  const double m = mean;
  double v = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < F; i += kThreads) v += (row[i] - m) * (row[i] - m);
  __syncthreads();
  part[threadIdx.x] = v;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (static_cast<int>(threadIdx.x) < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  const float cutoff = static_cast<float>(m) + static_cast<float>(sqrt(part[0] / F)) * k;
  for (int i = static_cast<int>(threadIdx.x); i < F; i += kThreads) row[i] = fmaxf(0.0f, row[i] - cutoff);
}

__global__ void LaurelMixKernel(float* o, const float* act, const float* h, const float* laurel, std::int64_t n) {
  KV_ELEMENT_INDEX(n);
  o[i] = ((act[i] + o[i]) + (h[i] + laurel[i])) / sqrtf(2.0f);
}

__global__ void AltUpPredictKernel(Streams x, int n, std::int64_t rows, int E, const float* coef, Streams pred) {
  KV_ELEMENT_INDEX(rows * E);
  const std::int64_t s = i / E;
  const float* c = coef + s * n * n;
  for (int j = 0; j < n; ++j) {
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) acc += x.p[k][i] * c[j * n + k];
    pred.p[j][i] = acc + x.p[j][i];
  }
}

__global__ void AltUpCorrectKernel(Streams x, Streams pred, const float* y, const float* active, const float* coef,
                                   int n, std::int64_t rows, int E) {
  KV_ELEMENT_INDEX(rows * E);
  const std::int64_t s = i / E;
  const float innovation = y[i] - active[i];
  for (int j = 0; j < n; ++j) x.p[j][i] = innovation * coef[s * n + j] + pred.p[j][i];
}

#undef KV_ELEMENT_INDEX

}  // namespace

namespace {
thread_local cudaStream_t current_stream = nullptr;
}  // namespace

cudaStream_t Stream() { return current_stream; }

StreamScope::StreamScope(cudaStream_t stream) : prev_(current_stream) { current_stream = stream; }

StreamScope::~StreamScope() { current_stream = prev_; }

DevBuf DeviceBuffer(std::size_t bytes, const char* what) { return DevBuf(Device::kCuda, bytes, what); }

void Grow(DevBuf& b, std::size_t bytes, const char* what) {
  if (b.size() < bytes || b.device() != Device::kCuda) {
    RequireNotCapturing(Stream(), what);
    b = DeviceBuffer(std::max<std::size_t>(bytes, 1), what);
  }
}

void Upload(void* dev, const void* host, std::size_t bytes, const char* what) {
  if (bytes == 0) return;
  CudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, Stream()), what);
  CudaCheck(cudaStreamSynchronize(Stream()), what);
}

void Download(void* host, const void* dev, std::size_t bytes, const char* what) {
  if (bytes == 0) return;
  CudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, Stream()), what);
  CudaCheck(cudaStreamSynchronize(Stream()), what);
}

void StageUpload(PinnedStaging& staging, void* dev, const void* host, std::size_t bytes, const char* what) {
  if (bytes == 0) return;
  const void* from = staging.Put(host, bytes, Stream(), what);
  CudaCheck(cudaMemcpyAsync(dev, from, bytes, cudaMemcpyHostToDevice, Stream()), what);
}

void DownloadAsync(void* host, const void* dev, std::size_t bytes, const char* what) {
  if (bytes > 0) CudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, Stream()), what);
}

DevBuf UploadFloats(const float* x, std::int64_t n, const char* what) {
  DevBuf b = DeviceBuffer(static_cast<std::size_t>(n) * 4, what);
  Upload(b.data(), x, static_cast<std::size_t>(n) * 4, what);
  return b;
}

DevMatrix UploadMatrix(const WeightMatrix& w, const std::string& name, DType dtype) {
  if (dtype != DType::kBFloat16 && dtype != DType::kFloat32) {
    throw Error("MoveModelToCuda: weights dtype " + std::string(DTypeName(dtype)) +
                " is not supported (bfloat16 or float32)");
  }
  const std::size_t elem = dtype == DType::kFloat32 ? 4 : 2;
  DevMatrix m{DeviceBuffer(static_cast<std::size_t>(w.rows * w.cols) * elem, kWeights), w.rows, w.cols, dtype};
  constexpr std::int64_t kBlockRows = 1024;
  const std::int64_t block_rows = std::min(w.rows, kBlockRows);
  std::vector<float> rows(static_cast<std::size_t>(block_rows * w.cols));
  std::vector<std::uint16_t> half(dtype == DType::kBFloat16 ? rows.size() : 0);
  for (std::int64_t r0 = 0; r0 < w.rows; r0 += kBlockRows) {
    const std::int64_t n = std::min(kBlockRows, w.rows - r0);
    for (std::int64_t r = 0; r < n; ++r) {
      DequantizeRow(w.type, static_cast<const std::uint8_t*>(w.data) + (r0 + r) * w.row_bytes, rows.data() + r * w.cols,
                    w.cols);
    }
    const std::size_t count = static_cast<std::size_t>(n * w.cols);
    const void* from = rows.data();
    if (dtype == DType::kBFloat16) {
      for (std::size_t i = 0; i < count; ++i) half[i] = F32ToBF16(rows[i]);
      from = half.data();
    }
    Upload(m.data.data() + static_cast<std::size_t>(r0 * w.cols) * elem, from, count * elem,
           (name + ": upload").c_str());
  }
  return m;
}

void EmbedRowsDevice(const DevMatrix& table, const int* tok, std::int64_t n, float scale, float* x) {
  if (n == 0) return;
  EmbedKernel<<<Blocks(n * table.cols), kThreads, 0, Stream()>>>(table.data.data(), table.dtype == DType::kBFloat16,
                                                                 tok, n, static_cast<int>(table.cols), scale, x);
  CheckLaunch("Forward (device cuda): embedding launch");
}

void RmsNormDevice(float* x, std::int64_t rows, int n, const float* w, float eps) {
  if (rows == 0) return;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, Stream()>>>(x, n, w, eps);
  CheckLaunch("Forward (device cuda): RMSNorm launch");
}

void GegluDevice(float* g, const float* u, std::int64_t n) {
  if (n == 0) return;
  GegluKernel<<<Blocks(n), kThreads, 0, Stream()>>>(g, u, n);
  CheckLaunch("Forward (device cuda): GeGLU launch");
}

void GegluPairsDevice(const float* gu, std::int64_t rows, int F, float* out) {
  if (rows == 0) return;
  GegluPairsKernel<<<Blocks(rows * F), kThreads, 0, Stream()>>>(gu, rows, F, out);
  CheckLaunch("Forward (device cuda): GeGLU (fused gate / up) launch");
}

void ZeroDevice(float* x, std::int64_t n) {
  if (n > 0) {
    CudaCheck(cudaMemsetAsync(x, 0, static_cast<std::size_t>(n) * 4, Stream()), "Forward (device cuda): zero fill");
  }
}

void CopyDevice(float* dst, const float* src, std::int64_t n) {
  if (n > 0) {
    CudaCheck(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToDevice, Stream()),
              "Forward (device cuda): device copy");
  }
}

void AddDevice(float* x, const float* o, std::int64_t n) {
  if (n == 0) return;
  AddKernel<<<Blocks(n), kThreads, 0, Stream()>>>(x, o, n);
  CheckLaunch("Forward (device cuda): residual launch");
}

void ScaleDevice(float* x, float s, std::int64_t n) {
  if (n == 0) return;
  ScaleKernel<<<Blocks(n), kThreads, 0, Stream()>>>(x, s, n);
  CheckLaunch("Forward (device cuda): scale launch");
}

void SoftcapDevice(float* x, std::int64_t n, float cap) {
  if (n == 0) return;
  SoftcapKernel<<<Blocks(n), kThreads, 0, Stream()>>>(x, n, cap);
  CheckLaunch("Forward (device cuda): softcap launch");
}

void ScaleColumnsDevice(float* x, std::int64_t rows, int n, const float* w, float s) {
  if (rows == 0) return;
  ScaleColumnsKernel<<<Blocks(rows * n), kThreads, 0, Stream()>>>(x, rows, n, w, s);
  CheckLaunch("Forward (device cuda): column scale launch");
}

void MixDevice(float* x, const float* y, std::int64_t n, float mix) {
  if (n == 0) return;
  MixKernel<<<Blocks(n), kThreads, 0, Stream()>>>(x, y, n, mix);
  CheckLaunch("Forward (device cuda): mix launch");
}

void ScatterRowsDevice(const float* src, std::int64_t rows, std::int64_t width, const std::int64_t* to, float* dst) {
  if (rows == 0) return;
  ScatterRowsKernel<<<Blocks(rows * width), kThreads, 0, Stream()>>>(src, rows, width, to, dst);
  CheckLaunch("Forward (device cuda): row scatter launch");
}

void GatherRowsDevice(const float* src, std::int64_t src_stride, const std::int64_t* from, std::int64_t rows,
                      std::int64_t width, float* dst) {
  if (rows == 0) return;
  GatherRowsKernel<<<Blocks(rows * width), kThreads, 0, Stream()>>>(src, src_stride, from, rows, width, dst);
  CheckLaunch("Forward (device cuda): row gather launch");
}

void AddWeightedRowsDevice(const float* y, std::int64_t rows, int width, const std::int64_t* to, const float* w,
                           float* out) {
  if (rows == 0) return;
  AddWeightedRowsKernel<<<Blocks(rows * width), kThreads, 0, Stream()>>>(y, rows, width, to, w, out);
  CheckLaunch("Forward (device cuda): weighted row sum launch");
}

void RescaleRowsDevice(float* x, const float* ref, std::int64_t rows, int n) {
  if (rows == 0) return;
  RescaleRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, Stream()>>>(x, ref, n);
  CheckLaunch("Forward (device cuda): stream rescale launch");
}

void TanhDevice(float* x, std::int64_t n) {
  if (n == 0) return;
  TanhKernel<<<Blocks(n), kThreads, 0, Stream()>>>(x, n);
  CheckLaunch("Forward (device cuda): tanh launch");
}

void AddScalarDevice(float* x, float s, std::int64_t n) {
  if (n == 0) return;
  AddScalarKernel<<<Blocks(n), kThreads, 0, Stream()>>>(x, s, n);
  CheckLaunch("Forward (device cuda): scalar add launch");
}

void GaussianTopKDevice(float* g, std::int64_t rows, int F, float k) {
  if (rows == 0) return;
  GaussianTopKKernel<<<static_cast<unsigned>(rows), kThreads, 0, Stream()>>>(g, F, k);
  CheckLaunch("Forward (device cuda): activation sparsity launch");
}

void LaurelMixDevice(float* o, const float* act, const float* h, const float* laurel, std::int64_t n) {
  if (n == 0) return;
  LaurelMixKernel<<<Blocks(n), kThreads, 0, Stream()>>>(o, act, h, laurel, n);
  CheckLaunch("Forward (device cuda): Laurel sum launch");
}

void AltUpPredictDevice(const Streams& x, int n, std::int64_t rows, int E, const float* coef, const Streams& pred) {
  if (rows == 0) return;
  AltUpPredictKernel<<<Blocks(rows * E), kThreads, 0, Stream()>>>(x, n, rows, E, coef, pred);
  CheckLaunch("Forward (device cuda): AltUp predict launch");
}

void AltUpCorrectDevice(const Streams& x, const Streams& pred, const float* y, const float* active, const float* coef,
                        int n, std::int64_t rows, int E) {
  if (rows == 0) return;
  AltUpCorrectKernel<<<Blocks(rows * E), kThreads, 0, Stream()>>>(x, pred, y, active, coef, n, rows, E);
  CheckLaunch("Forward (device cuda): AltUp correct launch");
}

Blas::Blas() {
  const cublasStatus_t st = cublasCreate(&handle_);
  if (st != CUBLAS_STATUS_SUCCESS) {
    handle_ = nullptr;
    throw Error("MoveModelToCuda: cublasCreate failed with status " + std::to_string(st));
  }
  // cuBLAS's recommendation for Hopper (32 MiB); smaller GPUs use less of it.
  constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
  workspace_ = DeviceBuffer(kWorkspaceBytes, "MoveModelToCuda: cuBLAS workspace allocation");
}

void Blas::Bind() const {
  const cudaStream_t s = Stream();
  if (bound_once_ && s == bound_) return;
  const auto check = [](cublasStatus_t st, const char* call) {
    if (st != CUBLAS_STATUS_SUCCESS) {
      throw Error(std::string("Forward (device cuda): ") + call + " failed with status " + std::to_string(st));
    }
  };
  check(cublasSetStream(handle_, s), "cublasSetStream");
  // After cublasSetStream, which drops a workspace set before.
  check(cublasSetWorkspace(handle_, const_cast<unsigned char*>(workspace_.data()), workspace_.size()),
        "cublasSetWorkspace");
  bound_ = s;
  bound_once_ = true;
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

void Blas::Gemm(const DevMatrix& w, const void* x, std::int64_t S, float* y) const {
  if (S == 0) return;
  // cuBLAS takes int sizes, and a matrix never uploaded (an absent optional
  // weight, a default DevMatrix) would be read as garbage: say so instead.
  const std::size_t elem = w.dtype == DType::kFloat32 ? 4 : 2;
  constexpr std::int64_t kMaxInt = 2147483647;
  if (S < 0 || S > kMaxInt || w.rows > kMaxInt || w.cols > kMaxInt) {
    throw Error("Forward (device cuda): a projection of " + std::to_string(S) + " rows through a [" +
                std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] matrix exceeds cuBLAS's int sizes");
  }
  if (w.data.device() != Device::kCuda || w.data.size() < static_cast<std::size_t>(w.rows * w.cols) * elem ||
      x == nullptr || y == nullptr) {
    throw Error("Forward (device cuda): a projection through a [" + std::to_string(w.rows) + ", " +
                std::to_string(w.cols) + "] " + DTypeName(w.dtype) + " matrix holding " +
                std::to_string(w.data.size()) + " bytes of " + DeviceName(w.data.device()) +
                " memory (or with a null input / output): the weight was not uploaded");
  }
  Bind();
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t t = w.dtype == DType::kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
  const cublasStatus_t s = cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
                                        static_cast<int>(S), static_cast<int>(w.cols), &one, w.data.data(), t,
                                        static_cast<int>(w.cols), x, t, static_cast<int>(w.cols), &zero, y, CUDA_R_32F,
                                        static_cast<int>(w.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Error("Forward (device cuda): cublasGemmEx [" + std::to_string(S) + " x " + std::to_string(w.cols) + "] x [" +
                std::to_string(w.cols) + " x " + std::to_string(w.rows) + "]^T failed with status " +
                std::to_string(s));
  }
}

const void* Blas::Project(const DevMatrix& w, const float* x, std::int64_t S, float* y, DevBuf& xb) const {
  const void* in = x;
  if (w.dtype == DType::kBFloat16) {
    const std::int64_t count = S * w.cols;
    Grow(xb, static_cast<std::size_t>(count) * 2, kActivations);
    if (count > 0) {
      ToBf16Kernel<<<Blocks(count), kThreads, 0, Stream()>>>(x, As<__nv_bfloat16>(xb), count);
      CheckLaunch("Forward (device cuda): bf16 conversion launch");
    }
    in = xb.data();
  }
  Gemm(w, in, S, y);
  return in;
}

}  // namespace kvshare::detail
