#include "kvtier/engine/heartbeat_counters.h"

#include <string>
#include <string_view>

namespace kvtier {
namespace {

// A visitor that adds each counter as prefix + name, with "_total" after a counter's name.
auto add_to(HeartbeatCounters& out, std::string_view prefix) {
  return [&out, prefix](std::string_view name, uint64_t value, CounterKind kind) {
    std::string key = std::string(prefix) + std::string(name);
    if (kind == CounterKind::kCounter) key += "_total";
    out.values[key] = value;
    out.kinds[key] = std::string(to_string(kind));
  };
}

}  // namespace

HeartbeatCounters heartbeat_counters(const EngineCounters& engine,
                                     const std::optional<ConnectorCounters>& connector,
                                     const std::optional<CacheCounters>& cache,
                                     const std::optional<TierReport>& tiers,
                                     const std::optional<InjectedFaultCounts>& faults) {
  HeartbeatCounters out;
  visit_counters(engine, add_to(out, ""));
  if (connector) visit_counters(*connector, add_to(out, "kvtier_"));
  if (cache) {
    const auto host = add_to(out, "kvtier_host_");
    const auto quarantine = add_to(out, "kvtier_");  // kvtier_quarantined_bytes, as it was named
    visit_counters(*cache, [&](std::string_view name, uint64_t value, CounterKind kind) {
      (name == "quarantined_bytes" ? quarantine : host)(name, value, kind);
    });
  }
  if (tiers) {
    visit_counters(tiers->mover, add_to(out, "kvtier_tier_"));
    for (const TierMetrics& t : tiers->tiers) {
      const std::string prefix = "kvtier_tier_" + t.name + "_";
      visit_counters(t.counters, add_to(out, prefix));
      add_to(out, prefix)("down", t.state == TierState::kDown ? 1 : 0, CounterKind::kGauge);
    }
  }
  if (faults) visit_counters(*faults, add_to(out, "fault_injector_"));
  return out;
}

}  // namespace kvtier
