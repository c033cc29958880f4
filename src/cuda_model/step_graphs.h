// A state's decode steps as CUDA graphs (docs/gpu.md "CUDA graphs of decode
// steps"): each step's device work is captured on the model's stream, the
// executable graph kept for its key is updated to it (cudaGraphExecUpdate:
// kernel arguments and copies change every step) or instantiated anew when
// the topology differs, and launched. Internal to src/cuda_model.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "cuda_model/step_graph.h"
#include "kvshare/cuda_model/model_cuda.h"

namespace kvshare::detail {

class StepGraphs {
 public:
  StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Captures work() on `stream` (cudaStreamCaptureModeThreadLocal: nothing it
  // calls on this thread may allocate or synchronize) and launches it as the
  // graph kept under key. Returns false, with the capture ended and
  // discarded and nothing launched, when work throws or a CUDA call of the
  // capture, update or instantiation fails (*why says which; work's
  // exception is not rethrown): the caller restores what work changed on the
  // host and runs the step eagerly. fail: a test hook, the capture fails as
  // a CUDA error would. Throws kvshare::Error only when the launch fails or
  // the stream is still capturing after a failed capture.
  bool Run(cudaStream_t stream, std::int64_t key, const std::function<void()>& work, bool fail, std::string* why,
           CudaGraphStats& stats);
  // False the first time a key is asked for (its step then runs eagerly, so
  // that the buffers a step of that shape needs grow outside a capture).
  bool Warm(std::int64_t key) { return !seen_.insert(key).second; }

 private:
  GraphCache execs_;
  std::set<std::int64_t> seen_;
};

}  // namespace kvshare::detail
