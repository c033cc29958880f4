// Capture legality of the GPU model's CUDA graphs (docs/gpu.md "CUDA graphs
// of decode steps", the table of calls), on a GPU (skipped without one):
//  - StepGraphs::Run: a capture whose work throws, or that touches the legacy
//    stream (invalid while a blocking stream captures), returns false with
//    the stream out of capture mode and usable at once; a good capture runs,
//    and the next one updates its executable graph in place;
//  - the attention op's argument check skips its pointer-kind queries in a
//    captured call with a workspace (and only there).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_test_util.h"

#if KVSHARE_HAVE_CUDA
#include <cuda_runtime.h>

#include "attention/gqa_device.h"
#include "cuda/cuda_check.h"
#include "cuda/gqa_workspace.h"
#include "cuda_model/step_graphs.h"

namespace kvshare::testing {
namespace {

constexpr std::size_t kBytes = 1024;

class CudaGraphCapture : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);  // blocking, as the GPU model's
    ASSERT_EQ(cudaMalloc(&dev_, kBytes), cudaSuccess);
  }
  void TearDown() override {
    if (dev_ != nullptr) cudaFree(dev_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  // "" when dev_'s bytes all equal v, else the first that does not.
  std::string Holds(unsigned char v) const {
    std::vector<unsigned char> back(kBytes);
    if (cudaMemcpyAsync(back.data(), dev_, kBytes, cudaMemcpyDeviceToHost, stream_) != cudaSuccess ||
        cudaStreamSynchronize(stream_) != cudaSuccess) {
      return std::string("the copy back failed: ") + cudaGetErrorString(cudaGetLastError());
    }
    for (std::size_t i = 0; i < kBytes; ++i) {
      if (back[i] != v) return "byte " + std::to_string(i) + " is " + std::to_string(back[i]);
    }
    return "";
  }
  // The stream is out of capture mode, no error is pending, and eager work on
  // it runs.
  void ExpectUsable(const std::string& after) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    ASSERT_EQ(cudaStreamIsCapturing(stream_, &status), cudaSuccess) << after;
    EXPECT_EQ(status, cudaStreamCaptureStatusNone) << after << ": the stream is still capturing";
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << after << ": an error was left pending";
    ASSERT_EQ(cudaMemsetAsync(dev_, 0x5a, kBytes, stream_), cudaSuccess) << after;
    EXPECT_EQ(Holds(0x5a), "") << after << ": eager work on the stream";
  }
  cudaStream_t stream_ = nullptr;
  void* dev_ = nullptr;
};

TEST_F(CudaGraphCapture, ThrowingWorkLeavesTheStreamUsable) {
  detail::StepGraphs graphs;
  CudaGraphStats stats;
  std::string why;
  const bool ran = graphs.Run(
      stream_, 1,
      [&] {
        detail::CudaCheck(cudaMemsetAsync(dev_, 1, kBytes, stream_), "captured memset");
        throw Error("a buffer would grow");
      },
      false, &why, stats);
  EXPECT_FALSE(ran);
  EXPECT_EQ(why, "a buffer would grow");
  EXPECT_EQ(stats.captured + stats.graph_steps, 0);
  ExpectUsable("after a capture whose work threw");
}

TEST_F(CudaGraphCapture, LegacyStreamUseFailsTheCapture) {
  detail::StepGraphs graphs;
  CudaGraphStats stats;
  std::string why;
  cudaError_t legacy = cudaSuccess;
  const bool ran = graphs.Run(
      stream_, 1,
      [&] {
        detail::CudaCheck(cudaMemsetAsync(dev_, 1, kBytes, stream_), "captured memset");
        legacy = cudaMemsetAsync(dev_, 2, kBytes, nullptr);  // the legacy default stream
        detail::CudaCheck(legacy, "legacy stream memset");
      },
      false, &why, stats);
  EXPECT_FALSE(ran) << "a legacy-stream memset during the capture of a blocking stream returned "
                    << cudaGetErrorName(legacy) << "; docs/gpu.md's table says it is invalid";
  EXPECT_NE(why.find("legacy stream memset"), std::string::npos) << why;
  ExpectUsable("after a capture that touched the legacy stream");
  EXPECT_EQ(cudaMemset(dev_, 3, kBytes), cudaSuccess) << "the legacy stream after the capture";
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(Holds(3), "");
}

TEST_F(CudaGraphCapture, GoodCapturesRunAndUpdateInPlace) {
  detail::StepGraphs graphs;
  CudaGraphStats stats;
  for (unsigned char v : {7, 9}) {
    std::string why;
    const bool ran = graphs.Run(
        stream_, 1, [&] { detail::CudaCheck(cudaMemsetAsync(dev_, v, kBytes, stream_), "captured memset"); }, false,
        &why, stats);
    ASSERT_TRUE(ran) << why;
    EXPECT_EQ(Holds(v), "") << "the graph's memset of " << int{v};
  }
  EXPECT_EQ(stats.graph_steps, 2);
  EXPECT_EQ(stats.instantiated, 1);
  EXPECT_EQ(stats.updated, 1) << "the second capture (another memset value) should update the exec in place";
}

TEST_F(CudaGraphCapture, CapturedAttentionCallSkipsPointerKinds) {
  std::vector<float> host(64, 0.0f);  // host memory where the op wants device memory
  GqaInputs in;
  in.query = ConstTensorView{host.data(), DType::kFloat32, {1, 1, 64}};
  GqaOutputs out;
  out.output = TensorView{host.data(), DType::kFloat32, {1, 1, 64}};
  detail::GqaCudaWorkspace ws;
  GqaRunOptions o;
  o.device = Device::kCuda;
  o.cuda_stream = stream_;
  const std::string eager = ErrorOf([&] { detail::CheckCudaCall(in, out, o); });
  EXPECT_NE(eager.find("query must be in device memory"), std::string::npos) << eager;
  o.cuda_workspace = &ws;
  const std::string with_ws = ErrorOf([&] { detail::CheckCudaCall(in, out, o); });
  EXPECT_NE(with_ws.find("query must be in device memory"), std::string::npos)
      << "an eager call with a workspace is checked: " << with_ws;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const std::string captured = ErrorOf([&] { detail::CheckCudaCall(in, out, o); });
  cudaGraph_t g = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &g);
  if (g != nullptr) cudaGraphDestroy(g);
  EXPECT_EQ(captured, "") << "a captured call with a workspace queried the pointer kinds";
  EXPECT_EQ(end, cudaSuccess) << cudaGetErrorName(end) << ": the check invalidated the capture";
  ExpectUsable("after the captured check");
}

}  // namespace
}  // namespace kvshare::testing
#endif  // KVSHARE_HAVE_CUDA
