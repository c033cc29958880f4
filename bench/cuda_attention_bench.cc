// GroupQueryAttention on the GPU (GqaRunOptions::device = kCuda) through the
// public op in static-scatter mode on a BNSH cache, as a model step runs it
// (the new rows written, then attention):
//   kvshare_bench --benchmark_filter=cuda/
// decode/B:b/T:t/...  S = 1 per row over T cached keys. Counters: kv_bytes/s
//   (K and V of every row read once: 2 * B * N_kv * T * H * dtype bytes per
//   call), d2d_bytes/s (cudaMemcpy device-to-device, read + write bytes, best
//   of 5, measured in the same run) and bw_ratio = kv_bytes/s / d2d_bytes/s.
// prefill/T:t/...  S = T (a whole prompt), causal, windowed with W:w. Counter
//   FLOPS = 4 * N * H * (visible keys summed over queries) per call;
//   hopper_kernel = 1 where the Hopper kernel (src/cuda/attend_wgmma_cuda.cu)
//   ran, 0 where attend_mma_cuda.cu's did.
// prefill_mma/...  the same cases with the mma kernel forced
//   (src/cuda/attend_wgmma_cuda.h's PrefillPath::kMma), so one run times the
//   Hopper kernel, the mma kernel and (bench/cuda_bench.py) torch; the other
//   cases follow KVSHARE_CUDA_PREFILL (unset: the automatic choice).
// Every case runs on one stream and the op returns when its work is done, so
// the wall time per call is the GPU time plus launch overhead. Without a
// usable GPU (or in a build without CUDA) every case reports an error and
// nothing runs. bench/cuda_bench.py runs these next to PyTorch's
// scaled_dot_product_attention on the same shapes and prints the ratios.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/float_convert.h"
#include "kvshare/attention/gqa.h"
#include "kvshare/common/error.h"

#if KVSHARE_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/attend_wgmma_cuda.h"
#endif

