// CacheManager's owners (owner_quota.h): a store past its owner's max_slots evicts that owner's
// own chunks first or is refused; a store never evicts another owner below its guaranteed share.
#include <gtest/gtest.h>

#include "cache_test_util.h"
#include "kvtier/cache/cache_manager.h"

namespace kvtier {
namespace {

using cache_test::expect_conserved;
using cache_test::key;
using cache_test::keys;
using cache_test::make_manager;

constexpr OwnerId kAlice = 1;
constexpr OwnerId kBob = 2;

void store_for(CacheManager& m, OwnerId owner, const std::vector<ChunkKey>& ks) {
  auto plan = m.prepare_store_for(owner, ks);
  ASSERT_TRUE(plan.has_value());
  m.complete_store(plan->keys, Verdict::kSucceeded);
}

TEST(OwnerQuota, KeysAreChargedToTheStoringOwnerUntilTheyLeave) {
  auto m = make_manager(8, "arc");
  store_for(*m, kAlice, keys({1, 2}));
  store_for(*m, kBob, keys({3}));
  EXPECT_EQ(m->slots_owned(kAlice), 2u);
  EXPECT_EQ(m->slots_owned(kBob), 1u);
  auto failed = m->prepare_store_for(kBob, keys({4}));
  ASSERT_TRUE(failed);
  EXPECT_EQ(m->slots_owned(kBob), 2u);  // pending counts
  m->complete_store(failed->keys, Verdict::kFailed);
  EXPECT_EQ(m->slots_owned(kBob), 1u);
  m->reset();
  EXPECT_EQ(m->slots_owned(kAlice), 0u);
  EXPECT_EQ(m->slots_owned(kBob), 0u);
  expect_conserved(*m);
}

TEST(OwnerQuota, AnOwnerAtItsMaxEvictsItsOwnChunksFirst) {
  auto m = make_manager(8);
  m->set_quota(kAlice, OwnerQuota{.max_slots = 3});
  store_for(*m, kBob, keys({10}));  // Bob's chunk is the least recently used
  store_for(*m, kAlice, keys({1, 2, 3}));
  auto plan = m->prepare_store_for(kAlice, keys({4}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->evicted, keys({1}));  // its own oldest, although slots are free
  EXPECT_EQ(m->state(key(10)), LookupState::kHit);
  EXPECT_EQ(m->slots_owned(kAlice), 3u);
  expect_conserved(*m);
}

TEST(OwnerQuota, AnOwnerAtItsMaxWithNothingOfItsOwnToEvictIsRefused) {
  auto m = make_manager(8);
  m->set_quota(kAlice, OwnerQuota{.max_slots = 2});
  store_for(*m, kAlice, keys({1, 2}));
  ASSERT_TRUE(m->prepare_load(keys({1, 2})));  // pinned: not evictable
  auto refused = m->prepare_store_for(kAlice, keys({3}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), StoreRefusal::kOverQuota);
  EXPECT_FALSE(m->prepare_store_for(kAlice, keys({5, 6, 7})));  // more than max_slots at once
  EXPECT_EQ(m->counters().stores_rejected, 2u);
  EXPECT_EQ(m->state(key(3)), LookupState::kMiss);  // nothing changed
  m->complete_load(keys({1, 2}));
  expect_conserved(*m);
}

TEST(OwnerQuota, AStoreNeverEvictsAnotherOwnerBelowItsGuaranteedShare) {
  auto m = make_manager(6);
  m->set_quota(kBob, OwnerQuota{.guaranteed_slots = 2});
  store_for(*m, kBob, keys({10, 11, 12}));  // the least recently used: the policy's first victims
  store_for(*m, kAlice, keys({1, 2, 3}));
  // Alice needs 3 slots: Bob can spare one (3 > 2), the other two are Alice's own.
  auto plan = m->prepare_store_for(kAlice, keys({4, 5, 6}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->evicted, keys({10, 1, 2}));
  EXPECT_EQ(m->slots_owned(kBob), 2u);
  m->complete_store(plan->keys, Verdict::kSucceeded);
  // Nothing of Alice's is evictable (pinned) and Bob is at his share: no room.
  ASSERT_TRUE(m->prepare_load(keys({3, 4, 5, 6})));
  auto refused = m->prepare_store_for(kAlice, keys({7}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), StoreRefusal::kNoRoom);
  EXPECT_EQ(m->state(key(11)), LookupState::kHit);
  EXPECT_EQ(m->state(key(12)), LookupState::kHit);
  // Bob himself may evict his own chunks.
  auto own = m->prepare_store_for(kBob, keys({13}));
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->evicted, keys({11}));
  m->complete_load(keys({3, 4, 5, 6}));
  expect_conserved(*m);
}

TEST(OwnerQuota, WithoutQuotasEvictionIsThePolicysOrder) {
  auto m = make_manager(3);
  store_for(*m, kBob, keys({10}));
  store_for(*m, kAlice, keys({1, 2}));
  auto plan = m->prepare_store_for(kAlice, keys({3, 4}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->evicted, keys({10, 1}));
  expect_conserved(*m);
}

}  // namespace
}  // namespace kvtier
