// TaskPool's deadline rule is what keeps a timed-out disk call from touching the caller's buffers
// after it returned.
#include "kvtier/core/task_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

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

}  // namespace
}  // namespace kvtier
