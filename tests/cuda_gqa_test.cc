// GroupQueryAttention with GqaRunOptions::device = kCuda.
//  - Everywhere: the errors of a CUDA request that cannot run (no usable GPU,
//    or a build without CUDA; the reference kernel, which is CPU-only).
//  - On a GPU (skipped without one): a seeded sweep of every KV mode, dtype,
//    head size and option against the CPU reference kernel (outputs within
//    the fp32 / fp16 tolerance table, cache rows bitwise), the CPU suite's edge
//    cases, and the pointer-placement errors. Decode cases over fp16 / bf16
//    caches run the decode kernel, the rest the general one (run the suite with
//    KVSHARE_CUDA_PLAIN=1 to put every case on the general kernel).
#include <gtest/gtest.h>

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

void ExpectClose(const Buffer& got, const Buffer& want, double tol, const std::string& what) {
  ASSERT_EQ(got.Size(), want.Size()) << what;
  EXPECT_LT(MaxRelDiff(got.ToFloat(), want.ToFloat()), tol) << what;
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

// The GPU run of c against the CPU reference kernel.
void ExpectGpuMatchesCpu(const GqaCase& c, const std::string& desc) {
  SCOPED_TRACE(desc);
  GqaCase ref = c, gpu = c;
  ref.Run(GqaKernel::kReference);
  ASSERT_NO_THROW(RunOnGpu(gpu));
  ExpectClose(gpu.output, ref.output, OutputTolerance(c), "output");
  double& worst =
      WorstError()[std::string("kv ") + DTypeName(AttendedKvDtype(c)) + ", output " + DTypeName(c.output.dtype)];
  worst = std::max(worst, MaxRelDiff(gpu.output.ToFloat(), ref.output.ToFloat()));
  if (ref.has_qk) ExpectClose(gpu.qk, ref.qk, Tolerance(ref.qk.dtype, ref.output.dtype), "output_qk");
  EXPECT_EQ(gpu.present_key.bytes, ref.present_key.bytes) << "present_key";
  EXPECT_EQ(gpu.present_value.bytes, ref.present_value.bytes) << "present_value";
  EXPECT_EQ(gpu.past_key.bytes, ref.past_key.bytes) << "past_key (share buffer)";
}

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

// Prompt chunks on the tensor-core kernel (fp16 / bf16 caches, H 64 / 128 /
// 256, G = 1 / 4 / 8): static scatter over ragged rows (a long chunk, a short
// one, one token) into caches that already hold keys, causal with and
// without a window, softcap and sinks on some.
TEST_F(CudaGqaDevice, PromptChunksMatchCpuReference) {
  WorstError().clear();
  int ran = 0;
  for (const int H : {64, 128, 256}) {
    for (const auto& [N, Nkv] : {std::pair{8, 8}, std::pair{8, 2}, std::pair{16, 2}}) {
      for (const DType dt : {DType::kFloat16, DType::kBFloat16}) {
        for (const int W : {-1, 100}) {
          for (const std::int64_t S : {37, 130}) {
            std::mt19937_64 g(1000 + ran);
            GqaCase c;
            c.attrs.num_heads = N;
            c.attrs.kv_num_heads = Nkv;
            c.attrs.local_window_size = W;
            if (ran % 3 == 1) c.attrs.softcap = 30.0f;
            const std::vector<std::int64_t> n = {S, 7, 1}, end = {S + 300, 450, 1};
            const std::int64_t B = 3, cap = 512;
            c.query = RandomBuffer(dt, {B, S, N * H}, g);
            c.key = RandomBuffer(dt, {B, S, Nkv * H}, g);
            c.value = RandomBuffer(dt, {B, S, Nkv * H}, g);
            c.has_key = true;
            c.present_key = RandomBuffer(dt, {B, Nkv, cap, H}, g);
            c.present_value = RandomBuffer(dt, {B, Nkv, cap, H}, g);
            c.has_present = true;
            if (ran % 4 == 2) {
              c.sink = RandomBuffer(DType::kFloat32, {N}, g);
              c.has_sink = true;
            }
            c.SetScatter(n, end);
            c.output = Buffer(dt, {B, S, N * H});
            ExpectGpuMatchesCpu(c, "H " + std::to_string(H) + " N " + std::to_string(N) + " N_kv " +
                                       std::to_string(Nkv) + " " + DTypeName(dt) + " W " + std::to_string(W) + " S " +
                                       std::to_string(S));
            if (HasFailure()) return;
            ++ran;
          }
        }
      }
    }
  }
  testing::RecordMeasured("CudaGqa prompt chunks: %d configurations compared with the CPU reference\n", ran);
  for (const auto& [what, err] : WorstError())
    testing::RecordMeasured("  largest relative output error, %s: %.3g\n", what.c_str(), err);
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
