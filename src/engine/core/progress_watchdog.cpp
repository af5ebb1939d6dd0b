#include "kvtier/engine/progress_watchdog.h"

#include <cstdio>
#include <unordered_set>

namespace kvtier {
namespace {

std::string seconds(Duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

std::optional<std::string> ProgressWatchdog::observe(TimePoint now,
                                                     const ProgressSnapshot& snapshot) {
  const Duration elapsed = last_ ? now - *last_ : Duration{0};
  last_ = now;
  bool progressed = snapshot.finished != finished_;
  finished_ = snapshot.finished;
  std::unordered_set<std::string_view> present;
  std::optional<std::string> stuck_request;
  size_t running = 0;
  for (const RequestProgress& r : snapshot.requests) {
    present.insert(r.id);
    auto [it, added] = requests_.try_emplace(r.id, Tracked{.mark = r.mark});
    Tracked& t = it->second;
    if (added && r.mark > 0) {
      progressed = true;  // arrived and computed tokens since the last snapshot
    } else if (!added && r.mark > t.mark) {
      progressed = true;
      t.mark = r.mark;
      t.stalled = Duration{0};
    } else if (!added && r.running) {
      t.stalled += elapsed;
    }
    running += r.running ? 1 : 0;
    if (!stuck_request && t.stalled > timeout_) {
      stuck_request =
          "request " + r.id + " computed nothing for " + seconds(t.stalled) + " s while running";
    }
  }
  std::erase_if(requests_, [&](const auto& entry) { return !present.contains(entry.first); });
  if (stuck_request) return stuck_request;

  if (progressed || snapshot.requests.empty() || snapshot.transfers_in_flight) {
    engine_stalled_ = Duration{0};
    return std::nullopt;
  }
  engine_stalled_ += elapsed;
  if (engine_stalled_ <= timeout_) return std::nullopt;
  return "engine core completed nothing for " + seconds(engine_stalled_) + " s with " +
         std::to_string(snapshot.requests.size() - running) + " waiting and " +
         std::to_string(running) + " running requests";
}

}  // namespace kvtier
