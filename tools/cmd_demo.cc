// `kvshare demo`: runs one decode step and one prefill of GroupQueryAttention
// on random data (Gemma 3 270M attention shape by default), checks the
// optimized kernel against the reference, and prints what it computed and how fast.
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "commands.h"
#include "kvshare/attention/gqa.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::cli {
namespace {

struct DemoOptions {
  int heads = 4, kv_heads = 1, head_size = 256, context = 4096, prefill = 512, threads = 0, window = -1;
};

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

void RunDemo(const DemoOptions& o) {
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.f, 1.f);
  auto random = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
  };
  const int N = o.heads, Nkv = o.kv_heads, H = o.head_size;
  const std::int64_t T = o.context;

  // Decode: one new token over a cache of T - 1 past tokens (share buffer).
  auto q = random(static_cast<std::size_t>(N) * H);
  auto k = random(static_cast<std::size_t>(Nkv) * H), v = random(static_cast<std::size_t>(Nkv) * H);
  auto cache_k = random(static_cast<std::size_t>(Nkv) * T * H), cache_v = random(static_cast<std::size_t>(Nkv) * T * H);
  std::vector<float> out(static_cast<std::size_t>(N) * H), ref(out.size());
  std::int32_t seqlen = static_cast<std::int32_t>(T - 1), total = static_cast<std::int32_t>(T);
  GqaAttributes attrs{.num_heads = N, .kv_num_heads = Nkv, .local_window_size = o.window};
  GqaInputs in;
  in.query = {q.data(), DType::kFloat32, {1, 1, N * H}};
  in.key = ConstTensorView{k.data(), DType::kFloat32, {1, 1, Nkv * H}};
  in.value = ConstTensorView{v.data(), DType::kFloat32, {1, 1, Nkv * H}};
  in.past_key = ConstTensorView{cache_k.data(), DType::kFloat32, {1, Nkv, T, H}};
  in.past_value = ConstTensorView{cache_v.data(), DType::kFloat32, {1, Nkv, T, H}};
  in.seqlens_k = ConstTensorView{&seqlen, DType::kInt32, {1}};
  in.total_sequence_length = ConstTensorView{&total, DType::kInt32, {1}};
  GqaOutputs outs;
  outs.output = {out.data(), DType::kFloat32, {1, 1, N * H}};
  outs.present_key = TensorView{cache_k.data(), DType::kFloat32, {1, Nkv, T, H}};
  outs.present_value = TensorView{cache_v.data(), DType::kFloat32, {1, Nkv, T, H}};
  std::printf("kvshare demo: GroupQueryAttention N=%d N_kv=%d H=%d, %d thread(s)\n", N, Nkv, H, threads);
  std::printf("  mode: %s (decode, share buffer)\n", KvModeName(DetectKvMode(attrs, in, outs)));
  const int reps = 20;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) GroupQueryAttention(attrs, in, outs, {.pool = &pool});
  const double dt = Seconds(std::chrono::steady_clock::now() - t0) / reps;
  outs.output.data = ref.data();
  GroupQueryAttention(attrs, in, outs, {.kernel = GqaKernel::kReference});
  double max_diff = 0, checksum = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(out[i] - ref[i])));
    checksum += out[i];
  }
  const double kv_bytes = 2.0 * Nkv * T * H * sizeof(float);
  std::printf("  decode  T=%lld: %.3f ms/step, %.2f GB/s of KV read, output checksum %.6f, max |opt - ref| %.2e\n",
              static_cast<long long>(T), dt * 1e3, kv_bytes / dt / 1e9, checksum, max_diff);

  // Prefill: S = T new tokens, no past, causal.
  const int S = o.prefill;
  auto pq = random(static_cast<std::size_t>(S) * N * H);
  auto pk = random(static_cast<std::size_t>(S) * Nkv * H), pv = random(static_cast<std::size_t>(S) * Nkv * H);
  std::vector<float> pout(pq.size());
  std::int32_t pseq = S - 1, ptotal = S;
  GqaInputs pin;
  pin.query = {pq.data(), DType::kFloat32, {1, S, N * H}};
  pin.key = ConstTensorView{pk.data(), DType::kFloat32, {1, S, Nkv * H}};
  pin.value = ConstTensorView{pv.data(), DType::kFloat32, {1, S, Nkv * H}};
  pin.seqlens_k = ConstTensorView{&pseq, DType::kInt32, {1}};
  pin.total_sequence_length = ConstTensorView{&ptotal, DType::kInt32, {1}};
  GqaOutputs pouts;
  pouts.output = {pout.data(), DType::kFloat32, {1, S, N * H}};
  t0 = std::chrono::steady_clock::now();
  GroupQueryAttention(attrs, pin, pouts, {.pool = &pool});
  const double pdt = Seconds(std::chrono::steady_clock::now() - t0);
  const double flops = 4.0 * N * H * (static_cast<double>(S) * (S + 1) / 2);
  std::printf("  prefill S=%d: %.2f ms, %.2f GFLOP/s\n", S, pdt * 1e3, flops / pdt / 1e9);
}

}  // namespace

void RegisterDemo(CLI::App& app) {
  static DemoOptions o;
  CLI::App* cmd = app.add_subcommand("demo", "GroupQueryAttention on random data: what it computed and how fast");
  cmd->add_option("--heads", o.heads, "Query heads N")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--kv-heads", o.kv_heads, "KV heads N_kv")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--head-size", o.head_size, "Head size H")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--context", o.context, "Decode context length T")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--prefill", o.prefill, "Prefill length S")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--window", o.window, "Sliding window (local_window_size; -1 = off)")->capture_default_str();
  cmd->add_option("--threads", o.threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->callback([] { RunDemo(o); });
}

}  // namespace kvshare::cli
