// The GPU model (model_cuda.h, MoveModelToCuda) at real models' shapes with
// random weights written by the tests' tiny-model writers (random weights give
// a model's speed, not its text; no model file travels to a GPU machine):
//  - gemma3_270m_shapes: Gemma 3 270M (18 layers, E 640, n_ff 2048, 4 heads on
//    1 KV head of 256, vocab 262144, window 512, every 6th layer full), F16
//    weights in the file;
//  - gemma4_e2b_geometry: Gemma 4 E2B as bench/gemma4_e2b_geometry.py
//    describes it (35 layers, E 1536, 8 heads on 1 KV head of 256 sliding /
//    512 full, (4 sliding + 1 full) x 7, window 512, the last 20 layers
//    KV-shared with double-wide MLPs 12288 (6144 before), per-layer inputs of
//    256, proportional RoPE with 64 turning pairs, softcap 30) except the
//    vocabulary: 16384, not 262144 (the writer holds the file in memory, and
//    the per-layer table has a row of 8960 per token), F32 weights in the
//    file, about 8 GB, written once (a minute or so) when first used.
// Each reports prefill tok/s of a 512-token prompt (one row) and decode tok/s
// at C = 1, 8 and 64 rows per ForwardBatch step (every row one token; rows
// first prefilled with 64 tokens in one batched call), bf16 weights and KV
// cache. Decode steps run as CUDA graphs (CudaModelOptions::cuda_graphs,
// docs/gpu.md); cuda/model_eager/gemma3_270m_shapes/decode is the same at C =
// 1 and 8 with graphs off, for the comparison. Not yet run on a GPU.
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

#include "kvshare/cuda_model/model_cuda.h"
// GCC 12 reports a false -Wstringop-overflow inside std::vector::insert as
// inlined into the tests' GGUF writer here (the same code builds clean in the tests).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma4.h"
#pragma GCC diagnostic pop
#endif

namespace {

#if KVSHARE_HAVE_CUDA

std::unique_ptr<kvshare::Model> LoadGemma3Shapes(bool graphs) {
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
  return kvshare::MoveModelToCuda(kvshare::Model::Load(file.path), {.cuda_graphs = graphs});
}

const kvshare::Model* Gemma3Shapes() {
  static const std::unique_ptr<kvshare::Model> model = LoadGemma3Shapes(true);
  return model.get();
}

// The same with CUDA graphs off: every decode step launched kernel by kernel.
const kvshare::Model* Gemma3ShapesEager() {
  static const std::unique_ptr<kvshare::Model> model = LoadGemma3Shapes(false);
  return model.get();
}

const kvshare::Model* Gemma4E2bGeometry() {
  static const std::unique_ptr<kvshare::Model> model = [] {
    kvshare::testing::TinyGemma4Spec s;
    constexpr int kLayers = 35;
    s.sliding.assign(kLayers, true);
    for (int i = 4; i < kLayers; i += 5) s.sliding[static_cast<std::size_t>(i)] = false;
    s.n_embd = 1536;
    s.n_head = 8;
    s.hd_swa = 256;
    s.hd_full = 512;
    s.kv_swa = 1;
    s.kv_full = 1;
    s.n_ff = 6144;
    s.double_wide = true;
    s.window = 512;
    s.shared = 20;
    s.ple = 256;
    s.rope_pairs_full = 64;
    s.softcap = 30.0f;
    s.n_vocab = 16384;
    const kvshare::testing::TempGguf file = kvshare::testing::TempGemma4(s, "cuda_bench_e2b");
    return kvshare::MoveModelToCuda(kvshare::Model::Load(file.path));
  }();
  return model.get();
}

constexpr std::int64_t kPrompt = 512;
constexpr std::int64_t kDecodePrompt = 64;

bool DeviceOrSkip(benchmark::State& state) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    state.SkipWithError("no usable CUDA device");
    return false;
  }
  return true;
}

// Prefill tok/s of a kPrompt-token prompt on one row.
void Prefill(benchmark::State& state, const kvshare::Model& m) {
  auto st =
      m.NewState({.max_context = 2048, .max_step = static_cast<int>(kPrompt), .kv_dtype = kvshare::DType::kBFloat16});
  const std::vector<std::int32_t> prompt = kvshare::testing::Tokens(static_cast<int>(kPrompt), m.config().n_vocab, 7);
  std::int64_t tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    st->Reset();
    benchmark::DoNotOptimize(m.Forward(*st, prompt, nullptr).data());
    tokens += kPrompt;
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["tok/s"] = static_cast<double>(tokens) / sec;
}

