// HealthState: the UP/DOWN state of one thing that fails and recovers by itself, with probes on
// an exponential backoff (H7). The one home of that mechanic: HealthCheckedTier keeps one for
// its tier, the Redis tier one per master of a Redis Cluster.
//
// - UP: calls go through. mark_down(error) (a call failed) makes it DOWN; its first probe is
//   due probe_initial later.
// - DOWN: admit() refuses calls until the probe is due; then the first admit() runs the probe
//   (on its own thread, without the lock): success makes it UP and lets that call through,
//   failure doubles the backoff, up to probe_max. A mark_down() while DOWN records the error
//   and leaves the probe time alone (a call that raced the first failure). probe_now() runs
//   the probe whether or not it is due. A probe that raises is a failed probe.
//
// Thread-safety: any thread. One probe runs at a time; admit() refuses calls meanwhile.
#pragma once

#include <mutex>
#include <string>
#include <string_view>

#include "kvtier/core/clock.h"
#include "kvtier/core/status.h"

namespace kvtier {

// A tier as the health endpoint sees it. kDegraded: the tier serves, but some of its parts
// are down (a Redis Cluster's masters; their keys are skipped, kSkipped). A HealthState itself
// is only kUp or kDown.
enum class TierState { kUp, kDegraded, kDown };
std::string_view to_string(TierState state);

struct HealthOptions {
  Duration probe_initial = std::chrono::seconds(1);
  Duration probe_max = std::chrono::seconds(30);
  Duration probe_timeout = std::chrono::seconds(1);  // of each ping
  const Clock* clock = &SteadyClock::instance();     // must outlive the state
};

class HealthState {
 public:
  // Throws std::invalid_argument for a null clock, or probe_initial <= 0 or
  // probe_max < probe_initial.
  explicit HealthState(const HealthOptions& options);

  bool up() const;
  // Of the failure that made it DOWN (or of the last failed probe); empty while UP.
  std::string last_error() const;
  const HealthOptions& options() const { return options_; }

  // Whether a call may go through now. `probe` () -> Status runs when DOWN and due.
  template <class Probe>
  bool admit(Probe&& probe) {
    switch (begin_admit(false)) {
      case Admit::kUp:
        return true;
      case Admit::kRefused:
        return false;
      case Admit::kProbe:
        break;
    }
    return run_probe(probe);
  }
  // Runs `probe` now if DOWN and no probe is running; whether it is UP afterwards.
  template <class Probe>
  bool probe_now(Probe&& probe) {
    switch (begin_admit(true)) {
      case Admit::kUp:
        return true;
      case Admit::kRefused:
        return false;
      case Admit::kProbe:
        break;
    }
    return run_probe(probe);
  }
  // A call failed: DOWN (see above).
  void mark_down(const std::string& error);

 private:
  enum class Admit { kUp, kRefused, kProbe };
  Admit begin_admit(bool force);
  // A probe that raises fails (and the exception goes on): the next one still runs when due.
  template <class Probe>
  bool run_probe(Probe& probe) {
    Status result;
    try {
      result = probe();
    } catch (...) {
      end_probe(make_error(ErrorCode::kInternal, "the probe raised an exception"));
      throw;
    }
    return end_probe(result);
  }
  bool end_probe(const Status& result);

  const HealthOptions options_;
  mutable std::mutex mutex_;
  bool up_ = true;
  bool probing_ = false;
  Duration backoff_{0};
  TimePoint next_probe_{};
  std::string last_error_;
};

}  // namespace kvtier
