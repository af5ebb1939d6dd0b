// Gate: a latch that work running on a stream can wait on (tests and the fault injector use it
// to hold copies "in flight" for as long as a test needs, without sleeping).
//
// While a stream thread waits on a closed gate, the device counts that stream as blocked, so
// HostDevice::quiesce() can return. Thread-safe.
#pragma once

#include <condition_variable>
#include <mutex>
#include <vector>

namespace kvtier {

// Set by a device on its stream threads; tells it when the thread blocks outside the device.
class BlockedHook {
 public:
  virtual void set_blocked(bool blocked) = 0;

 protected:
  ~BlockedHook() = default;
};

inline thread_local BlockedHook* current_blocked_hook = nullptr;

class Gate {
 public:
  // After open() returns, no waiter counts as blocked any more.
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    for (BlockedHook* hook : waiting_) hook->set_blocked(false);
    waiting_.clear();
    cv_.notify_all();
  }
  bool is_open() const {
    std::lock_guard lock(mu_);
    return open_;
  }
  void wait() {
    std::unique_lock lock(mu_);
    if (open_) return;
    if (BlockedHook* hook = current_blocked_hook) {
      hook->set_blocked(true);
      waiting_.push_back(hook);
    }
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  std::vector<BlockedHook*> waiting_;
};

}  // namespace kvtier
