// kvshare/common/thread_pool.h — a small fixed-size pool of worker threads.
//
// One pool per session. Kernels split work into items whose results do not
// depend on which thread runs them, so outputs are bitwise identical for any
// thread count.
//
// Between jobs, workers spin for a short while (ThreadPoolOptions::spin_us)
// before they sleep: waking a sleeping thread costs about as much as one
// decode step's matmul (docs/benchmarks.md, "Defaults chosen from
// measurements").
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvshare {

struct ThreadPoolOptions {
  // How long an idle worker polls for the next job before it blocks, in
  // microseconds (0: block at once). Spinning burns the core meanwhile.
  int spin_us = 200;
};

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread: a pool of 1 spawns no thread.
  // Throws kvshare::Error if num_threads < 1 or options.spin_us < 0.
  explicit ThreadPool(int num_threads, ThreadPoolOptions options = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int NumThreads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(i) for every i in [0, n), spread over the threads (the caller
  // included), and returns when all calls are done. Not reentrant: fn must not
  // call ParallelFor on the same pool, and one thread at a time may call it.
  // Exceptions thrown by fn are rethrown (the first one) after all items
  // finish.
  void ParallelFor(std::int64_t n, const std::function<void(std::int64_t)>& fn);

 private:
  // Runs every job published after job `seen` until the pool stops.
  void WorkerLoop(std::uint32_t seen);
  // Claims and runs items of job `job` until none is left.
  void RunItems(std::uint32_t job);
  // Blocks (after spinning) until the job counter moves past `seen`; returns
  // false when the pool stops.
  bool WaitForJob(std::uint32_t seen);

  std::vector<std::thread> workers_;
  ThreadPoolOptions options_;
  // (job number << 32) | next item index: a worker claims an item with a
  // compare-and-swap that fails once the caller has moved on to a new job.
  std::atomic<std::uint64_t> next_{0};
  std::atomic<std::int64_t> n_{0};
  std::atomic<const std::function<void(std::int64_t)>*> fn_{nullptr};
  std::atomic<std::int64_t> remaining_{0};  // items of the current job not yet finished
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // guards sleeping, waking and error_
  std::condition_variable cv_work_;
  std::exception_ptr error_;
};

// Runs fn(i) for i in [0, n) on pool, or inline when pool is null.
void ParallelFor(ThreadPool* pool, std::int64_t n, const std::function<void(std::int64_t)>& fn);

// Runs fn(begin, end) over [0, n) in ranges of `grain` items (the last one
// shorter) on pool; as the one range fn(0, n), inline, when pool is null or
// n < 2 grain (a hand-off would cost more than it saves). grain >= 1.
void ParallelForRanges(ThreadPool* pool, std::int64_t n, std::int64_t grain,
                       const std::function<void(std::int64_t, std::int64_t)>& fn);

// A range of elementwise fp32 work (norms, activations, quantization) worth a
// task of its own: about this many values.
inline constexpr std::int64_t kParallelGrainValues = 8192;

// Rows per range for ParallelForRanges over `rows` rows of `values_per_row`
// values: about kParallelGrainValues values, but no more than an equal share
// per thread of the pool (null: 1 thread), so that a batched decode step's
// few rows (8 x 640 values) still spread over the threads; at least 1024
// values, below which a hand-off costs more than it saves.
std::int64_t RowGrain(const ThreadPool* pool, std::int64_t rows, std::int64_t values_per_row);

}  // namespace kvshare
