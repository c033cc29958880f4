// kvshare/thread_pool.h — a small fixed-size pool of worker threads.
//
// One pool per session. Kernels split work into items whose results do not
// depend on which thread runs them, so outputs are bitwise identical for any
// thread count.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvshare {

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread: a pool of 1 spawns no thread.
  // Throws kvshare::Error if num_threads < 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int NumThreads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(i) for every i in [0, n), spread over the threads (the caller
  // included), and returns when all calls are done. Not reentrant: fn must not
  // call ParallelFor on the same pool. Exceptions thrown by fn are rethrown
  // (the first one) after all items finish.
  void ParallelFor(std::int64_t n, const std::function<void(std::int64_t)>& fn);

 private:
  void WorkerLoop();
  void RunItems();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
  const std::function<void(std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::int64_t next_ = 0;
  int active_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

// Runs fn(i) for i in [0, n) on pool, or inline when pool is null.
void ParallelFor(ThreadPool* pool, std::int64_t n, const std::function<void(std::int64_t)>& fn);

}  // namespace kvshare
