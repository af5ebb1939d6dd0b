#include "kvtier/engine/engine_health.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace kvtier {

EngineHealth::EngineHealth(uint32_t cores, Duration stall_timeout)
    : cores_(cores), stall_timeout_(stall_timeout) {}

void EngineHealth::hello(uint32_t core, TimePoint now) {
  CoreHealth& c = cores_.at(core);
  if (c.failure) return;
  c.ready = true;
  c.last_heartbeat = now;
}

void EngineHealth::heartbeat(uint32_t core, TimePoint now, std::vector<std::string> degraded) {
  CoreHealth& c = cores_.at(core);
  if (c.failure) return;
  c.last_heartbeat = now;
  c.degraded = std::move(degraded);
}

bool EngineHealth::fail(uint32_t core, CoreFailure kind, std::string reason) {
  CoreHealth& c = cores_.at(core);
  if (c.failure) return false;  // H2: recorded once, stays
  c.failure = kind;
  c.failure_reason = std::move(reason);
  failure_order_.push_back(core);
  return true;
}

std::vector<uint32_t> EngineHealth::check_stalls(TimePoint now) {
  std::vector<uint32_t> stalled;
  if (closed_) return stalled;  // cores stop heartbeating while they shut down
  for (uint32_t n = 0; n < cores_.size(); ++n) {
    const CoreHealth& c = cores_[n];
    const Duration silent = now - c.last_heartbeat;
    // A core that has not said hello is "starting" (503) and not yet watched: its own startup
    // timeout reports workers that never register.
    if (!c.ready || c.failure || silent <= stall_timeout_) continue;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", std::chrono::duration<double>(silent).count());
    fail(n, CoreFailure::kStalled,
         "engine core " + std::to_string(n) + " stalled: no heartbeat for " + seconds + " s");
    stalled.push_back(n);
  }
  return stalled;
}

bool EngineHealth::serving(uint32_t core) const {
  const CoreHealth& c = cores_.at(core);
  return c.ready && !c.failure && !closed_;
}

HealthReport EngineHealth::report() const {
  auto unavailable = [](std::string status, const std::string& reason) {
    return HealthReport{503, {{"status", std::move(status)}, {"reason", reason}}};
  };
  for (uint32_t n : failure_order_) {
    if (cores_[n].failure == CoreFailure::kFailed) {
      return unavailable("failed", cores_[n].failure_reason);
    }
  }
  if (closed_) return unavailable("closed", "the engine is shutting down");
  if (!failure_order_.empty()) {
    return unavailable("stalled", cores_[failure_order_.front()].failure_reason);
  }
  for (uint32_t n = 0; n < cores_.size(); ++n) {
    if (!cores_[n].ready) {
      return unavailable("starting", "engine core " + std::to_string(n) + " is starting");
    }
  }
  std::set<std::string> degraded;
  for (const CoreHealth& c : cores_) degraded.insert(c.degraded.begin(), c.degraded.end());
  if (!degraded.empty()) {
    return HealthReport{200,
                        {{"status", "degraded"},
                         {"degraded", std::vector<std::string>(degraded.begin(), degraded.end())}}};
  }
  return HealthReport{200, {{"status", "ok"}}};
}

}  // namespace kvtier
