// EngineHealth: what the frontend knows about its engine cores, and the /health answer it gives
// (docs/engine.md "Health", rules H1-H3, H6, H7 in docs/architecture.md).
//
// Not thread-safe: CoreManager owns one and guards it with its mutex. Time comes in as
// arguments so that tests drive it without sleeping.
//
// Per core: starting → ready (said hello; its stall clock runs) → heartbeats; or failed. A failure
// (the core's `failed` message, its death, or a stall) is recorded once with its reason and stays
// (H2): later heartbeats, messages or failures of the same core change nothing.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/core/clock.h"

namespace kvtier {

// The answer of GET /health: HTTP status and JSON body.
struct HealthReport {
  int http_status = 200;
  nlohmann::json body;
  bool healthy() const { return http_status == 200; }
};

enum class CoreFailure { kFailed, kStalled };

struct CoreHealth {
  bool ready = false;          // said hello
  TimePoint last_heartbeat{};  // of its latest hello or hb
  std::optional<CoreFailure> failure;
  std::string failure_reason;         // set with `failure`
  std::vector<std::string> degraded;  // from its latest `hb`
};

class EngineHealth {
 public:
  EngineHealth(uint32_t cores, Duration stall_timeout);

  void hello(uint32_t core, TimePoint now);
  void heartbeat(uint32_t core, TimePoint now, std::vector<std::string> degraded);
  // Records the failure unless the core has one already (H2: the first reason stays).
  // Returns whether this call recorded it.
  bool fail(uint32_t core, CoreFailure kind, std::string reason);
  // H6: every ready core whose last heartbeat is older than the stall timeout at `now` becomes
  // stalled ("engine core <n> stalled: no heartbeat for <s> s"). Returns the cores it marked.
  // Cores that have not said hello are "starting" (503) and not checked.
  std::vector<uint32_t> check_stalls(TimePoint now);
  // Shutting down or shut down: /health is 503 "closed" from now on.
  void close() { closed_ = true; }

  bool closed() const { return closed_; }
  // Ready, not failed: may take requests.
  bool serving(uint32_t core) const;
  const CoreHealth& core(uint32_t n) const { return cores_.at(n); }
  uint32_t core_count() const { return static_cast<uint32_t>(cores_.size()); }

  // Precedence: failed (first failure in time) > closed > stalled > starting > degraded > ok.
  //   503 {"status":"failed","reason":…}     a core failed or died (H2, H3)
  //   503 {"status":"closed","reason":…}     shutting down (H3)
  //   503 {"status":"stalled","reason":…}    a core stopped sending heartbeats (H6)
  //   503 {"status":"starting","reason":…}   a core has not said hello yet (H1)
  //   200 {"status":"degraded","degraded":[…]}  a core names degraded parts (H7)
  //   200 {"status":"ok"}
  HealthReport report() const;

 private:
  std::vector<CoreHealth> cores_;
  Duration stall_timeout_;
  bool closed_ = false;
  // Cores in the order they failed: the first one names the engine's failure.
  std::vector<uint32_t> failure_order_;
};

}  // namespace kvtier
