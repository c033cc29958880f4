// GroupQueryAttention with GqaRunOptions::device = kCuda.
//  - Everywhere: the errors of a CUDA request that cannot run (no usable GPU,
//    or a build without CUDA; the reference kernel, which is CPU-only).
//  - On a GPU (skipped without one): a seeded sweep of every KV mode, dtype,
//    head size and option against the CPU reference kernel (outputs within
//    the fp32 / fp16 tolerance table, cache rows bitwise), the CPU suite's edge
//    cases, and the pointer-placement errors. Decode cases over fp16 / bf16
//    caches run the decode kernel, the rest the general one (run the suite with
//    KVSHARE_CUDA_PLAIN=1 to put every case on the general kernel). Prompt
//    chunks over fp16 / bf16 K/V run on every prefill path (the Hopper kernel,
//    attend_wgmma_cuda.cu, on a compute capability 9.0 device: overlapped or
//    plain loop, output written itself or through the workspace; the mma
//    kernel forced), each against the same CPU reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "attention_gqa_case.h"
#include "attention_gqa_random_case.h"
#include "common_record_measured.h"
#include "cuda_test_util.h"
#include "kvshare/common/error.h"

#if KVSHARE_HAVE_CUDA
#include "cuda/attend_wgmma_cuda.h"
#endif

