#include "kvshare/common/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "kvshare/common/error.h"

namespace kvshare {
namespace {

constexpr std::uint64_t kIndexMask = 0xffffffffu;

// Job numbers: even = published and ready, odd = the caller is writing the
// next job's fn / n. Workers run only even jobs.
std::uint32_t JobOf(std::uint64_t v) { return static_cast<std::uint32_t>(v >> 32); }
bool Ready(std::uint32_t job) { return (job & 1u) == 0; }

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, ThreadPoolOptions options) : options_(options) {
  if (num_threads < 1) {
    throw Error("ThreadPool: num_threads must be >= 1, got " + std::to_string(num_threads));
  }
  if (options.spin_us < 0) {
    throw Error("ThreadPool: spin_us must be >= 0 (0 blocks at once), got " + std::to_string(options.spin_us));
  }
  workers_.reserve(static_cast<std::size_t>(num_threads - 1));
  // The job number as of construction, read here and not by the worker when it
  // starts: a worker that starts after the first ParallelFor was published
  // must still see that job as new.
  const std::uint32_t start = JobOf(next_.load());
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, start] { WorkerLoop(start); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunItems(std::uint32_t job) {
  // fn and n are read after `job` was seen ready. Were they already the next
  // job's, the caller would have moved next_ to an odd job first, so every
  // swap below fails: they are used only while `job` is current.
  const std::function<void(std::int64_t)>* fn = fn_.load(std::memory_order_acquire);
  const std::int64_t n = n_.load(std::memory_order_acquire);
  std::uint64_t v = next_.load(std::memory_order_acquire);
  for (;;) {
    // A failed swap reloads v; a new job or an exhausted one ends the loop.
    if (JobOf(v) != job || static_cast<std::int64_t>(v & kIndexMask) >= n) return;
    if (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) continue;
    try {
      (*fn)(static_cast<std::int64_t>(v & kIndexMask));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    remaining_.fetch_sub(1, std::memory_order_acq_rel);
    v = next_.load(std::memory_order_acquire);
  }
}

bool ThreadPool::WaitForJob(std::uint32_t seen) {
  const auto moved = [&] {
    const std::uint32_t job = JobOf(next_.load());
    return stop_.load() || (job != seen && Ready(job));
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(options_.spin_us);
  for (int i = 0; options_.spin_us > 0 && !moved(); ++i) {
    CpuRelax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) break;
  }
  if (!moved()) {
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_.fetch_add(1);
    cv_work_.wait(lock, moved);
    sleepers_.fetch_sub(1);
  }
  return !stop_.load();
}

void ThreadPool::WorkerLoop(std::uint32_t seen) {
  while (WaitForJob(seen)) {
    seen = JobOf(next_.load(std::memory_order_acquire));
    if (Ready(seen)) RunItems(seen);
  }
}

void ThreadPool::ParallelFor(std::int64_t n, const std::function<void(std::int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  if (n > static_cast<std::int64_t>(kIndexMask)) {
    throw Error("ThreadPool::ParallelFor: at most 2^32 - 1 items per call, got " + std::to_string(n));
  }
  // Publish the job: an odd job number first (stale claims now fail), then its
  // data, then the next even number.
  const std::uint32_t job = JobOf(next_.load()) + 2;
  next_.store(static_cast<std::uint64_t>(job - 1) << 32);
  fn_.store(&fn, std::memory_order_release);
  n_.store(n, std::memory_order_release);
  remaining_.store(n, std::memory_order_release);
  next_.store(static_cast<std::uint64_t>(job) << 32);
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_work_.notify_all();
  }
  RunItems(job);
  // Items claimed by workers are still running: wait for them.
  for (int i = 0; remaining_.load(std::memory_order_acquire) > 0; ++i) {
    if (i < 4096) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void ParallelFor(ThreadPool* pool, std::int64_t n, const std::function<void(std::int64_t)>& fn) {
  if (pool != nullptr) {
    pool->ParallelFor(n, fn);
  } else {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
  }
}

std::int64_t RowGrain(const ThreadPool* pool, std::int64_t rows, std::int64_t values_per_row) {
  const std::int64_t v = std::max<std::int64_t>(values_per_row, 1);
  const std::int64_t threads = pool != nullptr ? pool->NumThreads() : 1;
  const std::int64_t share = (std::max<std::int64_t>(rows, 1) + threads - 1) / threads;
  const std::int64_t least = (1024 + v - 1) / v;  // >= 1
  return std::max(least, std::min(kParallelGrainValues / v, share));
}

void ParallelForRanges(ThreadPool* pool, std::int64_t n, std::int64_t grain,
                       const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (grain < 1) throw Error("ParallelForRanges: grain must be >= 1, got " + std::to_string(grain));
  if (n <= 0) return;
  if (pool == nullptr || n < 2 * grain) {
    fn(0, n);
    return;
  }
  ParallelFor(pool, (n + grain - 1) / grain, [&](std::int64_t c) { fn(c * grain, std::min(n, (c + 1) * grain)); });
}

}  // namespace kvshare
