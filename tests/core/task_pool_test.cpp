// TaskPool's deadline rule is what keeps a timed-out disk call from touching the caller's buffers
// after it returned.
#include "kvtier/core/task_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

using namespace std::chrono_literals;

TimePoint in(Duration d) {
  return SteadyClock::instance().now() + d;
}

TEST(TaskPool, RunsEveryTaskOnce) {
  TaskPool pool(3);
  for (size_t n : {1, 2, 7, 64}) {
    std::vector<std::atomic<int>> runs(n);
    const std::vector<bool> ran = pool.run(
        n, [&](size_t i) { ++runs[i]; }, in(10s));
    EXPECT_EQ(ran, std::vector<bool>(n, true));
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i], 1) << i;
  }
}

TEST(TaskPool, PastTheDeadlineNoTaskStartsAndRunningOnesAreWaitedFor) {
  TaskPool pool(1);  // the caller and one thread: two tasks at a time
  std::mutex m;
  std::condition_variable cv;
  int running = 0;
  bool release = false;
  std::atomic<int> finished{0};
  const TimePoint deadline = in(50ms);
  std::thread releaser([&] {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return running == 2; });
    // Let the deadline pass while both tasks are still inside their IO.
    while (SteadyClock::instance().now() < deadline) {
      cv.wait_for(lock, 1ms);
    }
    release = true;
    cv.notify_all();
  });
  const std::vector<bool> ran = pool.run(
      6,
      [&](size_t) {
        std::unique_lock lock(m);
        ++running;
        cv.notify_all();
        cv.wait(lock, [&] { return release; });
        ++finished;
      },
      deadline);
  releaser.join();
  EXPECT_EQ(finished, 2);  // both started tasks ended before run() returned
  EXPECT_EQ(std::count(ran.begin(), ran.end(), true), 2);
  EXPECT_EQ(running, 2);  // the other four never started
}

// F5 (the host device's copy ops split over the pool): run() returns only once every task has
// ended, not once every task has been claimed. Every task starts before any ends; the caller's
// ends at once, the helpers' a while later, so a run() that returned when the last task was
// claimed would find them unfinished.
TEST(TaskPool, F5_RunReturnsOnlyOnceEveryClaimedTaskHasEnded) {
  constexpr size_t kTasks = 3;
  TaskPool pool(kTasks - 1);  // with the caller, one task per thread
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex m;
  std::condition_variable cv;
  size_t started = 0;
  std::vector<std::atomic<bool>> ended(kTasks);
  const std::vector<bool> ran = pool.run(
      kTasks,
      [&](size_t i) {
        std::unique_lock lock(m);
        ++started;
        cv.notify_all();
        cv.wait(lock, [&] { return started == kTasks; });  // every task claimed
        if (std::this_thread::get_id() != caller) {
          lock.unlock();
          std::this_thread::sleep_for(100ms);  // still inside its part when the caller's ends
        }
        ended[i] = true;
      },
      in(10s));
  EXPECT_EQ(ran, std::vector<bool>(kTasks, true));
  for (size_t i = 0; i < kTasks; ++i) EXPECT_TRUE(ended[i]) << "task " << i;
}

// kAnywhere (blocking IO): every thread and the caller run tasks at once.
TEST(TaskPool, AnywhereRunsATaskOnEveryThreadAtOnce) {
  TaskPool pool(3);
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  std::atomic<int> met{0};
  pool.run(
      4,
      [&](size_t) {
        std::unique_lock lock(m);
        ++arrived;
        cv.notify_all();
        if (cv.wait_for(lock, 10s, [&] { return arrived == 4; })) ++met;
      },
      in(30s));
  EXPECT_EQ(met, 4) << "the four tasks did not all run at once";
}

// kOtherCpus (checksums): helpers are pinned one per CPU, and a batch wakes only those on CPUs
// other than its caller's, so that its tasks run beside the caller instead of taking turns with
// it on its CPU.
TEST(TaskPool, OtherCpusHelpersRunOnlyOnCpusOtherThanTheCallers) {
  const std::vector<int> cpus = TaskPool::usable_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  TaskPool pool(cpus.size(), TaskPlacement::kOtherCpus);  // a helper on the caller's CPU too
  std::mutex m;
  std::vector<int> helper_cpus;  // where tasks that the caller did not run ran
  std::thread caller([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[0], &set);
    ASSERT_EQ(::pthread_setaffinity_np(::pthread_self(), sizeof set, &set), 0);
    const std::thread::id me = std::this_thread::get_id();
    for (int round = 0; round < 10; ++round) {
      pool.run(
          8,
          [&](size_t) {
            // Off the CPU for a while, so that every helper woken gets to claim tasks.
            std::this_thread::sleep_for(1ms);
            if (std::this_thread::get_id() == me) return;
            std::lock_guard lock(m);
            helper_cpus.push_back(::sched_getcpu());
          },
          in(30s));
    }
  });
  caller.join();
  ASSERT_FALSE(helper_cpus.empty()) << "no helper ran a task";
  for (int cpu : helper_cpus) EXPECT_NE(cpu, cpus[0]) << "a helper ran on the caller's CPU";
}

}  // namespace
}  // namespace kvtier
