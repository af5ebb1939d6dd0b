// The counters an engine core's heartbeat carries: every field of the engine's, the connector's
// and the host cache's counters, under the names /metrics has always shown, each with its kind.
#include "kvtier/engine/heartbeat_counters.h"

#include <gtest/gtest.h>

#include "kvtier/engine/step_messages.h"
#include "support/counter_visit.h"

namespace kvtier::testing {
namespace {

TEST(HeartbeatCounters, EngineCountersRequestCountsAreGauges) {
  const auto kinds = expect_visits_every_field<EngineCounters>();
  EXPECT_EQ(kinds.at("requests_running"), CounterKind::kGauge);
  EXPECT_EQ(kinds.at("requests_waiting"), CounterKind::kGauge);
  EXPECT_EQ(kinds.at("steps"), CounterKind::kCounter);
}

TEST(HeartbeatCounters, ConnectorCountersJobsInFlightIsAGauge) {
  const auto kinds = expect_visits_every_field<ConnectorCounters>();
  EXPECT_EQ(kinds.at("jobs_in_flight"), CounterKind::kGauge);
  EXPECT_EQ(kinds.at("loads_failed"), CounterKind::kCounter);
}

TEST(HeartbeatCounters, NamesAndValuesAsBeforeEveryCounterEndsInTotal) {
  const EngineCounters e{.device_hit_tokens = 50,
                         .kvtier_hit_tokens = 60,
                         .recomputed_tokens = 70,
                         .preemptions = 8,
                         .steps = 40,
                         .running = 2,
                         .waiting = 3};
  const ConnectorCounters c{.loads_completed = 11,
                            .loads_failed = 12,
                            .stores_completed = 13,
                            .stores_failed = 14,
                            .jobs_unprovable = 15,
                            .jobs_in_flight = 16};
  const CacheCounters h{.slots_free = 22, .slots_ready = 21, .quarantined_bytes = 23};
  const HeartbeatCounters hb = heartbeat_counters(e, c, h);
  // The names an engine core's heartbeat carried before they came from the visitors.
  const std::map<std::string, std::pair<uint64_t, std::string>> before = {
      {"requests_running", {2, "gauge"}},
      {"requests_waiting", {3, "gauge"}},
      {"steps_total", {40, "counter"}},
      {"device_prefix_hit_tokens_total", {50, "counter"}},
      {"kvtier_hit_tokens_total", {60, "counter"}},
      {"recomputed_tokens_total", {70, "counter"}},
      {"preemptions_total", {8, "counter"}},
      {"kvtier_loads_completed_total", {11, "counter"}},
      {"kvtier_loads_failed_total", {12, "counter"}},
      {"kvtier_stores_completed_total", {13, "counter"}},
      {"kvtier_stores_failed_total", {14, "counter"}},
      {"kvtier_jobs_unprovable_total", {15, "counter"}},
      {"kvtier_jobs_in_flight", {16, "gauge"}},
      {"kvtier_host_slots_ready", {21, "gauge"}},
      {"kvtier_host_slots_free", {22, "gauge"}},
      {"kvtier_quarantined_bytes", {23, "gauge"}},
  };
  for (const auto& [name, expected] : before) {
    ASSERT_TRUE(hb.values.contains(name)) << name << "\n" << hb.values.dump(1);
    EXPECT_EQ(hb.values[name].get<uint64_t>(), expected.first) << name;
    EXPECT_EQ(hb.kinds[name], expected.second) << name;
  }
  // Every field of the three structs, none under the name of another.
  EXPECT_EQ(hb.values.size(), expect_visits_every_field<EngineCounters>().size() +
                                  expect_visits_every_field<ConnectorCounters>().size() +
                                  expect_visits_every_field<CacheCounters>().size());
  ASSERT_EQ(hb.kinds.size(), hb.values.size());
  for (const auto& [name, kind] : hb.kinds.items()) {
    EXPECT_EQ(kind, name.ends_with("_total") ? "counter" : "gauge") << name;
  }
}

TEST(HeartbeatCounters, WithoutConnectorOrHostCacheOnlyTheEngines) {
  const HeartbeatCounters hb = heartbeat_counters(EngineCounters{}, std::nullopt, std::nullopt);
  EXPECT_EQ(hb.values.size(), expect_visits_every_field<EngineCounters>().size());
  EXPECT_TRUE(hb.values.contains("steps_total"));
  EXPECT_FALSE(hb.values.contains("kvtier_jobs_in_flight"));
  EXPECT_FALSE(hb.values.contains("kvtier_host_slots_ready"));
}

TEST(HeartbeatCounters, InjectedFaultsAreNamedAfterFaultInjector) {
  InjectedFaultCounts faults{.copy_calls = 7, .submit_failures = 2, .delays = 3};
  const HeartbeatCounters hb =
      heartbeat_counters(EngineCounters{}, std::nullopt, std::nullopt, std::nullopt, faults);
  EXPECT_EQ(hb.values.size(), expect_visits_every_field<EngineCounters>().size() +
                                  expect_visits_every_field<InjectedFaultCounts>().size());
  EXPECT_EQ(hb.values["fault_injector_copy_calls_total"], 7);
  EXPECT_EQ(hb.values["fault_injector_submit_failures_total"], 2);
  EXPECT_EQ(hb.values["fault_injector_delays_total"], 3);
  EXPECT_EQ(hb.kinds["fault_injector_delays_total"], "counter");
}

TEST(InjectedFaultCounts, DoneMessageFieldRoundTripsAndSums) {
  InjectedFaultCounts a{.copy_calls = 5, .latched_errors = 1, .hangs = 2};
  EXPECT_EQ(to_json(a).size(), expect_visits_every_field<InjectedFaultCounts>().size());
  InjectedFaultCounts b = injected_fault_counts_from_json(to_json(a));
  b += a;
  EXPECT_EQ(b.copy_calls, 10u);
  EXPECT_EQ(b.latched_errors, 2u);
  EXPECT_EQ(b.hangs, 4u);
  EXPECT_EQ(b.delays, 0u);
  nlohmann::json negative = to_json(a);
  negative["delays"] = -1;
  EXPECT_THROW(injected_fault_counts_from_json(negative), nlohmann::json::exception);
}

}  // namespace
}  // namespace kvtier::testing
