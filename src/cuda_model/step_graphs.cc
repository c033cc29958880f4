// Decode steps as CUDA graphs (step_graphs.h).
#include "cuda_model/step_graphs.h"

#include <exception>
#include <string>

#include "cuda/cuda_check.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {
namespace {

// Executable graphs kept per state: one per row count in use.
constexpr std::size_t kMaxGraphs = 16;

std::string Describe(cudaError_t e, const char* call) {
  return std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
}

// After a failed capture: the stream out of capture mode (cudaStreamEndCapture
// ends an invalidated capture too; this makes sure) and no error left for the
// eager rerun to trip over. Throws kvshare::Error when the stream is still
// being captured (nothing could run on it).
void LeaveCapture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
  cudaGetLastError();
  CudaCheck(cudaStreamIsCapturing(stream, &status), "Forward (device cuda): capture status after a failed capture");
  if (status != cudaStreamCaptureStatusNone) {
    throw Error(
        "Forward (device cuda): the model's stream is still being captured after a failed CUDA graph capture; "
        "set KVSHARE_CUDA_GRAPHS=0 to run decode steps eagerly");
  }
}

}  // namespace

StepGraphs::StepGraphs() : execs_([](void* h) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(h)); }, kMaxGraphs) {}

bool StepGraphs::Run(cudaStream_t stream, std::int64_t key, const std::function<void()>& work, bool fail,
                     std::string* why, CudaGraphStats& stats) {
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *why = Describe(e, "cudaStreamBeginCapture");
    return false;
  }
  std::string failed;
  try {
    work();
    if (fail) failed = "a capture failure forced by the test hook";
  } catch (const std::exception& ex) {
    failed = ex.what();
  } catch (...) {
    failed = "an unknown exception";
  }
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(stream, &graph);
  if (failed.empty() && e != cudaSuccess) failed = Describe(e, "cudaStreamEndCapture");
  if (failed.empty() && graph == nullptr) failed = "cudaStreamEndCapture returned no graph";
  if (!failed.empty()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    LeaveCapture(stream);
    *why = failed;
    return false;
  }
  ++stats.captured;
  cudaGraphExec_t exec = static_cast<cudaGraphExec_t>(execs_.Find(key));
  if (exec != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(exec, graph, &info) == cudaSuccess) {
      ++stats.updated;
    } else {  // another topology (e.g. another key-split count): instantiate anew
      cudaGetLastError();
      execs_.Drop(key);
      exec = nullptr;
    }
  }
  if (exec == nullptr) {
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
      cudaGraphDestroy(graph);
      cudaGetLastError();
      *why = Describe(e, "cudaGraphInstantiate");
      return false;
    }
    execs_.Put(key, exec);
    ++stats.instantiated;
  }
  cudaGraphDestroy(graph);
  CudaCheck(cudaGraphLaunch(exec, stream), "Forward (device cuda): CUDA graph launch");
  ++stats.graph_steps;
  return true;
}

}  // namespace kvshare::detail
