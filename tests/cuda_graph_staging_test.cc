// The pieces under the GPU model's CUDA graphs (docs/gpu.md "CUDA graphs of
// decode steps"), on a GPU (skipped without one):
//  - PinnedStaging: each Put's copy stays unchanged until Reset, across
//    blocks; Reset reuses the memory;
//  - a staged upload captured into a graph reads the staged copy at launch,
//    and cudaGraphExecUpdate repoints it at the next step's copy;
//  - nothing grows while a stream is being captured: GqaCudaWorkspace and
//    PinnedStaging raise kvshare::Error instead (the capture then falls back).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_test_util.h"

#if KVSHARE_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/gqa_workspace.h"
#include "cuda/pinned_staging.h"

namespace kvshare::testing {
namespace {

using detail::GqaCudaWorkspace;
using detail::PinnedStaging;

class CudaGraphStaging : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

std::vector<std::int32_t> Iota(std::size_t n, std::int32_t from) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST_F(CudaGraphStaging, PutKeepsEachCopyUntilReset) {
  PinnedStaging s;
  const auto a = Iota(25, 1), b = Iota(40000, 100), c = Iota(25, 7);  // b: past the first 64 KiB block
  void* pa = s.Put(a.data(), a.size() * 4, stream_, "test");
  void* pb = s.Put(b.data(), b.size() * 4, stream_, "test");
  EXPECT_NE(pa, pb);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pb) % 256, 0u);
  EXPECT_EQ(std::memcmp(pa, a.data(), a.size() * 4), 0) << "a later Put (a new block) changed an earlier copy";
  EXPECT_EQ(std::memcmp(pb, b.data(), b.size() * 4), 0);
  s.Reset();
  EXPECT_EQ(s.Put(c.data(), c.size() * 4, stream_, "test"), pa) << "Reset reuses the first block";
}

// Captures a staged upload of `host` into dev.
cudaGraph_t CaptureUpload(cudaStream_t stream, PinnedStaging& s, const std::vector<std::int32_t>& host, void* dev) {
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const void* from = s.Put(host.data(), host.size() * 4, stream, "test");
  EXPECT_EQ(cudaMemcpyAsync(dev, from, host.size() * 4, cudaMemcpyHostToDevice, stream), cudaSuccess);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
  return g;
}

TEST_F(CudaGraphStaging, CapturedUploadReadsTheStagedCopyAtLaunch) {
  PinnedStaging s;
  const auto first = Iota(300, 5), second = Iota(300, 9000);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, first.size() * 4), cudaSuccess);
  s.Put(first.data(), 64, stream_, "test");  // the first block exists before the captures
  s.Reset();
  std::vector<std::int32_t> back(first.size());
  cudaGraph_t g = CaptureUpload(stream_, s, first, dev);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), dev, back.size() * 4, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(back, first);
  cudaGraphDestroy(g);
  // The next step: another staged copy (Reset not called: another address), the exec updated.
  g = CaptureUpload(stream_, s, second, dev);
  cudaGraphExecUpdateResultInfo info{};
  EXPECT_EQ(cudaGraphExecUpdate(exec, g, &info), cudaSuccess) << "result " << static_cast<int>(info.result);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), dev, back.size() * 4, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(back, second) << "the updated memcpy node still read the first step's copy";
  cudaGraphDestroy(g);
  cudaGraphExecDestroy(exec);
  cudaFree(dev);
}

TEST_F(CudaGraphStaging, NothingGrowsWhileCapturing) {
  GqaCudaWorkspace ws;
  void* q = ws.Device(GqaCudaWorkspace::kQuery, 4096, stream_, "test");
  ASSERT_NE(q, nullptr);
  PinnedStaging s;
  const auto big = Iota(20000, 0);  // 80 KB: more than the first 64 KiB block
  s.Put(big.data(), 16, stream_, "test");
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(ws.Device(GqaCudaWorkspace::kQuery, 1024, stream_, "test"), q) << "no growth: the same memory";
  const std::string grow = ErrorOf([&] { ws.Device(GqaCudaWorkspace::kQuery, 8192, stream_, "query scratch"); });
  const std::string stage = ErrorOf([&] { s.Put(big.data(), big.size() * 4, stream_, "row arrays staging"); });
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(stream_, &g);
  if (g != nullptr) cudaGraphDestroy(g);
  cudaGetLastError();
  EXPECT_NE(grow.find("query scratch: would allocate while the stream is being captured"), std::string::npos) << grow;
  EXPECT_NE(stage.find("row arrays staging: would allocate"), std::string::npos) << stage;
  // Outside the capture both grow.
  EXPECT_NE(ws.Device(GqaCudaWorkspace::kQuery, 8192, stream_, "test"), nullptr);
  EXPECT_NE(s.Put(big.data(), big.size() * 4, stream_, "test"), nullptr);
}

}  // namespace
}  // namespace kvshare::testing
#endif  // KVSHARE_HAVE_CUDA
