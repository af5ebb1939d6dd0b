// Time source for deadlines. Production code uses SteadyClock; tests use ManualClock so that
// "not before the deadline, and at the deadline" is checked without sleeping.
#pragma once

#include <atomic>
#include <chrono>

namespace kvtier {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

// Thread-safe: now() may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  static const SteadyClock& instance();
};

// Starts at an arbitrary fixed point and moves only when advance() is called.
class ManualClock final : public Clock {
 public:
  TimePoint now() const override { return TimePoint(Duration(nanos_.load())); }
  void advance(Duration d) { nanos_ += d.count(); }

 private:
  std::atomic<int64_t> nanos_{1'000'000'000};
};

inline Duration seconds_to_duration(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

}  // namespace kvtier
