// ProgressWatchdog: rule H8 (progress) for one engine core. The core hands it a snapshot of its
// scheduler at every heartbeat; it answers with the reason once the core has stopped making
// progress, and the core then fails (docs/engine.md "Health").
//
// Progress of a request is its high-water mark: the most tokens whose KV it ever had computed
// (prefill chunks and decode steps raise it; recomputing after a preemption does not). The
// core progresses when any request's mark rises, a request first seen has computed tokens
// (snapshots come at the heartbeat's pace, so a request may arrive and compute in between), or
// a request ends.
//
// Reported (each once the time passes `timeout`):
// - a request that is running (admitted, not loading, and reached by its step's token budget)
//   and whose mark does not rise; only time spent running counts, across preemptions, so a
//   request thrashing between waiting and running is caught and one queued behind others (or
//   passed over while older requests take the budget) is not;
// - a core with requests (waiting or running) that completes nothing, unless transfers are in
//   flight: those end within F8's job timeout and then the requests move on.
// Not thread-safe; time comes in as arguments so tests drive it without sleeping.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/core/clock.h"

namespace kvtier {

struct RequestProgress {
  std::string id;
  uint64_t mark = 0;     // high-water mark of computed tokens
  bool running = false;  // admitted and computing (not waiting, not loading, not passed over
                         // by the latest step's token budget)
};

struct ProgressSnapshot {
  std::vector<RequestProgress> requests;  // every request the scheduler holds
  uint64_t finished = 0;                  // requests ended so far (any way)
  bool transfers_in_flight = false;
};

class ProgressWatchdog {
 public:
  explicit ProgressWatchdog(Duration timeout) : timeout_(timeout) {}

  // The H8 violation at `now`, if any ("request r3 computed nothing for 2.0 s while running").
  std::optional<std::string> observe(TimePoint now, const ProgressSnapshot& snapshot);

 private:
  struct Tracked {
    uint64_t mark = 0;
    Duration stalled{0};  // running time since the mark last rose
  };

  Duration timeout_;
  std::optional<TimePoint> last_;
  std::unordered_map<std::string, Tracked> requests_;
  uint64_t finished_ = 0;
  Duration engine_stalled_{0};
};

}  // namespace kvtier
