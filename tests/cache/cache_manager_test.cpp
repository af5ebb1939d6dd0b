#include "kvtier/cache/cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cache_test_util.h"
#include "lru_policy.h"

namespace kvtier {
namespace {

using cache_test::expect_conserved;
using cache_test::key;
using cache_test::key_range;
using cache_test::keys;
using cache_test::make_manager;
using cache_test::store;

bool contains(const std::vector<SlotId>& v, SlotId s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(CacheManager, LookupCountsLeadingReadyKeys) {
  auto m = make_manager(8);
  store(*m, keys({1, 2, 3}));
  EXPECT_EQ(m->lookup(keys({1, 2, 3})).hit_chunks, 3u);
  const LookupResult r = m->lookup(keys({1, 2, 9, 3}));
  EXPECT_EQ(r.hit_chunks, 2u);
  EXPECT_FALSE(r.pending);
  EXPECT_EQ(m->lookup(keys({9, 1})).hit_chunks, 0u);  // a hole ends the prefix
  const CacheCounters c = m->counters();
  EXPECT_EQ(c.hits, 5u);
  EXPECT_EQ(c.misses, 2u);
  EXPECT_EQ(c.pending_lookups, 0u);
}

TEST(CacheManager, APendingKeyIsNeverAHit) {
  auto m = make_manager(8);
  store(*m, keys({1}));
  ASSERT_TRUE(m->prepare_store(keys({2, 3})).has_value());
  EXPECT_EQ(m->state(key(2)), LookupState::kPending);
  const LookupResult r = m->lookup(keys({1, 2, 3}));
  EXPECT_EQ(r.hit_chunks, 1u);
  EXPECT_TRUE(r.pending);
  EXPECT_EQ(m->counters().pending_lookups, 1u);
  auto load = m->prepare_load(keys({1, 2}));
  ASSERT_FALSE(load.has_value());
  EXPECT_EQ(load.error().code, ErrorCode::kNotFound);
  EXPECT_NE(load.error().message.find("pending"), std::string::npos);
  EXPECT_EQ(m->counters().slots_pinned, 0u);  // nothing pinned by the failed prepare_load

  m->complete_store(keys({2, 3}), Verdict::kSucceeded);
  EXPECT_EQ(m->lookup(keys({1, 2, 3})).hit_chunks, 3u);
  expect_conserved(*m);
}

TEST(CacheManager, PrepareStoreSlotsOnlyAbsentKeysOnce) {
  auto m = make_manager(8);
  store(*m, keys({1}));
  ASSERT_TRUE(m->prepare_store(keys({2})).has_value());
  auto plan = m->prepare_store(keys({1, 2, 3, 3, 4}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->keys, keys({3, 4}));
  ASSERT_EQ(plan->slots.size(), 2u);
  EXPECT_NE(plan->slots[0], plan->slots[1]);
  EXPECT_TRUE(plan->evicted.empty());
  EXPECT_EQ(m->counters().slots_pending, 3u);
  expect_conserved(*m);
}

TEST(CacheManager, EvictsLeastRecentReadyKeysToMakeRoom) {
  auto m = make_manager(3);
  store(*m, keys({1, 2, 3}));
  auto plan = m->prepare_store(keys({4, 5}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->evicted, keys({1, 2}));
  EXPECT_EQ(m->state(key(1)), LookupState::kMiss);
  EXPECT_EQ(m->counters().evictions, 2u);
  const auto events = m->take_events();
  ASSERT_EQ(events.size(), 2u);  // stored {1,2,3}, removed {1,2}
  EXPECT_EQ(events[1], (CacheEvent{CacheEventKind::kRemoved, keys({1, 2})}));
  expect_conserved(*m);
}

// An engine that never takes the events (it does not mirror the cache) must not make them pile
// up for the life of the process: the newest are kept, the oldest dropped and counted.
TEST(CacheManager, EventsNobodyTakesAreBoundedAndTheNewestKept) {
  auto m = make_manager(2);
  for (uint64_t id = 0; id < 100; ++id) store(*m, keys({id}));  // each store evicts one
  const auto events = m->take_events();
  size_t waiting_keys = 0;
  for (const CacheEvent& e : events) waiting_keys += e.keys.size();
  EXPECT_LE(waiting_keys, m->max_waiting_event_keys());
  EXPECT_EQ(m->counters().events_dropped, 198u - events.size());  // 100 stored, 98 removed
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), (CacheEvent{CacheEventKind::kStored, keys({99})}));
  EXPECT_TRUE(m->take_events().empty());
  expect_conserved(*m);
}

// The listener hears every event as it happens, after the change (a stored key is ready).
TEST(CacheManager, TheEventListenerHearsEachChangeAfterItIsMade) {
  auto m = make_manager(1);
  std::vector<CacheEvent> heard;
  bool ready_when_heard = false;
  m->set_event_listener([&](const CacheEvent& e) {
    heard.push_back(e);
    if (e.kind == CacheEventKind::kStored) ready_when_heard = m->ready_slot(e.keys[0]).has_value();
  });
  store(*m, keys({1}));
  store(*m, keys({2}));  // evicts 1
  EXPECT_TRUE(ready_when_heard);
  EXPECT_EQ(heard, m->take_events());  // the same events, in the same order
  m->set_event_listener({});
  store(*m, keys({3}));
  EXPECT_EQ(heard.size(), 3u);
}

TEST(CacheManager, PlanNamesTheSlotsEvictedKeysHeld) {
  auto m = make_manager(2);
  const StorePlan first = store(*m, keys({1, 2}));
  ASSERT_EQ(m->ready_slot(key(1)), first.slots[0]);
  ASSERT_EQ(m->ready_slot(key(2)), first.slots[1]);
  std::optional<StorePlan> plan = m->prepare_store(keys({3}));
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->evicted, keys({1}));
  EXPECT_EQ(plan->evicted_slots, std::vector<SlotId>{first.slots[0]});
  EXPECT_EQ(plan->slots, std::vector<SlotId>{first.slots[0]});  // reused by the new key
  EXPECT_EQ(m->ready_slot(key(1)), std::nullopt);               // evicted
  EXPECT_EQ(m->ready_slot(key(3)), std::nullopt);               // pending, not ready
  m->complete_store(plan->keys, Verdict::kSucceeded);
  EXPECT_EQ(m->ready_slot(key(3)), first.slots[0]);
  expect_conserved(*m);
}

TEST(CacheManager, PinnedSlotsAreNeverEvicted) {
  auto m = make_manager(3);
  store(*m, keys({1, 2, 3}));
  auto pinned = m->prepare_load(keys({1}));
  ASSERT_TRUE(pinned.has_value());
  auto plan = m->prepare_store(keys({4, 5}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->evicted, keys({2, 3}));
  EXPECT_FALSE(contains(plan->slots, pinned->at(0)));
  m->complete_store(plan->keys, Verdict::kSucceeded);
  // Only key 1 is left of the old keys, and it is pinned: no room for two more.
  EXPECT_FALSE(m->prepare_store(keys({6, 7, 8})).has_value());
  EXPECT_EQ(m->state(key(1)), LookupState::kHit);

  m->complete_load(keys({1}));
  auto after = m->prepare_store(keys({6, 7, 8}));
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->evicted, keys({1, 4, 5}));
  expect_conserved(*m);
}

TEST(CacheManager, PendingSlotsAreNeverEvicted) {
  auto m = make_manager(2);
  ASSERT_TRUE(m->prepare_store(keys({1, 2})).has_value());
  EXPECT_FALSE(m->prepare_store(keys({3})).has_value());
  EXPECT_EQ(m->state(key(1)), LookupState::kPending);
  EXPECT_EQ(m->counters().stores_rejected, 1u);
  expect_conserved(*m);
}

TEST(CacheManager, PrepareStoreIsAllOrNothing) {
  auto m = make_manager(4);
  store(*m, keys({1, 2, 3, 4}));
  ASSERT_TRUE(m->prepare_load(keys({3, 4})).has_value());
  m->take_events();
  const CacheCounters before = m->counters();

  // Three new keys need three slots; only keys 1 and 2 can be evicted.
  EXPECT_FALSE(m->prepare_store(keys({5, 6, 7})).has_value());

  for (uint64_t i : {1, 2, 3, 4}) EXPECT_EQ(m->state(key(i)), LookupState::kHit) << i;
  for (uint64_t i : {5, 6, 7}) EXPECT_EQ(m->state(key(i)), LookupState::kMiss) << i;
  EXPECT_TRUE(m->take_events().empty());
  const CacheCounters after = m->counters();
  EXPECT_EQ(after.slots_ready, before.slots_ready);
  EXPECT_EQ(after.slots_free, before.slots_free);
  EXPECT_EQ(after.evictions, before.evictions);
  EXPECT_EQ(after.stores_rejected, before.stores_rejected + 1);
  // Recency is untouched too: two new keys still evict 1 then 2.
  auto plan = m->prepare_store(keys({5, 6}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->evicted, keys({1, 2}));
  expect_conserved(*m);
}

TEST(CacheManager, PrepareStoreNeverEvictsItsOwnInputs) {
  auto m = make_manager(2);
  store(*m, keys({1, 2}));
  // Key 1 is the least recent, but it is an input of this store.
  auto plan = m->prepare_store(keys({1, 3}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->keys, keys({3}));
  EXPECT_EQ(plan->evicted, keys({2}));
  m->complete_store(plan->keys, Verdict::kSucceeded);
  // Both remaining keys are inputs: nothing can be evicted for key 4.
  EXPECT_FALSE(m->prepare_store(keys({1, 3, 4})).has_value());
  expect_conserved(*m);
}

TEST(CacheManager, FailedStoreFreesOnlyKeysThatAreNotYetReady) {
  auto m = make_manager(4);
  store(*m, keys({1}));
  ASSERT_TRUE(m->prepare_store(keys({2})).has_value());
  m->complete_store(keys({1, 2}), Verdict::kFailed);
  EXPECT_EQ(m->state(key(1)), LookupState::kHit);
  EXPECT_EQ(m->state(key(2)), LookupState::kMiss);
  const CacheCounters c = m->counters();
  EXPECT_EQ(c.stores_failed, 1u);
  EXPECT_EQ(c.slots_free, 3u);
  expect_conserved(*m);
}

TEST(CacheManager, CompleteStoreIsIdempotent) {
  auto m = make_manager(4);
  ASSERT_TRUE(m->prepare_store(keys({1, 2})).has_value());
  m->complete_store(keys({1, 2}), Verdict::kSucceeded);
  m->complete_store(keys({1, 2}), Verdict::kSucceeded);
  m->complete_store(keys({1, 2}), Verdict::kFailed);
  EXPECT_EQ(m->take_events().size(), 1u);
  EXPECT_EQ(m->counters().stores_succeeded, 2u);

  ASSERT_TRUE(m->prepare_store(keys({3})).has_value());
  m->complete_store(keys({3}), Verdict::kFailed);
  m->complete_store(keys({3}), Verdict::kFailed);
  m->complete_store(keys({3}), Verdict::kSucceeded);
  EXPECT_EQ(m->state(key(3)), LookupState::kMiss);
  EXPECT_EQ(m->counters().stores_failed, 1u);
  EXPECT_TRUE(m->take_events().empty());
  expect_conserved(*m);
}

TEST(CacheManager, LoadsPinPerOccurrenceAndUnpinExactlyOnce) {
  auto m = make_manager(4);
  const StorePlan plan = store(*m, keys({1, 2}));
  auto slots = m->prepare_load(keys({1, 2, 1}));
  ASSERT_TRUE(slots.has_value());
  EXPECT_EQ(*slots, (std::vector<SlotId>{plan.slots[0], plan.slots[1], plan.slots[0]}));
  EXPECT_EQ(m->counters().slots_pinned, 2u);
  EXPECT_EQ(m->counters().loads, 3u);

  m->complete_load(keys({1, 2}));
  EXPECT_EQ(m->counters().slots_pinned, 1u);  // key 1 still holds one pin
  // Key 2 is no longer pinned: completing it again is a bug and unpins nothing.
  EXPECT_THROW(m->complete_load(keys({1, 2})), std::logic_error);
  EXPECT_EQ(m->counters().slots_pinned, 1u);
  m->complete_load(keys({1}));
  EXPECT_EQ(m->counters().slots_pinned, 0u);
  EXPECT_THROW(m->complete_load(keys({7})), std::logic_error);
  expect_conserved(*m);
}

TEST(CacheManager, TouchLeavesTheFirstKeyMostRecent) {
  auto m = make_manager(4);
  store(*m, keys({1, 2, 3, 4}));
  m->touch(keys({1, 2}));
  auto plan = m->prepare_store(keys({5, 6, 7, 8}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->evicted, keys({3, 4, 2, 1}));
}

TEST(CacheManager, ResetDropsOnlyReadyUnpinnedKeys) {
  auto m = make_manager(6);
  store(*m, keys({1, 2, 3}));
  ASSERT_TRUE(m->prepare_load(keys({2})).has_value());
  ASSERT_TRUE(m->prepare_store(keys({4})).has_value());
  m->take_events();

  EXPECT_EQ(m->reset(), 2u);
  EXPECT_EQ(m->state(key(1)), LookupState::kMiss);
  EXPECT_EQ(m->state(key(2)), LookupState::kHit);
  EXPECT_EQ(m->state(key(4)), LookupState::kPending);
  const auto events = m->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, CacheEventKind::kRemoved);
  auto removed = events[0].keys;
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, keys({1, 3}));
  expect_conserved(*m);
}

TEST(CacheManager, ArcAdaptsAndFallsBackToT1WhenT2IsPinned) {
  auto m = make_manager(4, "arc");
  store(*m, keys({1, 2, 3, 4}));
  m->touch(keys({3}));  // T1 = {1, 2, 4}, T2 = {3}, p = 0: T1 loses keys first
  EXPECT_EQ(store(*m, keys({5})).evicted, keys({1}));
  // Keys evicted from T1 and stored again are ghost hits in B1: each grows p by one.
  EXPECT_EQ(store(*m, keys({1})).evicted, keys({2}));
  EXPECT_EQ(store(*m, keys({2})).evicted, keys({4}));
  // Now T1 = {5}, T2 = {3, 1, 2}, p = 2 >= |T1|: ARC prefers to evict from T2.
  auto probe = m->prepare_store(keys({6}));
  ASSERT_TRUE(probe.has_value());
  EXPECT_EQ(probe->evicted, keys({3}));
  m->complete_store(probe->keys, Verdict::kFailed);
  store(*m, keys({3}));  // a ghost hit in B2 shrinks p to 1; T2 = {1, 2, 3}

  // Every T2 key is pinned: the key is taken from T1 rather than giving up (vLLM #55461).
  ASSERT_TRUE(m->prepare_load(keys({1, 2, 3})).has_value());
  auto plan = m->prepare_store(keys({7}));
  ASSERT_TRUE(plan.has_value()) << "ARC gave up although T1 had an evictable key";
  EXPECT_EQ(plan->evicted, keys({5}));
  expect_conserved(*m);
}

TEST(CacheManager, RejectsBadConstruction) {
  EXPECT_THROW(CacheManager(0, 1, std::make_unique<LruPolicy>()), std::invalid_argument);
  EXPECT_THROW(CacheManager(1, 0, std::make_unique<LruPolicy>()), std::invalid_argument);
  EXPECT_THROW(CacheManager(1, 1, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace kvtier
