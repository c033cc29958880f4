// Memory roofs measured in the same run as the benchmarks that set their
// bytes against them (attention_bench.cc: KV cache reads; model_matmul_bench.cc:
// weight streams), and the large buffers both use.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>

#include "kvshare/common/thread_pool.h"

namespace kvshare::bench {

// Large buffers as an engine allocates its caches: 2 MiB aligned, with
// transparent huge pages requested (roofs and measured data get the same treatment).
template <typename T>
struct BigBuffer {
  T* ptr = nullptr;
  std::size_t n = 0;
  explicit BigBuffer(std::size_t count, T fill = T{}) : n(count) {
    constexpr std::size_t kAlign = std::size_t{2} << 20;
    const std::size_t bytes = (count * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    ptr = static_cast<T*>(std::aligned_alloc(kAlign, bytes));
    madvise(ptr, bytes, MADV_HUGEPAGE);
    std::fill(ptr, ptr + count, fill);
  }
  ~BigBuffer() { std::free(ptr); }
  BigBuffer(const BigBuffer&) = delete;
  BigBuffer& operator=(const BigBuffer&) = delete;
  T* data() { return ptr; }
  T& operator[](std::size_t i) { return ptr[i]; }
};

// STREAM-like triad a[i] = b[i] + s * c[i] over three 64 MiB float arrays on
// every thread of `pool` (4 items per thread), best of `reps` runs after a
// warm-up: bytes per second, counted as 3 streams x 4 bytes per element (the
// write-allocate read of a is not counted, as in STREAM).
double TriadBandwidth(ThreadPool* pool, int reps);

// A read-only stream (the access pattern of a matrix-vector product's
// weights): a 64-bit integer sum over one 192 MiB array, split as the triad,
// best of `reps` runs: bytes read per second.
double ReadBandwidth(ThreadPool* pool, int reps);

// Bytes that benchmarks of DRAM-bound calls cycle through so that their data
// comes from DRAM and not from a last-level cache that holds one copy (32 MiB
// here): KVSHARE_BENCH_FOOTPRINT_MIB (default 512; 0: one copy, cache-resident
// when it fits).
double DramFootprintBytes();

}  // namespace kvshare::bench
