// Sentence embeddings on the GPU (CudaDecoder::Embed, cuda_decoder.h): the
// CPU model's Embed (model/embed.cc) with its step through the layers on the
// device. The host side is the CPU's own (EmbedInputs: checks, grouping, the
// output norm, pooling, dense head and L2 norms, in the CPU's arithmetic on
// the downloaded final rows), so only the layers differ from a CPU run, by
// the device's rounding (docs/gpu.md).
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <vector>

#include "cuda_model/cuda_decoder.h"

namespace kvshare::detail {

std::vector<float> CudaDecoder::Embed(std::span<const std::vector<std::int32_t>> inputs, const EmbedOptions& o,
                                      ThreadPool* pool) const {
  const std::int64_t E = config().n_embd;
  // No step of another thread meanwhile, until the state's memory is freed.
  const std::lock_guard<std::mutex> lock(device_mu_);
  // The current group's state and final rows, alive while EmbedInputs reads
  // them; declared before the try, so that a failure waits for the queued
  // work before the state's memory goes.
  std::unique_ptr<ModelState> state;
  std::vector<float> rows;
  const StreamScope on(stream_);
  try {
    return EmbedInputs(config(), cpu().output_norm(), cpu().dense(), inputs, o, pool,
                       [&](const Step& step, const ModelStateOptions& so) -> const float* {
                         state.reset();  // the previous group's device memory first
                         state = NewState(so);
                         auto& st = static_cast<CudaDecoderState&>(*state);
                         // Eager, never captured: every row keeps all its tokens, so the
                         // step runs whole, with no prefill cut (CutAfterAttention -1).
                         const float* dev = RunStep(st, step);
                         const auto T = static_cast<std::int64_t>(step.tokens.size());
                         rows.resize(static_cast<std::size_t>(T * E));
                         Download(rows.data(), dev, rows.size() * 4, "Embed (device cuda): final rows download");
                         return rows.data();
                       });
  } catch (...) {
    cudaStreamSynchronize(stream_);  // nothing queued may still use the state's buffers
    cudaGetLastError();
    throw;
  }
}

}  // namespace kvshare::detail