// Decode tok/s at C rows per step (state.range(0)): each row holds a
// kDecodePrompt-token prompt, then every step appends one token to each row.
void Decode(benchmark::State& state, const kvshare::Model& m) {
  const int C = static_cast<int>(state.range(0));
  auto st = m.NewState({.max_context = 1024,
                        .max_step = static_cast<int>(kDecodePrompt),
                        .kv_dtype = kvshare::DType::kBFloat16,
                        .max_batch = C});
  std::vector<std::vector<std::int32_t>> prompts;
  for (int r = 0; r < C; ++r) {
    prompts.push_back(kvshare::testing::Tokens(static_cast<int>(kDecodePrompt), m.config().n_vocab, 11 + r));
  }
  // Every row emptied and given its prompt, in one batched call.
  const auto fill = [&] {
    std::vector<kvshare::BatchEntry> entries;
    for (int r = 0; r < C; ++r) {
      st->Reset(r);
      entries.push_back({.row = r, .tokens = prompts[static_cast<std::size_t>(r)]});
    }
    m.ForwardBatch(*st, entries, nullptr);
  };
  fill();
  const std::int32_t next = 42;
  std::vector<kvshare::BatchEntry> step;
  for (int r = 0; r < C; ++r) step.push_back({.row = r, .tokens = std::span<const std::int32_t>(&next, 1)});
  std::int64_t tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (st->length(0) >= st->max_context()) fill();
    benchmark::DoNotOptimize(m.ForwardBatch(*st, step, nullptr).data());
    tokens += C;
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["tok/s"] = static_cast<double>(tokens) / sec;
}

void BM_Gemma3Prefill(benchmark::State& state) {
  if (DeviceOrSkip(state)) Prefill(state, *Gemma3Shapes());
}
void BM_Gemma3Decode(benchmark::State& state) {
  if (DeviceOrSkip(state)) Decode(state, *Gemma3Shapes());
}
void BM_Gemma3DecodeEager(benchmark::State& state) {
  if (DeviceOrSkip(state)) Decode(state, *Gemma3ShapesEager());
}
void BM_Gemma4Prefill(benchmark::State& state) {
  if (DeviceOrSkip(state)) Prefill(state, *Gemma4E2bGeometry());
}
void BM_Gemma4Decode(benchmark::State& state) {
  if (DeviceOrSkip(state)) Decode(state, *Gemma4E2bGeometry());
}

#else

void Skip(benchmark::State& state) { state.SkipWithError("built without CUDA (KVSHARE_CUDA=OFF)"); }
void BM_Gemma3Prefill(benchmark::State& state) { Skip(state); }
void BM_Gemma3Decode(benchmark::State& state) { Skip(state); }
void BM_Gemma3DecodeEager(benchmark::State& state) { Skip(state); }
void BM_Gemma4Prefill(benchmark::State& state) { Skip(state); }
void BM_Gemma4Decode(benchmark::State& state) { Skip(state); }

#endif

// The registration every benchmark here shares; decode: rows per step C.
void Prefill512(benchmark::internal::Benchmark* b) { b->UseRealTime()->Unit(benchmark::kMillisecond); }
void DecodeRows(benchmark::internal::Benchmark* b) { Prefill512(b->ArgName("C")->Arg(1)->Arg(8)->Arg(64)); }

BENCHMARK(BM_Gemma3Prefill)->Name("cuda/model/gemma3_270m_shapes/prefill512")->Apply(Prefill512);
BENCHMARK(BM_Gemma3Decode)->Name("cuda/model/gemma3_270m_shapes/decode")->Apply(DecodeRows);
BENCHMARK(BM_Gemma3DecodeEager)
    ->Name("cuda/model_eager/gemma3_270m_shapes/decode")
    ->ArgName("C")
    ->Arg(1)
    ->Arg(8)
    ->Apply(Prefill512);
BENCHMARK(BM_Gemma4Prefill)->Name("cuda/model/gemma4_e2b_geometry/prefill512")->Apply(Prefill512);
BENCHMARK(BM_Gemma4Decode)->Name("cuda/model/gemma4_e2b_geometry/decode")->Apply(DecodeRows);

}  // namespace
