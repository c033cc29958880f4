// ThreadPool: every item runs exactly once, across many back-to-back jobs of
// varied sizes (the path where a late worker could claim a stale job), with
// and without spinning; workers really run items, the first job of a new
// pool included; exceptions come back to the caller; bad options throw.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare {
namespace {

void CheckEveryItemOnce(ThreadPool& pool, int jobs) {
  std::vector<std::atomic<int>> hits(1000);
  for (int j = 0; j < jobs; ++j) {
    const std::int64_t n = 1 + (j * 7919) % 257;  // 1 .. 257, varied
    for (std::int64_t i = 0; i < n; ++i) hits[static_cast<std::size_t>(i)].store(0);
    pool.ParallelFor(n, [&](std::int64_t i) {
      ASSERT_GE(i, 0);
      ASSERT_LT(i, n);
      hits[static_cast<std::size_t>(i)].fetch_add(1);
    });
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "job " << j << " item " << i << " of " << n;
    }
  }
}

TEST(ThreadPool, EveryItemRunsOnceOverManyJobs) {
  for (int threads : {1, 2, 3, 5}) {
    for (int spin_us : {0, 200}) {
      ThreadPool pool(threads, {.spin_us = spin_us});
      EXPECT_EQ(pool.NumThreads(), threads);
      CheckEveryItemOnce(pool, 3000);
    }
  }
}

// Runs a 2-item job whose first-started item waits (up to 2 s) for the other
// item to start: true when it did, i.e. a second thread ran an item while the
// first was still running. (A caller running both items alone starts the
// second only after the first returns.)
bool TwoItemsOverlap(ThreadPool& pool) {
  std::atomic<int> started{0};
  std::atomic<bool> overlap{false};
  pool.ParallelFor(2, [&](std::int64_t) {
    if (started.fetch_add(1) != 0) return;
    for (int i = 0; i < 2000 && started.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    overlap.store(started.load() == 2);
  });
  return overlap.load();
}

TEST(ThreadPool, WorkersShareTheItems) {
  for (int spin_us : {0, 200}) {
    ThreadPool pool(2, {.spin_us = spin_us});
    CheckEveryItemOnce(pool, 10);  // not the pool's first job
    EXPECT_TRUE(TwoItemsOverlap(pool)) << "spin_us " << spin_us;
  }
}

TEST(ThreadPool, FirstJobReachesWorkersThatStartLate) {
  // The first ParallelFor right after construction is usually published
  // before the new worker thread runs; the worker must still take part (it
  // once took the published job for an old one and slept through it, so a
  // pool made per call ran everything on the caller).
  for (int trial = 0; trial < 20; ++trial) {
    ThreadPool pool(2, {.spin_us = trial % 2 == 0 ? 0 : 200});
    ASSERT_TRUE(TwoItemsOverlap(pool)) << "trial " << trial;
  }
}

TEST(ThreadPool, FirstExceptionIsRethrownAfterAllItems) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.ParallelFor(64,
                                [&](std::int64_t i) {
                                  ran.fetch_add(1);
                                  if (i % 16 == 3) throw std::runtime_error("item " + std::to_string(i));
                                }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 64);
  // The pool stays usable.
  CheckEveryItemOnce(pool, 50);
}

TEST(ThreadPool, BadOptionsThrow) {
  EXPECT_THROW(ThreadPool(0), Error);
  try {
    ThreadPool pool(2, {.spin_us = -1});
    FAIL() << "spin_us = -1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spin_us must be >= 0"), std::string::npos) << e.what();
  }
}

TEST(ThreadPool, NullPoolRunsInline) {
  std::vector<std::int64_t> order;
  ParallelFor(nullptr, 5, [&](std::int64_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

// ParallelForRanges: ranges of `grain` items cover [0, n) once each on a pool;
// one inline range when there is no pool or fewer than two grains of work.
TEST(ThreadPool, RangesCoverEveryItemOnce) {
  ThreadPool pool(3);
  for (std::int64_t n : {0, 1, 7, 15, 16, 17, 100, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    std::atomic<int> calls{0};
    ParallelForRanges(&pool, n, 8, [&](std::int64_t i0, std::int64_t i1) {
      ++calls;
      EXPECT_LT(i0, i1);
      EXPECT_LE(i1 - i0, n < 16 ? n : 8);
      for (std::int64_t i = i0; i < i1; ++i) ++hits[static_cast<std::size_t>(i)];
    });
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<std::size_t>(i)], 1) << "n " << n << " item " << i;
    EXPECT_EQ(calls.load(), n == 0 ? 0 : n < 16 ? 1 : static_cast<int>((n + 7) / 8)) << "n " << n;
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> seen;
  ParallelForRanges(nullptr, 100, 8, [&](std::int64_t i0, std::int64_t i1) { seen.emplace_back(i0, i1); });
  EXPECT_EQ(seen, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 100}}));
  EXPECT_THROW(ParallelForRanges(&pool, 10, 0, [](std::int64_t, std::int64_t) {}), Error);
}

TEST(ThreadPool, RowGrainSpreadsFewRowsAndCapsManyRows) {
  ThreadPool two(2), four(4);
  EXPECT_EQ(RowGrain(&two, 8, 640), 4);      // a batched decode step's 8 rows: 2 ranges
  EXPECT_EQ(RowGrain(&four, 8, 640), 2);     // 4 ranges of 1280 values
  EXPECT_EQ(RowGrain(&four, 8, 256), 4);     // at least 1024 values per range
  EXPECT_EQ(RowGrain(nullptr, 8, 640), 8);   // one thread: one range
  EXPECT_EQ(RowGrain(&two, 1000, 640), 12);  // many rows: about kParallelGrainValues values
  EXPECT_EQ(RowGrain(&two, 1, 1 << 20), 1);
  EXPECT_EQ(RowGrain(&two, 0, 0), 1024);  // degenerate sizes still give a grain >= 1
}

}  // namespace
}  // namespace kvshare
