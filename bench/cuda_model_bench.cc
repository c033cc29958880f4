// Gemma 3 on the GPU (model_cuda.h, MoveModelToCuda) at Gemma 3 270M's shapes
// (18 layers, E 640, n_ff 2048, 4 heads on 1 KV head of 256, vocab 262144,
// window 512, every 6th layer full) with random F16 weights written by the
// tests' tiny-Gemma writer: prefill tok/s of a 512-token prompt and decode
// tok/s after it, one sequence, bf16 KV cache. Random weights give the real
// model's speed, not its text (no model file travels to a GPU machine here).
//   kvshare_bench --benchmark_filter=cuda/model
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#if KVSHARE_HAVE_CUDA
#include <cuda_runtime.h>

#include "kvshare/cuda_model/gemma3_cuda.h"
// GCC 12 reports a false -Wstringop-overflow inside std::vector::insert as
// inlined into the tests' GGUF writer here (the same code builds clean in the tests).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include "model_tiny_gemma.h"
#pragma GCC diagnostic pop
#endif

namespace {

#if KVSHARE_HAVE_CUDA

const kvshare::Model* Gemma3Shapes() {
  static const std::unique_ptr<kvshare::Model> model = [] {
    kvshare::testing::TinyGemmaSpec s;
    s.n_layer = 18;
    s.n_embd = 640;
    s.n_ff = 2048;
    s.n_head = 4;
    s.n_head_kv = 1;
    s.head_dim = 256;
    s.n_vocab = 262144;
    s.window = 512;
    s.pattern = 6;
    s.types = {kvshare::GgmlType::kF16};
    const kvshare::testing::TempGguf file(s, "cuda_bench_270m");
    return kvshare::MoveModelToCuda(kvshare::Model::Load(file.path));
  }();
  return model.get();
}

constexpr std::int64_t kPrompt = 512;

void BM_CudaGemma3(benchmark::State& state, bool decode) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    state.SkipWithError("no usable CUDA device");
    return;
  }
  const kvshare::Model& m = *Gemma3Shapes();
  auto st =
      m.NewState({.max_context = 2048, .max_step = static_cast<int>(kPrompt), .kv_dtype = kvshare::DType::kBFloat16});
  const std::vector<std::int32_t> prompt = kvshare::testing::Tokens(static_cast<int>(kPrompt), m.config().n_vocab, 7);
  const std::int32_t next = 42;
  if (decode) m.Forward(*st, prompt, nullptr);
  std::int64_t tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (decode) {
      if (st->length() >= st->max_context()) st->Rewind(0, kPrompt);
      benchmark::DoNotOptimize(m.Forward(*st, std::span<const std::int32_t>(&next, 1), nullptr).data());
      tokens += 1;
    } else {
      st->Reset();
      benchmark::DoNotOptimize(m.Forward(*st, prompt, nullptr).data());
      tokens += kPrompt;
    }
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["tok/s"] = static_cast<double>(tokens) / sec;
}

#else

void BM_CudaGemma3(benchmark::State& state, bool) { state.SkipWithError("built without CUDA (KVSHARE_CUDA=OFF)"); }

#endif

BENCHMARK_CAPTURE(BM_CudaGemma3, prefill512, false)
    ->Name("cuda/model/gemma3_270m_shapes/prefill512")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CudaGemma3, decode, true)
    ->Name("cuda/model/gemma3_270m_shapes/decode")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