namespace {

using kvshare::DType;

struct CudaCase {
  int B, S, T, N, Nkv, H, W;  // W = 0: no window
  DType cache;
  bool force_mma = false;  // prefill on attend_mma_cuda.cu's kernel even where the Hopper kernel applies
};

#if KVSHARE_HAVE_CUDA

bool GpuUsable() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

// Device memory filled with random 16-bit floats (uniform in [-1, 1]) or zeros.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  DeviceBuffer(std::size_t n, bool random, DType dt) : bytes(n) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess)
      throw kvshare::Error("cudaMalloc of " + std::to_string(bytes) + " bytes failed");
    cudaMemset(ptr, 0, bytes);
    if (!random) return;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<std::uint16_t> chunk(std::min<std::size_t>(bytes / 2, std::size_t{1} << 22));
    for (auto& x : chunk)
      x = dt == DType::kBFloat16 ? kvshare::detail::F32ToBF16(u(rng)) : kvshare::detail::F32ToF16(u(rng));
    for (std::size_t at = 0; at < bytes; at += chunk.size() * 2) {
      cudaMemcpy(static_cast<char*>(ptr) + at, chunk.data(), std::min(chunk.size() * 2, bytes - at),
                 cudaMemcpyHostToDevice);
    }
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Device-to-device copy bandwidth (read + write bytes per second), best of 5
// copies of 1 GiB.
double D2dBandwidth() {
  const std::size_t bytes = std::size_t{1} << 30;
  DeviceBuffer a(bytes, false, DType::kFloat16), b(bytes, false, DType::kFloat16);
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  double best = 0.0;
  for (int i = 0; i < 6; ++i) {
    cudaEventRecord(t0);
    cudaMemcpy(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, t0, t1);
    if (i > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / (ms * 1e-3));
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return best;
}

void BM_CudaAttend(benchmark::State& state, CudaCase c) {
  if (!GpuUsable()) {
    state.SkipWithError("no usable CUDA device");
    return;
  }
  const std::int64_t kvh = static_cast<std::int64_t>(c.Nkv) * c.H;
  const std::size_t es = 2;  // fp16 / bf16 activations and cache
  DeviceBuffer q(static_cast<std::size_t>(c.B) * c.S * c.N * c.H * es, true, c.cache);
  DeviceBuffer k(static_cast<std::size_t>(c.B) * c.S * kvh * es, true, c.cache);
  DeviceBuffer v(static_cast<std::size_t>(c.B) * c.S * kvh * es, true, c.cache);
  DeviceBuffer kc(static_cast<std::size_t>(c.B) * kvh * c.T * es, true, c.cache);
  DeviceBuffer vc(static_cast<std::size_t>(c.B) * kvh * c.T * es, true, c.cache);
  DeviceBuffer out(static_cast<std::size_t>(c.B) * c.S * c.N * c.H * es, false, c.cache);
  const std::vector<std::int64_t> wi(static_cast<std::size_t>(c.B), c.T - c.S), np(static_cast<std::size_t>(c.B), c.T);

  kvshare::GqaAttributes a;
  a.num_heads = c.N;
  a.kv_num_heads = c.Nkv;
  a.local_window_size = c.W > 0 ? c.W : -1;
  kvshare::GqaInputs in;
  in.query = {q.ptr, c.cache, {c.B, c.S, static_cast<std::int64_t>(c.N) * c.H}};
  in.key = kvshare::ConstTensorView{k.ptr, c.cache, {c.B, c.S, kvh}};
  in.value = kvshare::ConstTensorView{v.ptr, c.cache, {c.B, c.S, kvh}};
  in.write_indices = kvshare::ConstTensorView{wi.data(), DType::kInt64, {c.B}};
  in.nonpad_kv_seqlen = kvshare::ConstTensorView{np.data(), DType::kInt64, {c.B}};
  kvshare::GqaOutputs o;
  o.output = {out.ptr, c.cache, {c.B, c.S, static_cast<std::int64_t>(c.N) * c.H}};
  o.present_key = kvshare::TensorView{kc.ptr, c.cache, {c.B, c.Nkv, c.T, c.H}};
  o.present_value = kvshare::TensorView{vc.ptr, c.cache, {c.B, c.Nkv, c.T, c.H}};
  kvshare::GqaRunOptions opt;
  opt.device = kvshare::Device::kCuda;

  namespace kd = kvshare::detail;
  if (c.force_mma) kd::SetPrefillPath(kd::PrefillPath::kMma);
  const std::int64_t hopper_before = kd::WgmmaLaunchCount();
  kvshare::GroupQueryAttention(a, in, o, opt);  // warm up
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) kvshare::GroupQueryAttention(a, in, o, opt);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["hopper_kernel"] = kd::WgmmaLaunchCount() > hopper_before ? 1.0 : 0.0;
  kd::ResetPrefillPath();
  const double calls = static_cast<double>(state.iterations());
  if (c.S == 1) {
    const double kv_bytes = 2.0 * c.B * static_cast<double>(kvh) * c.T * static_cast<double>(es);
    const double d2d = D2dBandwidth();
    state.counters["kv_bytes/s"] =
        benchmark::Counter(kv_bytes * calls / sec, benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
    state.counters["d2d_bytes/s"] =
        benchmark::Counter(d2d, benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
    state.counters["bw_ratio"] = kv_bytes * calls / sec / d2d;
  }
  double visible = 0.0;  // query s at position T - S + s sees min(pos + 1, W) keys
  for (int s = 0; s < c.S; ++s) {
    const double pos = static_cast<double>(c.T - c.S + s);
    visible += c.W > 0 ? std::min(pos + 1.0, static_cast<double>(c.W)) : pos + 1.0;
  }
  state.counters["FLOPS"] = benchmark::Counter(4.0 * c.B * c.N * c.H * visible * calls, benchmark::Counter::kIsRate);
}

#else

void BM_CudaAttend(benchmark::State& state, CudaCase) { state.SkipWithError("built without CUDA (KVSHARE_CUDA=OFF)"); }

#endif

void RegisterCuda() {
  struct Shape {
    const char* name;
    int N, Nkv, H;
  };
  // Llama-like (H 128), Gemma 3 27B-like (H 128, 32 / 16), Gemma sliding and
  // full layers (H 256, H 512 of Gemma 4's full layers).
  const Shape shapes[] = {{"n32_kv8_h128", 32, 8, 128}, {"n16_kv8_h256", 16, 8, 256}, {"n16_kv2_h512", 16, 2, 512}};
  for (const Shape& sh : shapes) {
    for (const int B : {1, 16, 64}) {
      for (const int T : {4096, 32768}) {
        const CudaCase c{B, 1, T, sh.N, sh.Nkv, sh.H, 0, DType::kFloat16};
        const std::string name =
            std::string("cuda/decode/") + sh.name + "/B:" + std::to_string(B) + "/T:" + std::to_string(T) + "/f16";
        benchmark::RegisterBenchmark(name.c_str(), BM_CudaAttend, c)->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
    }
    for (const int T : {1024, 4096, 16384}) {
      for (const int W : {0, 1024}) {
        if (W >= T) continue;
        for (const DType dt : {DType::kFloat16, DType::kBFloat16}) {
          for (const bool mma : {false, true}) {
            const CudaCase c{1, T, T, sh.N, sh.Nkv, sh.H, W, dt, mma};
            const std::string name =
                std::string(mma ? "cuda/prefill_mma/" : "cuda/prefill/") + sh.name + "/T:" + std::to_string(T) +
                (W > 0 ? "/W:" + std::to_string(W) : std::string("/causal")) + "/" + kvshare::DTypeName(dt);
            benchmark::RegisterBenchmark(name.c_str(), BM_CudaAttend, c)->UseRealTime()->Unit(benchmark::kMillisecond);
          }
        }
      }
    }
  }
}

const int kRegistered = (RegisterCuda(), 0);

}  // namespace
