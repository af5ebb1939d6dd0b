// StopLatch: set once by a stop signal (StopSignals' thread) or by a server that stopped by
// itself; the main thread of `kvtier frontend` and `kvtier router` waits for it. Thread-safe.
#pragma once

#include <condition_variable>
#include <mutex>

namespace kvtier {

class StopLatch {
 public:
  void set() {
    std::lock_guard lock(mutex_);
    set_ = true;
    changed_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return set_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool set_ = false;
};

}  // namespace kvtier
