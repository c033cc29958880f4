// Scheduler (kvshare/runtime/scheduler.h) read from other threads while its own
// thread admits, cancels and finishes requests, as the server's /metrics and
// drain do: every Stats() is one snapshot (accepted = finished + queued +
// active; Idle() reads the same two counts), and a client that has its last
// event finds it counted. It failed before those counts moved under the
// scheduler's lock (a reader saw a request between queue and slot, or freed
// but not yet finished).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvshare/runtime/scheduler.h"
#include "runtime_scheduler_util.h"

namespace kvshare {
namespace {

using testing::Prompt;
using testing::TinySetup;

constexpr int kSlots = 2;
constexpr int kClients = 4;
constexpr int kRequestsPerClient = 30;

// The first broken rule a reader saw (empty: none), kept across threads.
class Violations {
 public:
  void Note(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_.empty()) first_ = what;
  }
  std::string first() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_;
  }

 private:
  std::mutex mu_;
  std::string first_;
};

std::string Describe(const SchedulerStats& st) {
  return "accepted " + std::to_string(st.requests_accepted) + ", finished " + std::to_string(st.requests_finished) +
         ", queued " + std::to_string(st.queue_depth) + ", active " + std::to_string(st.active_slots);
}

TEST(SchedulerThreads, StatsIsOneSnapshotWhileRequestsComeAndGo) {
  TinySetup t;
  Scheduler s(*t.model, t.tok, nullptr, {.slots = kSlots, .max_context = 64, .step_tokens = 8, .max_queue = 64});
  s.Start();
  Violations bad;
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> seen_finished{0};  // last events the clients have received
  std::atomic<int> snapshots{0};

  // The metrics reader: every snapshot balances, whatever the stepping
  // thread is doing (seating a request, freeing a slot, cancelling).
  std::thread reader([&] {
    while (!done.load()) {
      const SchedulerStats st = s.Stats();
      const std::uint64_t in_flight = st.requests_accepted - st.requests_finished;
      if (st.requests_finished > st.requests_accepted ||
          in_flight != static_cast<std::uint64_t>(st.queue_depth + st.active_slots) || st.active_slots > kSlots ||
          st.queue_depth < 0 || st.active_slots < 0) {
        bad.Note("Stats() out of balance: " + Describe(st));
      }
      snapshots.fetch_add(1);
    }
  });

  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < kRequestsPerClient; ++i) {
        const unsigned seed = static_cast<unsigned>(c * 1000 + i);
        SubmitResult res = s.Submit({.prompt = Prompt(3 + i % 5, t.V, seed), .max_tokens = 1 + i % 3});
        if (res.status != SubmitStatus::kAccepted) {
          bad.Note("request refused with a queue of 64");
          return;
        }
        if (i % 4 == 3) res.handle->Cancel();  // some leave from the queue or a slot
        std::vector<RequestEvent> ev;
        for (int n = 0; n < 2000 && (ev.empty() || !ev.back().finished); ++n) {
          res.handle->Wait(ev, std::chrono::milliseconds(10));
        }
        if (ev.empty() || !ev.back().finished) {
          bad.Note("request " + std::to_string(res.handle->id()) + " did not finish within 20 s");
          return;
        }
        // Counted before its last event was pushed: this one and every one
        // another client had received before.
        const std::uint64_t seen = seen_finished.fetch_add(1) + 1;
        const SchedulerStats st = s.Stats();
        if (st.requests_finished < seen) {
          bad.Note("a client has its last event but Stats() has not counted it: " + Describe(st) + ", " +
                   std::to_string(seen) + " received");
        }
      }
    });
  }
  for (std::thread& c : clients) c.join();
  done.store(true);
  reader.join();
  EXPECT_EQ(bad.first(), "");
  EXPECT_GT(snapshots.load(), 0);
  EXPECT_TRUE(s.WaitIdle(std::chrono::seconds(5)));
  const SchedulerStats st = s.Stats();
  EXPECT_EQ(st.requests_accepted, static_cast<std::uint64_t>(kClients * kRequestsPerClient));
  EXPECT_EQ(st.requests_finished, st.requests_accepted);
  EXPECT_EQ(st.active_slots, 0);
  EXPECT_EQ(st.queue_depth, 0);
  s.Stop();
}

}  // namespace
}  // namespace kvshare
