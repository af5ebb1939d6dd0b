// The counters an engine core's heartbeat carries (`hb`, docs/engine.md): "counters", name →
// value, and "kinds", name → "counter" | "gauge". They are named from the counter structs'
// visitors (counter_kind.h):
//   - EngineCounters as visited ("steps", "requests_running", …);
//   - ConnectorCounters, when the connector is on, with "kvtier_" before the name;
//   - CacheCounters, with the in-process host cache, with "kvtier_host_" before the name, except
//     quarantined_bytes: "kvtier_quarantined_bytes";
//   - with tiers below it, TierMoverCounters with "kvtier_tier_" before the name, and per tier
//     its TierCounters with "kvtier_tier_<tier>_" and the gauge "kvtier_tier_<tier>_down" (1
//     while DOWN, H7);
//   - with fault injection (the `faults` section), the workers' InjectedFaultCounts summed, with
//     "fault_injector_" before the name;
// and "_total" after the name of every counter, never of a gauge. The frontend's /metrics
// shows each as kvtier_core_<name>, with its kind as the Prometheus type.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "kvtier/cache/cache_counters.h"
#include "kvtier/connector/connector_counter_names.h"
#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/engine/engine_scheduler.h"

namespace kvtier {

struct HeartbeatCounters {
  nlohmann::json values = nlohmann::json::object();  // name → number
  nlohmann::json kinds = nlohmann::json::object();   // name → "counter" | "gauge"
};

HeartbeatCounters heartbeat_counters(
    const EngineCounters& engine, const std::optional<ConnectorCounters>& connector,
    const std::optional<CacheCounters>& cache,
    const std::optional<TierReport>& tiers = std::nullopt,
    const std::optional<InjectedFaultCounts>& faults = std::nullopt);

}  // namespace kvtier
