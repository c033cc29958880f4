// The host-side decisions of the GPU model's CUDA graphs (docs/gpu.md "CUDA
// graphs of decode steps"), kept free of CUDA so that they are tested on the
// CPU: whether a step is captured, the key its graph is kept under, and the
// cache of instantiated graphs by key. Header-only; internal to
// src/cuda_model.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <utility>

#include "model/decoder.h"

namespace kvshare::detail {

// What besides the step decides whether it is captured.
struct DecodeGraphPolicy {
  bool enabled = true;            // CudaModelOptions::cuda_graphs and KVSHARE_CUDA_GRAPHS
  bool family_capturable = true;  // the family's CapturableDecode(): no mid-step host round trip
  bool probing = false;           // DecoderState::layer_probe is set (a download after each layer)
};

// True when KVSHARE_CUDA_GRAPHS is unset or anything but "0".
inline bool CudaGraphsFromEnv() {
  const char* e = std::getenv("KVSHARE_CUDA_GRAPHS");
  return e == nullptr || !(e[0] == '0' && e[1] == '\0');
}

// A decode step (every row has one token, taken from the token table) runs
// as a graph when the policy allows it; prompt chunks and embedding rows run
// eagerly.
inline bool CaptureDecodeStep(const Step& step, const DecodeGraphPolicy& p) {
  if (!p.enabled || !p.family_capturable || p.probing || step.rows.empty() || !step.embeddings.empty()) return false;
  for (const StepRow& r : step.rows) {
    if (r.n != 1) return false;
  }
  return true;
}

// The key a step's graph is kept under: its row count (the kernels' grids
// follow it; which rows, their lengths and tokens are kernel arguments and
// copies that cudaGraphExecUpdate changes).
inline std::int64_t DecodeGraphKey(const Step& step) { return static_cast<std::int64_t>(step.rows.size()); }

// Instantiated graphs (opaque handles) by key, at most `capacity`, the least
// recently used dropped first; `destroy` frees a handle dropped, replaced or
// left at destruction.
class GraphCache {
 public:
  GraphCache(std::function<void(void*)> destroy, std::size_t capacity)
      : destroy_(std::move(destroy)), capacity_(capacity) {}
  ~GraphCache() { Clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // The handle kept under key (now the most recently used), or null.
  void* Find(std::int64_t key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    it->second.used = ++clock_;
    return it->second.handle;
  }
  // Keeps handle under key, destroying the one it replaces (unless the same)
  // and, beyond capacity, the least recently used other entry.
  void Put(std::int64_t key, void* handle) {
    Entry& e = entries_[key];
    if (e.handle != nullptr && e.handle != handle) destroy_(e.handle);
    e = Entry{handle, ++clock_};
    while (entries_.size() > capacity_) {
      auto oldest = entries_.end();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->first != key && (oldest == entries_.end() || it->second.used < oldest->second.used)) oldest = it;
      }
      if (oldest == entries_.end()) break;
      destroy_(oldest->second.handle);
      entries_.erase(oldest);
    }
  }
  // Destroys and forgets the handle under key, if any.
  void Drop(std::int64_t key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    if (it->second.handle != nullptr) destroy_(it->second.handle);
    entries_.erase(it);
  }
  void Clear() {
    for (auto& [key, e] : entries_) {
      if (e.handle != nullptr) destroy_(e.handle);
    }
    entries_.clear();
  }
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    void* handle = nullptr;
    std::uint64_t used = 0;
  };
  std::function<void(void*)> destroy_;
  std::size_t capacity_;
  std::map<std::int64_t, Entry> entries_;
  std::uint64_t clock_ = 0;
};

}  // namespace kvshare::detail
