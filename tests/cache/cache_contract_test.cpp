// Fault-contract tests for the cache layer: F3 (a failed store is never published), F7
// (Unprovable transfers quarantine their slots forever), F12 (slots are conserved).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "cache_test_util.h"
#include "kvtier/cache/cache_manager.h"

namespace kvtier {

// Corrupts a manager's internals, so that the tests can show audit() notices.
class CacheManagerTestPeer {
 public:
  static void leak_free_slot(CacheManager& m) { m.free_slots_.pop_back(); }
  static void double_free(CacheManager& m, SlotId slot) { m.free_slots_.push_back(slot); }
  static void forget_in_policy(CacheManager& m, const ChunkKey& k) { m.policy_->remove(k); }
};

namespace {

using cache_test::expect_conserved;
using cache_test::key;
using cache_test::key_range;
using cache_test::keys;
using cache_test::kSlotBytes;
using cache_test::make_manager;
using cache_test::store;

bool has_stored_event(const std::vector<CacheEvent>& events, const ChunkKey& k) {
  return std::any_of(events.begin(), events.end(), [&](const CacheEvent& e) {
    return e.kind == CacheEventKind::kStored &&
           std::find(e.keys.begin(), e.keys.end(), k) != e.keys.end();
  });
}

TEST(CacheContract, F3_FailedStoreIsNeverPublished) {
  auto m = make_manager(4);
  auto plan = m->prepare_store(keys({1, 2}));
  ASSERT_TRUE(plan.has_value());
  m->complete_store(plan->keys, Verdict::kFailed);
  // A late or repeated success report for the same store changes nothing.
  m->complete_store(plan->keys, Verdict::kSucceeded);

  for (uint64_t i : {1, 2}) EXPECT_EQ(m->state(key(i)), LookupState::kMiss) << i;
  const LookupResult r = m->lookup(keys({1, 2}));
  EXPECT_EQ(r.hit_chunks, 0u);
  EXPECT_FALSE(r.pending);
  EXPECT_FALSE(m->prepare_load(keys({1})).has_value());
  const auto events = m->take_events();
  EXPECT_FALSE(has_stored_event(events, key(1)) || has_stored_event(events, key(2)));
  const CacheCounters c = m->counters();
  EXPECT_EQ(c.slots_free, 4u);
  EXPECT_EQ(c.stores_failed, 2u);
  EXPECT_EQ(c.stores_succeeded, 0u);
  // The freed slots are usable again: the full pool can be stored.
  auto refill = m->prepare_store(key_range(10, 4));
  ASSERT_TRUE(refill.has_value());
  EXPECT_TRUE(refill->evicted.empty());
  expect_conserved(*m);
}

TEST(CacheContract, F3_FailedStoreFreesOnlyItsPendingKeys) {
  auto m = make_manager(4);
  store(*m, keys({1}));
  m->take_events();
  // The caller reports the whole request, including a key an earlier store published.
  ASSERT_TRUE(m->prepare_store(keys({1, 2})).has_value());
  m->complete_store(keys({1, 2}), Verdict::kFailed);
  EXPECT_EQ(m->state(key(1)), LookupState::kHit);
  EXPECT_EQ(m->state(key(2)), LookupState::kMiss);
  EXPECT_TRUE(m->take_events().empty());
  EXPECT_EQ(m->counters().slots_ready, 1u);
  expect_conserved(*m);
}

TEST(CacheContract, F7_UnprovableStoreQuarantinesItsSlotForever) {
  auto m = make_manager(4);
  auto plan = m->prepare_store(keys({1}));
  ASSERT_TRUE(plan.has_value());
  const SlotId quarantined = plan->slots[0];
  m->quarantine_store(plan->keys);
  // Nothing a caller does later brings the key or the slot back.
  m->complete_store(plan->keys, Verdict::kSucceeded);
  m->complete_store(plan->keys, Verdict::kFailed);
  m->reset();

  EXPECT_EQ(m->state(key(1)), LookupState::kMiss);
  EXPECT_FALSE(has_stored_event(m->take_events(), key(1)));
  CacheCounters c = m->counters();
  EXPECT_EQ(c.slots_quarantined, 1u);
  EXPECT_EQ(c.quarantined_bytes, kSlotBytes);
  EXPECT_EQ(c.stores_quarantined, 1u);

  // Eviction pressure: rounds of stores that fill the pool never get the quarantined slot.
  EXPECT_FALSE(m->prepare_store(key_range(100, 4)).has_value());
  for (uint64_t round = 0; round < 5; ++round) {
    const StorePlan p = store(*m, key_range(10 * (round + 1), 3));
    ASSERT_EQ(p.slots.size(), 3u);
    EXPECT_EQ(std::count(p.slots.begin(), p.slots.end(), quarantined), 0) << "round " << round;
  }
  c = m->counters();
  EXPECT_EQ(c.slots_quarantined, 1u);
  EXPECT_EQ(c.quarantined_bytes, kSlotBytes);
  expect_conserved(*m);
}

TEST(CacheContract, F7_UnprovableLoadQuarantinesItsSourceSlotForever) {
  auto m = make_manager(4);
  const StorePlan stored = store(*m, keys({1, 2, 3, 4}));
  const SlotId quarantined = stored.slots[0];
  ASSERT_TRUE(m->prepare_load(keys({1})).has_value());
  m->quarantine_load(keys({1}));
  m->reset();

  CacheCounters c = m->counters();
  EXPECT_EQ(c.slots_quarantined, 1u);
  EXPECT_EQ(c.quarantined_bytes, kSlotBytes);
  EXPECT_EQ(c.loads_quarantined, 1u);
  EXPECT_EQ(c.slots_pinned, 0u);
  // Key 1 is the least recent key, yet no amount of pressure evicts it or reuses its slot.
  EXPECT_FALSE(m->prepare_store(key_range(100, 4)).has_value());
  for (uint64_t round = 0; round < 5; ++round) {
    const StorePlan p = store(*m, key_range(10 * (round + 1), 3));
    EXPECT_EQ(std::count(p.evicted.begin(), p.evicted.end(), key(1)), 0) << "round " << round;
    EXPECT_EQ(std::count(p.slots.begin(), p.slots.end(), quarantined), 0) << "round " << round;
  }
  // The bytes are intact (a load only reads them): the key stays readable, and another load
  // completing normally does not release the quarantine.
  EXPECT_EQ(m->state(key(1)), LookupState::kHit);
  ASSERT_TRUE(m->prepare_load(keys({1})).has_value());
  m->complete_load(keys({1}));
  EXPECT_FALSE(m->prepare_store(key_range(200, 4)).has_value());
  c = m->counters();
  EXPECT_EQ(c.slots_quarantined, 1u);
  EXPECT_EQ(c.quarantined_bytes, kSlotBytes);
  expect_conserved(*m);
}

TEST(CacheContract, F12_AuditDetectsALeakedSlot) {
  auto m = make_manager(4);
  store(*m, keys({1}));
  ASSERT_TRUE(m->audit().has_value());
  CacheManagerTestPeer::leak_free_slot(*m);
  const Status audit = m->audit();
  ASSERT_FALSE(audit.has_value());
  EXPECT_EQ(audit.error().code, ErrorCode::kInternal);
  EXPECT_NE(audit.error().message.find("leaked"), std::string::npos) << audit.error().message;
}

TEST(CacheContract, F12_AuditDetectsADoublyHeldSlot) {
  auto m = make_manager(4);
  const StorePlan p = store(*m, keys({1}));
  CacheManagerTestPeer::double_free(*m, p.slots[0]);
  const Status audit = m->audit();
  ASSERT_FALSE(audit.has_value());
  EXPECT_NE(audit.error().message.find("held by both"), std::string::npos) << audit.error().message;
}

TEST(CacheContract, F12_AuditDetectsIndexAndPolicyDisagreeing) {
  auto m = make_manager(4, "arc");
  store(*m, keys({1, 2}));
  CacheManagerTestPeer::forget_in_policy(*m, key(2));
  const Status audit = m->audit();
  ASSERT_FALSE(audit.has_value());
  EXPECT_NE(audit.error().message.find(key(2).hex()), std::string::npos) << audit.error().message;
}

// A seeded mix of every operation, with every outcome, checked after each step; at quiescence
// (no store or load in flight) every slot is free, ready or quarantined.
void run_mixed_sequence(const char* policy) {
  constexpr size_t kSlots = 24;
  constexpr uint64_t kKeySpace = 48;
  constexpr int kMaxQuarantines = 2;  // per kind, so that the pool stays mostly usable
  auto m = make_manager(kSlots, policy);
  std::mt19937_64 rng(20240611);
  auto pick = [&](uint64_t n) { return rng() % n; };
  std::vector<std::vector<ChunkKey>> stores, loads;  // in flight
  int store_quarantines = 0, load_quarantines = 0;
  for (int step = 0; step < 3000; ++step) {
    switch (pick(8)) {
      case 0: {
        std::vector<ChunkKey> ks;
        const uint64_t first = pick(kKeySpace);
        for (uint64_t i = 0, n = 1 + pick(6); i < n; ++i) ks.push_back(key(first + i));
        if (auto plan = m->prepare_store(ks)) stores.push_back(plan->keys);
        break;
      }
      case 1:
      case 2:
        if (!stores.empty()) {
          const size_t i = pick(stores.size());
          const uint64_t outcome = pick(40);  // mostly success, some failures, rare Unprovable
          if (outcome == 0 && store_quarantines < kMaxQuarantines) {
            ++store_quarantines;
            m->quarantine_store(stores[i]);
          } else {
            m->complete_store(stores[i], outcome < 12 ? Verdict::kFailed : Verdict::kSucceeded);
          }
          stores.erase(stores.begin() + static_cast<ptrdiff_t>(i));
        }
        break;
      case 3:
      case 4: {
        const uint64_t first = pick(kKeySpace);
        const std::vector<ChunkKey> ks = keys({first, first + 1});
        m->lookup(ks);
        m->touch(ks);
        if (m->prepare_load(ks).has_value()) loads.push_back(ks);
        break;
      }
      case 5:
        if (!loads.empty()) {
          const size_t i = pick(loads.size());
          if (pick(20) == 0 && load_quarantines < kMaxQuarantines) {
            ++load_quarantines;
            m->quarantine_load(loads[i]);
          } else {
            m->complete_load(loads[i]);
          }
          loads.erase(loads.begin() + static_cast<ptrdiff_t>(i));
        }
        break;
      case 6:
        if (pick(20) == 0) m->reset();
        break;
      default:
        m->take_events();
        break;
    }
    const Status audit = m->audit();
    ASSERT_TRUE(audit.has_value()) << "step " << step << ": " << audit.error().to_string();
  }
  for (const auto& ks : stores) m->complete_store(ks, Verdict::kSucceeded);
  for (const auto& ks : loads) m->complete_load(ks);

  const CacheCounters c = m->counters();
  EXPECT_EQ(c.slots_pending, 0u);
  EXPECT_EQ(c.slots_pinned, 0u);
  EXPECT_EQ(c.slots_free + c.slots_ready + c.slots_quarantined, kSlots);
  EXPECT_EQ(c.quarantined_bytes, c.slots_quarantined * kSlotBytes);
  // The sequence did exercise every path.
  EXPECT_GT(c.evictions, 0u);
  EXPECT_GT(c.stores_failed, 0u);
  EXPECT_GT(c.stores_rejected, 0u);
  EXPECT_GT(c.stores_quarantined, 0u);
  EXPECT_GT(c.loads_quarantined, 0u);
  EXPECT_GT(c.slots_quarantined, 0u);
  expect_conserved(*m);
}

TEST(CacheContract, F12_SlotsAreConservedAfterAMixedSequenceLru) {
  run_mixed_sequence("lru");
}

TEST(CacheContract, F12_SlotsAreConservedAfterAMixedSequenceArc) {
  run_mixed_sequence("arc");
}

}  // namespace
}  // namespace kvtier
