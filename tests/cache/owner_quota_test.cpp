// CacheManager's owners (owner_quota.h): a store past its owner's max_slots evicts that owner's
// own chunks first or is refused; a store never evicts another owner below its guaranteed share.
#include <gtest/gtest.h>

#include "cache_test_util.h"
#include "kvtier/cache/cache_manager.h"
#include "kvtier/cache/eviction_policy.h"

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

// A policy that counts how often a choice of victims asks whether a key is evictable.
class CountingPolicy : public EvictionPolicy {
 public:
  explicit CountingPolicy(std::unique_ptr<EvictionPolicy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  void insert(const ChunkKey& k) override { inner_->insert(k); }
  void touch(const ChunkKey& k) override { inner_->touch(k); }
  void remove(const ChunkKey& k) override { inner_->remove(k); }
  std::vector<ChunkKey> choose_victims(size_t n,
                                       const EvictablePredicate& evictable) const override {
    return inner_->choose_victims(n, [&](const ChunkKey& k) {
      ++asked;
      return evictable(k);
    });
  }
  void evict(const ChunkKey& k) override { inner_->evict(k); }
  bool contains(const ChunkKey& k) const override { return inner_->contains(k); }
  size_t size() const override { return inner_->size(); }

  mutable size_t asked = 0;

 private:
  std::unique_ptr<EvictionPolicy> inner_;
};

// Victims past an owner with one chunk to spare, all of whose chunks are the least recently
// used: the choice takes a few rounds, each a scan of the cache, not a round for each chunk of
// that owner (which, with the cache's lock held, stalled kvtierd for minutes at 10^5 chunks).
TEST(OwnerQuota, ChoosingVictimsPastAnOwnerWithLittleToSpareTakesFewRounds) {
  constexpr size_t kSlots = 2000;
  for (const char* name : {"lru", "arc"}) {
    SCOPED_TRACE(name);
    auto inner = make_eviction_policy(name, kSlots);
    ASSERT_TRUE(inner);
    auto counting = std::make_unique<CountingPolicy>(std::move(*inner));
    const CountingPolicy& policy = *counting;
    CacheManager m(kSlots, cache_test::kSlotBytes, std::move(counting));
    m.set_quota(kBob, OwnerQuota{.guaranteed_slots = kSlots - 2});
    std::vector<ChunkKey> bobs;
    for (uint64_t i = 0; i < kSlots - 1; ++i) bobs.push_back(key(i));
    store_for(m, kBob, bobs);  // one more than Bob's guaranteed share
    store_for(m, kAlice, keys({100000}));
    policy.asked = 0;
    auto plan = m.prepare_store_for(kAlice, keys({100001, 100002}));
    ASSERT_TRUE(plan.has_value());
    EXPECT_EQ(plan->evicted, keys({0, 100000})) << "Bob's one to spare, then Alice's own";
    EXPECT_LE(policy.asked, 4 * kSlots);
    EXPECT_EQ(m.slots_owned(kBob), kSlots - 2);
    expect_conserved(m);
  }
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
