// Scratch the CUDA attention op reuses across calls (GqaRunOptions::
// cuda_workspace): device memory per purpose, grown only when a call needs
// more, and pinned memory for the index arrays each call uploads. With it a
// call allocates, frees and synchronizes nothing once the slots have grown,
// so it can be captured into a CUDA graph (the GPU model's decode steps,
// docs/gpu.md). One workspace serves calls on one stream, in order. Internal
// header of the CUDA backend (KVSHARE_CUDA builds).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>

#include "cuda/cuda_check.h"
#include "cuda/pinned_staging.h"

namespace kvshare::detail {

class GqaCudaWorkspace {
 public:
  // What each slot holds during one call.
  enum Slot { kRows, kQuery, kPresentK, kPresentV, kSink, kSplits, kSoftmax, kSlotCount };

  GqaCudaWorkspace() = default;
  ~GqaCudaWorkspace();
  GqaCudaWorkspace(const GqaCudaWorkspace&) = delete;
  GqaCudaWorkspace& operator=(const GqaCudaWorkspace&) = delete;

  // Slot s's device memory, at least `bytes` (null for 0). Growing frees the
  // old memory (cudaFree waits for the device) and allocates anew; it throws
  // kvshare::Error naming `what` when that fails or `stream` is being
  // captured (RequireNotCapturing).
  void* Device(Slot s, std::size_t bytes, cudaStream_t stream, const char* what);
  // The index arrays' pinned copies (PinnedStaging::Put), valid until Reset.
  PinnedStaging& staging() { return staging_; }
  // Call when the stream's work of the calls so far is complete.
  void Reset() { staging_.Reset(); }

 private:
  struct Mem {
    void* data = nullptr;
    std::size_t size = 0;
  };
  std::array<Mem, kSlotCount> slots_{};
  PinnedStaging staging_;
};

// One call's scratch of `bytes`: workspace slot s when ws is set, else
// stream-ordered memory freed when this goes out of scope (DeviceScratch).
class CallScratch {
 public:
  CallScratch(GqaCudaWorkspace* ws, GqaCudaWorkspace::Slot s, std::size_t bytes, cudaStream_t stream, const char* what)
      : owned_(ws != nullptr ? 0 : bytes, stream, what),
        ptr_(ws != nullptr ? ws->Device(s, bytes, stream, what) : owned_.As<void>()) {}
  template <typename T>
  T* As() const {
    return static_cast<T*>(ptr_);
  }

 private:
  DeviceScratch owned_;
  void* ptr_;
};

}  // namespace kvshare::detail
