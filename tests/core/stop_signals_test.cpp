// StopSignals: SIGINT/SIGTERM reach the process's one waiting thread, and no other thread.
#include "kvtier/core/stop_signals.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>

namespace kvtier::testing {
namespace {

using std::chrono::seconds;

// Counts the actions run and who ran them.
struct Received {
  std::mutex mutex;
  std::condition_variable changed;
  int count = 0;
  std::thread::id last_thread;

  void add() {
    std::lock_guard lock(mutex);
    ++count;
    last_thread = std::this_thread::get_id();
    changed.notify_all();
  }
  bool wait_for(int n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, seconds(10), [&] { return count >= n; });
  }
};

bool blocked_here(int signo) {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return sigismember(&mask, signo) == 1;
}

TEST(StopSignals, EveryThreadStartedAfterItHasThemBlocked) {
  StopSignals signals;
  bool term = false;
  bool interrupt = false;
  std::thread later([&] {
    term = blocked_here(SIGTERM);
    interrupt = blocked_here(SIGINT);
  });
  later.join();
  EXPECT_TRUE(term);
  EXPECT_TRUE(interrupt);
  EXPECT_TRUE(blocked_here(SIGTERM));
}

TEST(StopSignals, SignalsToTheProcessRunTheActionInItsOwnThreadOncePerSignal) {
  Received received;
  {
    StopSignals signals;
    signals.deliver_to([&] { received.add(); });
    // A thread busy in blocking calls meanwhile is never interrupted.
    std::atomic<bool> done{false};
    std::atomic<int> interrupted{0};
    std::thread busy([&] {
      while (!done.load()) {
        if (usleep(1000) != 0 && errno == EINTR) interrupted.fetch_add(1);
      }
    });
    const std::thread::id busy_id = busy.get_id();
    ASSERT_EQ(kill(getpid(), SIGTERM), 0);
    ASSERT_TRUE(received.wait_for(1));
    ASSERT_EQ(kill(getpid(), SIGINT), 0);
    ASSERT_TRUE(received.wait_for(2));
    done = true;
    busy.join();
    EXPECT_EQ(interrupted.load(), 0);
    std::lock_guard lock(received.mutex);
    EXPECT_NE(received.last_thread, std::this_thread::get_id());
    EXPECT_NE(received.last_thread, busy_id);
  }
  // Ended and gone: the mask is back as it was.
  EXPECT_FALSE(blocked_here(SIGTERM));
  EXPECT_EQ(received.count, 2);
}

TEST(StopSignals, EndWithoutASignalReturnsAndRunsNoAction) {
  int count = 0;
  StopSignals signals;
  signals.deliver_to([&] { ++count; });
  signals.end();
  signals.end();  // a second end() is a no-op
  EXPECT_EQ(count, 0);
}

}  // namespace
}  // namespace kvtier::testing
