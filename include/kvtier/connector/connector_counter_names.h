// visit_counters for ConnectorCounters (scheduler_connector.h): the one place the connector's
// counters get names and kinds (counter_kind.h).
#pragma once

#include <cstdint>

#include "kvtier/connector/scheduler_connector.h"
#include "kvtier/core/counter_kind.h"

namespace kvtier {

// f(name, value, kind) for every field: jobs_in_flight and admission_threshold are gauges, the
// rest counters.
template <class F>
void visit_counters(const ConnectorCounters& c, F&& f) {
  using enum CounterKind;
  f("jobs_issued", c.jobs_issued, kCounter);
  f("loads_completed", c.loads_completed, kCounter);
  f("loads_failed", c.loads_failed, kCounter);
  f("stores_completed", c.stores_completed, kCounter);
  f("stores_failed", c.stores_failed, kCounter);
  f("jobs_unprovable", c.jobs_unprovable, kCounter);
  f("jobs_timed_out", c.jobs_timed_out, kCounter);
  f("stale_acks", c.stale_acks, kCounter);
  f("stores_skipped", c.stores_skipped, kCounter);
  f("stores_deferred", c.stores_deferred, kCounter);
  f("stores_not_admitted", c.stores_not_admitted, kCounter);
  f("flushes", c.flushes, kCounter);
  f("loaded_tokens", c.loaded_tokens, kCounter);
  f("deferred_lookups", c.deferred_lookups, kCounter);
  f("jobs_in_flight", uint64_t{c.jobs_in_flight}, kGauge);
  f("admission_threshold", uint64_t{c.admission_threshold}, kGauge);
}

}  // namespace kvtier