namespace kvshare::testing {
namespace {

// A valid decode case (append mode with past): the smallest thing to run.
GqaCase SmallCase() {
  std::mt19937_64 g(7);
  GqaCase c;
  c.attrs.num_heads = 4;
  c.attrs.kv_num_heads = 2;
  c.query = RandomBuffer(DType::kFloat32, {1, 1, 4 * 32}, g);
  c.key = RandomBuffer(DType::kFloat32, {1, 1, 2 * 32}, g);
  c.value = RandomBuffer(DType::kFloat32, {1, 1, 2 * 32}, g);
  c.has_key = true;
  c.past_key = RandomBuffer(DType::kFloat32, {1, 2, 3, 32}, g);
  c.past_value = RandomBuffer(DType::kFloat32, {1, 2, 3, 32}, g);
  c.has_past = true;
  c.present_key = Buffer(DType::kFloat32, {1, 2, 4, 32});
  c.present_value = Buffer(DType::kFloat32, {1, 2, 4, 32});
  c.has_present = true;
  c.SetSeqlens({4}, 4);
  c.output = Buffer(DType::kFloat32, {1, 1, 4 * 32});
  return c;
}

void RunCuda(GqaCase& c, GqaKernel kernel = GqaKernel::kAuto) {
  GqaRunOptions opt;
  opt.device = Device::kCuda;
  opt.kernel = kernel;
  GroupQueryAttention(c.attrs, c.Inputs(), c.Outputs(), opt);
}

TEST(CudaGqa, ReferenceKernelIsCpuOnly) {
  GqaCase c = SmallCase();
  const std::string msg = ErrorOf([&] { RunCuda(c, GqaKernel::kReference); });
  EXPECT_NE(msg.find("runs on the CPU only"), std::string::npos) << msg;
}

TEST(CudaGqa, RequestWithoutUsableGpuIsAnActionableError) {
  std::string why;
  if (GpuUsable(&why)) GTEST_SKIP() << "a GPU is usable here; this checks the error without one";
  GqaCase c = SmallCase();
  const std::vector<unsigned char> before = c.present_key.bytes;
  const std::string msg = ErrorOf([&] { RunCuda(c); });
#if KVSHARE_HAVE_CUDA
  EXPECT_NE(msg.find("no CUDA device is usable"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use device cpu"), std::string::npos) << msg;
#else
  EXPECT_NE(msg.find("built without CUDA"), std::string::npos) << msg;
#endif
  EXPECT_EQ(c.present_key.bytes, before) << "nothing may be written";
  // The same case runs on the CPU.
  EXPECT_NO_THROW(c.Run());
}

// Gemma 4's assistant's call (src/model/gemma4_assistant_host.cc,
// AssistantAttend): the read-only static scatter form (no key / value: the
// cache holds the target's K/V) with one query per row at write index p - 1
// and nonpad p, its RoPE moved to p by position_ids, window W + 1 on sliding
// layers, scale 1, a padding row (nonpad 0). Gemma 4 E2B shapes (H 256
// sliding, 512 full; 8 query heads on 1 KV head), a linear cache (full) or a
// ring of W + 1 (sliding), contexts across the window.
GqaCase AssistantDecodeCase(DType cache, bool sliding) {
  std::mt19937_64 g(23);
  const int N = 8, Nkv = 1, H = sliding ? 256 : 512, W = 512;
  const std::vector<std::int64_t> p = {0, 3, 511, 512, 700};  // 0: a padding row
  const auto B = static_cast<std::int64_t>(p.size());
  const std::int64_t cap = sliding ? W + 1 : 1024;  // a ring holds the W + 1 keys (max_step 2)
  GqaCase c;
  c.attrs.num_heads = N;
  c.attrs.kv_num_heads = Nkv;
  c.attrs.scale = 1.0f;
  c.attrs.do_rotary = 1;
  c.attrs.local_window_size = sliding ? W + 1 : -1;
  if (sliding) c.attrs.scatter_mode = GqaAttributes::ScatterMode::kCircular;
  c.query = RandomBuffer(DType::kFloat32, {B, 1, N * H}, g, 0.1f);
  c.present_key = RandomBuffer(cache, {B, Nkv, cap, H}, g);
  c.present_value = RandomBuffer(cache, {B, Nkv, cap, H}, g);
  c.has_present = true;
  c.cos = RandomBuffer(DType::kFloat32, {1024, H / 2}, g);
  c.sin = RandomBuffer(DType::kFloat32, {1024, H / 2}, g);
  c.has_rope = true;
  std::vector<std::int64_t> wi, np, pos;
  for (const std::int64_t t : p) {
    wi.push_back(t > 0 ? t - 1 : 0);
    np.push_back(t);
    pos.push_back(t);
  }
  c.write_indices = Int64Buffer(wi, {B});
  c.nonpad = Int64Buffer(np, {B});
  c.has_scatter = true;
  c.position_ids = Int64Buffer(pos, {B, 1});
  c.has_pos = true;
  c.output = Buffer(DType::kFloat32, {B, 1, N * H});
  return c;
}

// The case is valid and the CPU kernels agree on it (run everywhere).
TEST(CudaGqa, AssistantDecodeCaseRunsOnTheCpu) {
  for (const bool sliding : {false, true}) {
    GqaCase ref = AssistantDecodeCase(DType::kBFloat16, sliding), opt = ref;
    ASSERT_NO_THROW(ref.Run(GqaKernel::kReference));
    ASSERT_NO_THROW(opt.Run(GqaKernel::kOptimized));
    EXPECT_LT(MaxRelDiff(opt.output.ToFloat(), ref.output.ToFloat()), 1e-5) << "sliding " << sliding;
    const std::vector<float> out = ref.output.ToFloat();
    EXPECT_TRUE(std::all_of(out.begin(), out.begin() + 8 * (sliding ? 256 : 512), [](float x) { return x == 0; }))
        << "the padding row's output is zero";
  }
}

#if KVSHARE_HAVE_CUDA

// c's inputs and outputs with the float tensors in m's device memory.
void Mirror(GqaCase& c, DeviceMirror& m, GqaInputs& in, GqaOutputs& out) {
  in = c.Inputs();
  out = c.Outputs();
  in.query = m.In(in.query);
  for (auto* v : {&in.key, &in.value, &in.past_key, &in.past_value, &in.cos_cache, &in.sin_cache, &in.attention_bias,
                  &in.head_sink}) {
    if (*v) *v = m.In(**v);
  }
  out.output = m.Out(out.output);
  for (auto* v : {&out.present_key, &out.present_value, &out.output_qk}) {
    if (*v) *v = m.Out(**v);
  }
}

// Runs c on the GPU with its float tensors mirrored to device memory; the
// outputs (and caches written in place) come back into c's buffers.
void RunOnGpu(GqaCase& c) {
  DeviceMirror m;
  GqaInputs in;
  GqaOutputs out;
  Mirror(c, m, in, out);
  GqaRunOptions opt;
  opt.device = Device::kCuda;
  GroupQueryAttention(c.attrs, in, out, opt);
  m.CopyBack();
}

// got against want within tol relative to the largest |want| (at least 1);
// NaN never passes. A failure names the largest absolute and relative error
// and the first element over the tolerance; with heads > 0 the buffers are
// outputs [B, S, heads * H] and the element is given as (b, s, head, dim).
void ExpectClose(const Buffer& got, const Buffer& want, double tol, const std::string& what, int heads = 0, int H = 0) {
  ASSERT_EQ(got.Size(), want.Size()) << what;
  const std::vector<float> g = got.ToFloat(), w = want.ToFloat();
  double scale = 1.0, max_abs = 0.0;
  for (const float x : w) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  std::int64_t first = -1, nans = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double d = std::fabs(static_cast<double>(g[i]) - w[i]);
    const bool bad = std::isnan(g[i]) || std::isnan(w[i]) || d > tol * scale;
    if (std::isnan(g[i])) ++nans;
    if (!std::isnan(d)) max_abs = std::max(max_abs, d);
    if (bad && first < 0) first = static_cast<std::int64_t>(i);
  }
  if (first < 0) return;
  std::string where = "element " + std::to_string(first);
  if (heads > 0 && H > 0) {
    const std::int64_t S = got.shape.rank == 3 ? got.shape[1] : 1;
    const std::int64_t d = first % H, h = first / H % heads, s = first / (H * heads) % S, b = first / (H * heads * S);
    where += " (b " + std::to_string(b) + ", s " + std::to_string(s) + ", head " + std::to_string(h) + ", dim " +
             std::to_string(d) + ")";
  }
  ADD_FAILURE() << what << ": max abs error " << max_abs << ", max relative " << max_abs / scale << " (tolerance "
                << tol << " of " << scale << "), " << nans << " NaN; first wrong " << where << ": got "
                << g[static_cast<std::size_t>(first)] << ", want " << w[static_cast<std::size_t>(first)];
}

// The dtype of the K/V the attention reads: the cache when there is one,
// else the inputs (external K/V).
DType AttendedKvDtype(const GqaCase& c) {
  if (c.has_present) return c.present_key.dtype;
  if (c.has_past) return c.past_key.dtype;
  return c.key.dtype;
}

// Largest relative output error seen per attended K/V dtype (printed by the
// tests that sweep).
std::map<std::string, double>& WorstError() {
  static std::map<std::string, double> worst;
  return worst;
}

// The output's tolerance: the table's for its dtype, and the tensor-core
// kernel's 16-bit one where it may take the case (attend_mma_cuda.h: fp16 /
// bf16 K/V, no bias, no output_qk; H 64 - 512, which is not checked here).
double OutputTolerance(const GqaCase& c) {
  const double table = Tolerance(c.output.dtype, c.output.dtype);
  return c.has_bias || c.has_qk ? table : TensorCoreTolerance(AttendedKvDtype(c), table);
}

using detail::PrefillPath;

// The prefill path GPU runs take (attend_wgmma_cuda.h) within the scope;
// the environment's choice again after it.
class PrefillPathScope {
 public:
  explicit PrefillPathScope(PrefillPath path) { detail::SetPrefillPath(path); }
  ~PrefillPathScope() { detail::ResetPrefillPath(); }
  PrefillPathScope(const PrefillPathScope&) = delete;
  PrefillPathScope& operator=(const PrefillPathScope&) = delete;
};

// Every prefill path: the automatic choice (the Hopper kernel where it takes
// the case: its overlapped loop, writing the output itself when it needs one
// key split), the Hopper kernel always through the workspace and the combine
// kernel, the Hopper kernel's plain loop, and the mma kernel forced. Where
// the Hopper kernel takes a case it runs kHopperRuns times.
constexpr std::initializer_list<PrefillPath> kAllPaths = {PrefillPath::kAuto, PrefillPath::kWorkspace,
                                                          PrefillPath::kNoOverlap, PrefillPath::kMma};
constexpr int kHopperRuns = 3;

const char* PathName(PrefillPath path) {
  switch (path) {
    case PrefillPath::kAuto: return "prefill path: automatic (KVSHARE_CUDA_PREFILL unset)";
    case PrefillPath::kWorkspace: return "prefill path: Hopper kernel through the workspace (=workspace)";
    case PrefillPath::kNoOverlap: return "prefill path: Hopper kernel's plain loop (=nooverlap)";
    default: return "prefill path: mma kernel forced (=mma)";
  }
}

// The GPU runs of c, one per path, against one CPU reference run.
void ExpectGpuMatchesCpu(const GqaCase& c, const std::string& desc,
                         std::initializer_list<PrefillPath> paths = {PrefillPath::kAuto}) {
  SCOPED_TRACE(desc);
  GqaCase ref = c;
  ref.Run(GqaKernel::kReference);
  const int heads = c.attrs.num_heads;
  const int H = c.output.shape.rank == 3 ? static_cast<int>(c.output.shape[2] / heads) : 0;
  for (const PrefillPath path : paths) {
    SCOPED_TRACE(PathName(path));
    const PrefillPathScope scope(path);
    GqaCase gpu = c;
    ASSERT_NO_THROW(RunOnGpu(gpu));
    ExpectClose(gpu.output, ref.output, OutputTolerance(c), "output", heads, H);
    double& worst =
        WorstError()[std::string("kv ") + DTypeName(AttendedKvDtype(c)) + ", output " + DTypeName(c.output.dtype)];
    worst = std::max(worst, MaxRelDiff(gpu.output.ToFloat(), ref.output.ToFloat()));
    if (ref.has_qk) ExpectClose(gpu.qk, ref.qk, Tolerance(ref.qk.dtype, ref.output.dtype), "output_qk");
    EXPECT_EQ(gpu.present_key.bytes, ref.present_key.bytes) << "present_key";
    EXPECT_EQ(gpu.present_value.bytes, ref.present_value.bytes) << "present_value";
    EXPECT_EQ(gpu.past_key.bytes, ref.past_key.bytes) << "past_key (share buffer)";
  }
}

// True on a device of compute capability 9.0 (where the Hopper kernel runs).
bool HopperDevice() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

// Counts the Hopper kernel's launches over a scope: on a compute capability
// 9.0 device there must have been `expected` (one per case and Hopper path).
class HopperLaunches {
 public:
  HopperLaunches() : before_(detail::WgmmaLaunchCount()) {}
  std::int64_t Ran() const { return detail::WgmmaLaunchCount() - before_; }
  void Expect(std::int64_t expected) const {
    if (!HopperDevice()) {
      testing::RecordMeasured("  (not a compute capability 9.0 device: the Hopper kernel was not run)\n");
      return;
    }
    EXPECT_EQ(Ran(), expected) << "Hopper kernel launches; its last refusal: \"" << detail::LastWgmmaRefusal() << "\"";
  }

 private:
  std::int64_t before_;
};

class CudaGqaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
  }
};

TEST_F(CudaGqaDevice, SweepMatchesCpuReference) {
  const int configs =
      std::getenv("KVSHARE_CUDA_SWEEP_CONFIGS") ? std::atoi(std::getenv("KVSHARE_CUDA_SWEEP_CONFIGS")) : 360;
  Rng r(20261123);
  const KvMode modes[] = {KvMode::kAppend,          KvMode::kShareBuffer,
                          KvMode::kBorrowedEmptyKv, KvMode::kBorrowedOmittedKv,
                          KvMode::kExternalKv,      KvMode::kStaticScatter};
  int ran = 0;
  for (int i = 0; i < configs; ++i) {
    std::string desc;
    const GqaCase c = RandomCase(r, modes[i % 6], &desc);
    ExpectGpuMatchesCpu(c, desc);
    if (HasFailure()) break;
    ++ran;
  }
  testing::RecordMeasured("CudaGqa sweep: %d configurations compared with the CPU reference\n", ran);
  for (const auto& [what, err] : WorstError())
    testing::RecordMeasured("  largest relative output error, %s: %.3g\n", what.c_str(), err);
}

// A static-scatter prompt step: N query heads on Nkv KV heads of size H,
// queries and new K/V [B, S, heads * H] and a cache of shape `cache` (BNSH or
// 3-D), all random of dtype dt; row b writes n[b] keys ending at end[b];
// random sinks when `sinks`; causal, no window.
GqaCase ScatterPrompt(int N, int Nkv, int H, DType dt, std::int64_t S, const Shape& cache,
                      const std::vector<std::int64_t>& n, const std::vector<std::int64_t>& end, bool sinks,
                      std::mt19937_64& g) {
  const std::int64_t B = static_cast<std::int64_t>(n.size());
  GqaCase c;
  c.attrs.num_heads = N;
  c.attrs.kv_num_heads = Nkv;
  c.query = RandomBuffer(dt, {B, S, N * H}, g);
  c.key = RandomBuffer(dt, {B, S, Nkv * H}, g);
  c.value = RandomBuffer(dt, {B, S, Nkv * H}, g);
  c.has_key = true;
  c.present_key = RandomBuffer(dt, cache, g);
  c.present_value = RandomBuffer(dt, cache, g);
  c.has_present = true;
  if (sinks) {
    c.sink = RandomBuffer(DType::kFloat32, {N}, g);
    c.has_sink = true;
  }
  c.SetScatter(n, end);
  c.output = Buffer(dt, {B, S, N * H});
  return c;
}

// Prompt chunks on the tensor-core kernels (fp16 / bf16 caches, H 64 / 128 /
// 256, G = 1 / 4 / 8): static scatter over ragged rows (a long chunk, a short
// one, one token) into caches that already hold keys, causal with and
// without a window, softcap and sinks on some; each on every prefill path.
TEST_F(CudaGqaDevice, PromptChunksMatchCpuReference) {
  WorstError().clear();
  int ran = 0, hopper = 0;
  const HopperLaunches launches;
  for (const int H : {64, 128, 256}) {
    for (const auto& [N, Nkv] : {std::pair{8, 8}, std::pair{8, 2}, std::pair{16, 2}}) {
      for (const DType dt : {DType::kFloat16, DType::kBFloat16}) {
        for (const int W : {-1, 100}) {
          for (const std::int64_t S : {37, 130}) {
            std::mt19937_64 g(1000 + ran);
            const std::int64_t B = 3, cap = 512;
            GqaCase c =
                ScatterPrompt(N, Nkv, H, dt, S, {B, Nkv, cap, H}, {S, 7, 1}, {S + 300, 450, 1}, ran % 4 == 2, g);
            c.attrs.local_window_size = W;
            if (ran % 3 == 1) c.attrs.softcap = 30.0f;
            ExpectGpuMatchesCpu(c,
                                "H " + std::to_string(H) + " N " + std::to_string(N) + " N_kv " + std::to_string(Nkv) +
                                    " " + DTypeName(dt) + " W " + std::to_string(W) + " S " + std::to_string(S),
                                kAllPaths);
            if (HasFailure()) return;
            ++ran;
            hopper += H >= 128 && S * (N / Nkv) >= 64;  // attend_wgmma_plan.h's prefill shapes
          }
        }
      }
    }
  }
  launches.Expect(kHopperRuns * hopper);
  testing::RecordMeasured(
      "CudaGqa prompt chunks: %d configurations compared with the CPU reference on every prefill path, %lld "
      "Hopper kernel launches\n",
      ran, static_cast<long long>(launches.Ran()));
  for (const auto& [what, err] : WorstError())
    testing::RecordMeasured("  largest relative output error, %s: %.3g\n", what.c_str(), err);
}

// Bidirectional spans (gqa.h; an image's soft tokens in a prompt chunk): the
// GPU kernels read the per-query causal bound they imply (causal_end), the
// CPU reference the pairs. Static-scatter chunks over fp32 caches (the
// general kernel) and fp16 / bf16 ones (the mma and Hopper kernels, every
// prefill path), H 64 / 256, each as G 1, no window, S 37 and as G 4, window
// 24, S 130: row 0's queries [300, 300 + S) hold two spans, the second
// ending at the chunk's end; row 1's [443, 450) one; row 2 (one token)
// none, padded with (0, 0).
// The reference with the spans must differ from the one without (else the
// case would not test them).
TEST_F(CudaGqaDevice, BidirectionalSpansMatchCpuReference) {
  WorstError().clear();
  struct Geom {
    int N, Nkv, W;
    std::int64_t S;
  };
  int ran = 0;
  for (const int H : {64, 256}) {
    for (const Geom& sh : {Geom{4, 4, -1, 37}, Geom{8, 2, 24, 130}}) {
      for (const DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        std::mt19937_64 g(5000 + ran);
        const std::int64_t B = 3, cap = 512, S = sh.S;
        GqaCase c = ScatterPrompt(sh.N, sh.Nkv, H, dt, S, {B, sh.Nkv, cap, H}, {S, 7, 1}, {S + 300, 450, 1}, false, g);
        c.attrs.local_window_size = sh.W;
        const std::int64_t mid = 300 + S / 2;
        c.spans = Int64Buffer({303, mid, mid + 2, 300 + S, 444, 449, 0, 0, 0, 0, 0, 0}, {B, 2, 2});
        GqaCase causal = c;
        c.has_spans = true;
        const std::string desc = "spans: H " + std::to_string(H) + " N " + std::to_string(sh.N) + " N_kv " +
                                 std::to_string(sh.Nkv) + " " + DTypeName(dt) + " W " + std::to_string(sh.W) + " S " +
                                 std::to_string(S);
        GqaCase with = c;
        with.Run(GqaKernel::kReference);
        causal.Run(GqaKernel::kReference);
        ASSERT_GT(MaxRelDiff(with.output.ToFloat(), causal.output.ToFloat()), 1e-3) << desc;
        ExpectGpuMatchesCpu(c, desc,
                            dt == DType::kFloat32 ? std::initializer_list<PrefillPath>{PrefillPath::kAuto} : kAllPaths);
        if (HasFailure()) return;
        ++ran;
      }
    }
  }
  testing::RecordMeasured("CudaGqa bidirectional spans: %d configurations compared with the CPU reference\n", ran);
  for (const auto& [what, err] : WorstError())
    testing::RecordMeasured("  largest relative output error, %s: %.3g\n", what.c_str(), err);
}

// An encoder's attention (ModelConfig::causal false: EmbeddingGemma's
// layers in Model::Embed on the GPU, tests/cuda_model_embed_test.cc):
// causal = 0 with a symmetric window (|p - j| < W) or none, static scatter
// of each row's whole input from write index 0 into a linear cache, as
// Embed's states run it. fp32 / fp16 / bf16 caches (every prefill path for
// the 16-bit ones at H 64 / 256), H 32 / 64 / 256, G 2 with W 5 (the embedding fixture's)
// and G 4 with W 24; rows of 40, 9 and 1 tokens. The reference with the
// window must differ from the one without (else the window would go
// untested).
TEST_F(CudaGqaDevice, SymmetricWindowMatchesCpuReference) {
  WorstError().clear();
  struct Geom {
    int N, Nkv, W;
  };
  int ran = 0;
  for (const int H : {32, 64, 256}) {
    for (const Geom& sh : {Geom{2, 1, 5}, Geom{8, 2, 24}}) {
      for (const DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        std::mt19937_64 g(7000 + ran);
        const std::int64_t S = 40;
        GqaCase c = ScatterPrompt(sh.N, sh.Nkv, H, dt, S, {3, sh.Nkv, 64, H}, {S, 9, 1}, {S, 9, 1}, false, g);
        c.attrs.causal = 0;
        GqaCase whole = c;
        c.attrs.local_window_size = sh.W;
        const std::string desc = "causal 0: H " + std::to_string(H) + " N " + std::to_string(sh.N) + " N_kv " +
                                 std::to_string(sh.Nkv) + " " + DTypeName(dt) + " W " + std::to_string(sh.W);
        GqaCase windowed = c;
        windowed.Run(GqaKernel::kReference);
        whole.Run(GqaKernel::kReference);
        ASSERT_GT(MaxRelDiff(windowed.output.ToFloat(), whole.output.ToFloat()), 1e-3) << desc;
        const bool tensor_cores = dt != DType::kFloat32 && H != 32;  // else only the fp32 kernels take it
        ExpectGpuMatchesCpu(c, desc, tensor_cores ? kAllPaths : std::initializer_list<PrefillPath>{PrefillPath::kAuto});
        ExpectGpuMatchesCpu(whole, desc + " (no window)", {PrefillPath::kAuto});
        if (HasFailure()) return;
        ++ran;
      }
    }
  }
  testing::RecordMeasured("CudaGqa causal 0, symmetric window: %d configurations compared with the CPU reference\n",
                          ran);
  for (const auto& [what, err] : WorstError())
    testing::RecordMeasured("  largest relative output error, %s: %.3g\n", what.c_str(), err);
}

// Sets keys j >= end[b] of every row b and KV head of a cache [B, N_kv, C, H]
// (bnsh) or [B, C, N_kv * H] to NaN: what a kernel reads past a row's keys
// must not reach its output (the Hopper kernel's TMA tiles span the longest
// row and zero the V rows past a shorter one).
void PoisonPastEnd(Buffer& cache, const std::vector<std::int64_t>& end, bool bnsh, int Nkv, int H) {
  const std::int64_t C = bnsh ? cache.shape[2] : cache.shape[1];
  for (std::size_t b = 0; b < end.size(); ++b) {
    for (int n = 0; n < Nkv; ++n) {
      for (std::int64_t j = end[b]; j < C; ++j) {
        const auto bi = static_cast<std::int64_t>(b);
        const std::int64_t base = bnsh ? ((bi * Nkv + n) * C + j) * H : (bi * C + j) * Nkv * H + n * H;
        for (int d = 0; d < H; ++d) cache.Set(base + d, NAN);
      }
    }
  }
}

// Prompt chunks where the Hopper kernel's tiles have edges, case i at head
// size H and G query heads per KV head: fp16 or bf16, a BNSH or 3-D cache,
// two ragged rows with and without keys already cached (S < T), chunk
// lengths and windows on either side of a tile (KT - 1, KT, KT + 1 keys; a
// window wider than the keys), softcap or sinks on some, NaN in the caches
// past each row's keys. *desc names it; *hopper: whether the Hopper kernel
// takes it (attend_wgmma_plan.h: S * G >= 64).
GqaCase HopperEdgeCase(int H, int G, int i, std::string* desc, bool* hopper) {
  const int kt = H == 128 ? 128 : H == 256 ? 64 : 32;  // attend_wgmma_plan.h's keys per tile
  const int Nkv = G == 8 ? 1 : 2, N = Nkv * G;
  const DType dt = i % 2 == 0 ? DType::kFloat16 : DType::kBFloat16;
  const int windows[] = {-1, kt - 1, kt, kt + 1, 4 * kt + 50};
  const int W = windows[i % 5];
  const bool bnsh = i % 3 != 2;
  // Row 0: 2 KT + 5 new keys (or 77) after 0 or 300 cached; row 1: a
  // shorter chunk (or as long) after a different past.
  const std::int64_t S0 = i % 2 == 0 ? 2 * kt + 5 : 77, S1 = i % 4 == 1 ? S0 : S0 / 2 + 3;
  const std::int64_t past0 = i % 3 == 0 ? 0 : 300, past1 = 131 + i;
  const std::vector<std::int64_t> n = {S0, S1}, end = {past0 + S0, past1 + S1};
  const std::int64_t B = 2, cap = 640;
  std::mt19937_64 g(4400 + i);
  const Shape cache = bnsh ? Shape{B, Nkv, cap, H} : Shape{B, cap, Nkv * H};
  GqaCase c = ScatterPrompt(N, Nkv, H, dt, S0, cache, n, end, i % 4 == 3, g);
  c.attrs.local_window_size = W;
  if (i % 3 == 1) c.attrs.softcap = 30.0f;
  PoisonPastEnd(c.present_key, end, bnsh, Nkv, H);
  PoisonPastEnd(c.present_value, end, bnsh, Nkv, H);
  *desc = "H " + std::to_string(H) + " N " + std::to_string(N) + " N_kv " + std::to_string(Nkv) + " " + DTypeName(dt) +
          (bnsh ? " BNSH" : " 3-D") + " cache, W " + std::to_string(W) + ", rows: " + std::to_string(S0) +
          " new after " + std::to_string(past0) + ", " + std::to_string(S1) + " new after " + std::to_string(past1) +
          (c.attrs.softcap > 0 ? ", softcap 30" : "") + (c.has_sink ? ", sinks" : "");
  *hopper = S0 * G >= 64;
  return c;
}

// The edge cases at H 128 / 256 / 512 x G 1 / 2 / 4 / 8, each on every
// prefill path.
TEST_F(CudaGqaDevice, HopperPrefillEdgesMatchCpuReference) {
  WorstError().clear();
  int ran = 0, hopper = 0;
  const HopperLaunches launches;
  for (const int H : {128, 256, 512}) {
    for (const int G : {1, 2, 4, 8}) {
      std::string desc;
      bool takes = false;
      const GqaCase c = HopperEdgeCase(H, G, ran, &desc, &takes);
      ExpectGpuMatchesCpu(c, desc, kAllPaths);
      if (HasFailure()) return;
      ++ran;
      hopper += takes;
    }
  }
  launches.Expect(kHopperRuns * hopper);
  testing::RecordMeasured(
      "CudaGqa Hopper prefill edges: %d configurations on every prefill path, %lld Hopper kernel launches\n", ran,
      static_cast<long long>(launches.Ran()));
  for (const auto& [what, err] : WorstError())
    testing::RecordMeasured("  largest relative output error, %s: %.3g\n", what.c_str(), err);
}

// Inputs that isolate one stage of the Hopper kernel, so a failure of the
// edge cases above says where to look: K = 0 (every visible key weighs the
// same: only the V tiles, P V and the mask's extent matter) and V one-hot
// (value j is unit vector j mod H: the output is the probabilities, so Q K^T,
// the Q and K tiles and the softmax show through). H 128 / 256 / 512, G 2,
// fp16, one prompt of 2 tiles + 3 keys; every path, and every case runs
// even after a failure (the pattern of failures is the diagnosis).
TEST_F(CudaGqaDevice, HopperPrefillStagesMatchCpuReference) {
  int expected = 0;
  const HopperLaunches launches;
  for (const int H : {128, 256, 512}) {
    const int kt = H == 128 ? 128 : H == 256 ? 64 : 32;
    for (const bool uniform : {true, false}) {
      const int N = 4, Nkv = 2;
      const std::int64_t S = 2 * kt + 3;
      std::mt19937_64 g(77 + H);
      GqaCase c;
      c.attrs.num_heads = N;
      c.attrs.kv_num_heads = Nkv;
      c.query = RandomBuffer(DType::kFloat16, {1, S, N * H}, g, 0.5f);
      c.key =
          uniform ? Buffer(DType::kFloat16, {1, S, Nkv * H}) : RandomBuffer(DType::kFloat16, {1, S, Nkv * H}, g, 0.5f);
      c.value = RandomBuffer(DType::kFloat16, {1, S, Nkv * H}, g);
      if (!uniform) {
        for (std::int64_t j = 0; j < S; ++j) {
          for (int n = 0; n < Nkv; ++n) {
            for (int d = 0; d < H; ++d) c.value.Set((j * Nkv + n) * H + d, d == j % H ? 1.0f : 0.0f);
          }
        }
      }
      c.has_key = true;
      c.present_key = Buffer(DType::kFloat16, {1, Nkv, S, H});
      c.present_value = Buffer(DType::kFloat16, {1, Nkv, S, H});
      c.has_present = true;
      c.SetScatter({S}, {S});
      c.output = Buffer(DType::kFloat16, {1, S, N * H});
      ExpectGpuMatchesCpu(c,
                          std::string("H ") + std::to_string(H) +
                              (uniform ? ": K = 0, so P V alone (V tiles, the mask's extent)"
                                       : ": V one-hot, so the output is P (Q K^T, Q / K tiles, softmax)"),
                          kAllPaths);
      ++expected;
    }
  }
  launches.Expect(kHopperRuns * expected);
}

// Static scatter decode at Gemma shapes (H = 256, 8 heads on 1 KV head, f16
// cache, window 512) over ragged rows: T = 1, the window boundary 511 / 512 /
// 513, and a row with no new token (padding: zeros, nothing written).
TEST_F(CudaGqaDevice, EdgeCasesMatchCpuReference) {
  for (const DType cache : {DType::kFloat16, DType::kBFloat16, DType::kQ8_0}) {
    for (const bool circular : {false, true}) {
      std::mt19937_64 g(11);
      GqaCase c;
      const int N = 8, Nkv = 1, H = 256, W = 512, S = 1;
      const std::vector<std::int64_t> T = {1, 511, 512, 513, 700};
      const auto B = static_cast<std::int64_t>(T.size());
      c.attrs.num_heads = N;
      c.attrs.kv_num_heads = Nkv;
      c.attrs.local_window_size = W;
      c.attrs.softcap = 50.0f;
      if (circular) c.attrs.scatter_mode = GqaAttributes::ScatterMode::kCircular;
      const std::int64_t cap = circular ? W + S - 1 : 1024;
      c.query = RandomBuffer(DType::kFloat16, {B, S, N * H}, g);
      c.key = RandomBuffer(DType::kFloat16, {B, S, Nkv * H}, g);
      c.value = RandomBuffer(DType::kFloat16, {B, S, Nkv * H}, g);
      c.has_key = true;
      c.present_key = RandomBuffer(cache, {B, Nkv, cap, H}, g);
      c.present_value = RandomBuffer(cache, {B, Nkv, cap, H}, g);
      c.has_present = true;
      std::vector<std::int64_t> n(T.size(), 1);
      n.back() = 0;  // padding row
      c.SetScatter(n, T);
      c.output = Buffer(DType::kFloat16, {B, S, N * H});
      ExpectGpuMatchesCpu(c, std::string("cache ") + DTypeName(cache) + (circular ? " circular" : " linear"));
    }
  }
}

TEST_F(CudaGqaDevice, AssistantReadOnlyDecodeMatchesCpuReference) {
  for (const DType cache : {DType::kFloat16, DType::kBFloat16}) {
    for (const bool sliding : {false, true}) {
      ExpectGpuMatchesCpu(AssistantDecodeCase(cache, sliding),
                          std::string("cache ") + DTypeName(cache) + (sliding ? " sliding (circular)" : " full"));
    }
  }
}

TEST_F(CudaGqaDevice, TensorsInTheWrongMemoryAreErrors) {
  GqaCase c = SmallCase();
  // Host pointers everywhere: the float tensors must be device memory.
  std::string msg = ErrorOf([&] { RunCuda(c); });
  EXPECT_NE(msg.find("query must be in device memory"), std::string::npos) << msg;
  // seqlens_k in device memory: index inputs must stay on the host.
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 16), cudaSuccess);
  DeviceMirror m;
  GqaInputs in;
  GqaOutputs out;
  Mirror(c, m, in, out);
  in.seqlens_k->data = dev;
  msg = ErrorOf([&] {
    GqaRunOptions opt;
    opt.device = Device::kCuda;
    GroupQueryAttention(c.attrs, in, out, opt);
  });
  cudaFree(dev);
  EXPECT_NE(msg.find("seqlens_k must be in host memory"), std::string::npos) << msg;
}

#endif  // KVSHARE_HAVE_CUDA

}  // namespace
}  // namespace kvshare::testing
