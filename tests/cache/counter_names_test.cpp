// visit_counters of the cache layer's counter structs (and the tiers' below it): every field
// is visited once, and the kinds say which are levels (gauges) and which are totals.
#include <gtest/gtest.h>

#include "kvtier/cache/cache_counters.h"
#include "kvtier/cache/tier_mover.h"
#include "kvtier/tier/tier.h"
#include "support/counter_visit.h"

namespace kvtier::testing {
namespace {

TEST(CounterNames, CacheCountersSlotStatesAreGaugesTotalsAreCounters) {
  const auto kinds = expect_visits_every_field<CacheCounters>();
  for (const char* gauge : {"slots_free", "slots_pending", "slots_ready", "slots_quarantined",
                            "slots_pinned", "quarantined_bytes"}) {
    ASSERT_TRUE(kinds.contains(gauge)) << gauge;
    EXPECT_EQ(kinds.at(gauge), CounterKind::kGauge) << gauge;
  }
  ASSERT_TRUE(kinds.contains("hits"));
  EXPECT_EQ(kinds.at("hits"), CounterKind::kCounter);
  ASSERT_TRUE(kinds.contains("loads_quarantined"));
  EXPECT_EQ(kinds.at("loads_quarantined"), CounterKind::kCounter);
}

TEST(CounterNames, TierMoverCountersAreCounters) {
  for (const auto& [name, kind] : expect_visits_every_field<TierMoverCounters>()) {
    EXPECT_EQ(kind, CounterKind::kCounter) << name;
  }
}

TEST(CounterNames, TierCountersAreCounters) {
  for (const auto& [name, kind] : expect_visits_every_field<TierCounters>()) {
    EXPECT_EQ(kind, CounterKind::kCounter) << name;
  }
}

}  // namespace
}  // namespace kvtier::testing
