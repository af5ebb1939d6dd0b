// CacheCounters: a snapshot of a CacheManager's slot states and running totals, for metrics
// and tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/core/counter_kind.h"

namespace kvtier {

struct CacheCounters {
  // Slots by state; the four sum to the pool's slot count (F12).
  size_t slots_free = 0;
  size_t slots_pending = 0;
  size_t slots_ready = 0;
  size_t slots_quarantined = 0;
  size_t slots_pinned = 0;         // ready slots with at least one pin (a subset of slots_ready)
  uint64_t quarantined_bytes = 0;  // slots_quarantined * slot bytes: retained forever (F7)

  // Totals since construction.
  uint64_t hits = 0;                // keys reported as hits by lookup
  uint64_t misses = 0;              // lookups that stopped at an absent key
  uint64_t pending_lookups = 0;     // lookups that stopped at a pending key
  uint64_t evictions = 0;           // keys evicted by prepare_store to make room
  uint64_t stores_succeeded = 0;    // keys published by complete_store(kSucceeded)
  uint64_t stores_failed = 0;       // keys freed by complete_store(kFailed)
  uint64_t stores_rejected = 0;     // prepare_store calls that could not make room
  uint64_t stores_quarantined = 0;  // keys whose store was Unprovable
  uint64_t loads = 0;               // keys pinned by prepare_load
  uint64_t loads_quarantined = 0;   // keys whose load was Unprovable
  uint64_t events_dropped = 0;      // events take_events() never returned: nobody asked in time
};

// f(name, value, kind) for every field (counter_kind.h): the slot states and quarantined_bytes
// are gauges, the totals counters.
template <class F>
void visit_counters(const CacheCounters& c, F&& f) {
  using enum CounterKind;
  f("slots_free", uint64_t{c.slots_free}, kGauge);
  f("slots_pending", uint64_t{c.slots_pending}, kGauge);
  f("slots_ready", uint64_t{c.slots_ready}, kGauge);
  f("slots_quarantined", uint64_t{c.slots_quarantined}, kGauge);
  f("slots_pinned", uint64_t{c.slots_pinned}, kGauge);
  f("quarantined_bytes", c.quarantined_bytes, kGauge);
  f("hits", c.hits, kCounter);
  f("misses", c.misses, kCounter);
  f("pending_lookups", c.pending_lookups, kCounter);
  f("evictions", c.evictions, kCounter);
  f("stores_succeeded", c.stores_succeeded, kCounter);
  f("stores_failed", c.stores_failed, kCounter);
  f("stores_rejected", c.stores_rejected, kCounter);
  f("stores_quarantined", c.stores_quarantined, kCounter);
  f("loads", c.loads, kCounter);
  f("loads_quarantined", c.loads_quarantined, kCounter);
  f("events_dropped", c.events_dropped, kCounter);
}

}  // namespace kvtier
