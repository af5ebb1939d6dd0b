// poll_until: waits for a condition that another process or thread makes true (a server
// restarting, a background probe), checking it every millisecond up to a bounded deadline.
// Returns whether it became true. For events a test can hook directly, use a gate instead.
#pragma once

#include <chrono>
#include <thread>

namespace kvtier::testing {

template <class Pred>
bool poll_until(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace kvtier::testing
