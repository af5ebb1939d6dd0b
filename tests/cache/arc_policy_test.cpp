#include "arc_policy.h"

#include <gtest/gtest.h>

#include "cache_test_util.h"

namespace kvtier {
namespace {

using cache_test::kAll;
using cache_test::key;
using cache_test::keys;
using List = ArcPolicy::List;

// From an empty ArcPolicy(4) to p = 2, T1 = {3}, T2 = {4, 1, 2} (least recent first), B1 = {}:
// reached through two ghost hits in B1.
void adapt(ArcPolicy& arc) {
  for (uint64_t i : {1, 2, 3, 4}) arc.insert(key(i));
  arc.touch(key(4));
  arc.evict(key(1));
  arc.insert(key(1));
  arc.evict(key(2));
  arc.insert(key(2));
}

TEST(ArcPolicy, NewKeysEnterT1AndATouchMovesThemToT2) {
  ArcPolicy arc(4);
  arc.insert(key(1));
  arc.insert(key(2));
  EXPECT_EQ(arc.list_of(key(1)), List::kT1);
  arc.touch(key(1));
  EXPECT_EQ(arc.list_of(key(1)), List::kT2);
  arc.touch(key(1));
  EXPECT_EQ(arc.list_of(key(1)), List::kT2);
  EXPECT_EQ(arc.list_size(List::kT1), 1u);
  EXPECT_EQ(arc.list_size(List::kT2), 1u);
  EXPECT_EQ(arc.size(), 2u);
}

TEST(ArcPolicy, EvictsFromT1WhileItIsAboveTheTarget) {
  ArcPolicy arc(4);
  for (uint64_t i : {1, 2, 3}) arc.insert(key(i));
  arc.touch(key(1));  // T1 = {2, 3}, T2 = {1}, p = 0
  EXPECT_EQ(arc.choose_victims(3, kAll), keys({2, 3, 1}));
}

TEST(ArcPolicy, GhostHitInB1GrowsTheTargetAndEntersT2) {
  ArcPolicy arc(4);
  for (uint64_t i : {1, 2, 3, 4}) arc.insert(key(i));
  arc.evict(key(1));
  EXPECT_EQ(arc.list_of(key(1)), List::kB1);
  EXPECT_EQ(arc.target_t1(), 0u);
  arc.insert(key(1));
  EXPECT_EQ(arc.target_t1(), 1u);
  EXPECT_EQ(arc.list_of(key(1)), List::kT2);
  EXPECT_EQ(arc.list_size(List::kB1), 0u);
}

TEST(ArcPolicy, GhostHitInB2ShrinksTheTarget) {
  ArcPolicy arc(4);
  adapt(arc);
  ASSERT_EQ(arc.target_t1(), 2u);
  arc.evict(key(4));
  EXPECT_EQ(arc.list_of(key(4)), List::kB2);
  arc.insert(key(4));
  EXPECT_EQ(arc.target_t1(), 1u);
  EXPECT_EQ(arc.list_of(key(4)), List::kT2);
}

TEST(ArcPolicy, TheAdaptedTargetDecidesWhichListLosesAKey) {
  ArcPolicy arc(4);
  adapt(arc);
  ASSERT_EQ(arc.target_t1(), 2u);
  ASSERT_EQ(arc.list_size(List::kT1), 1u);
  // |T1| = 1 <= p: T2's least recent key goes, not T1's.
  EXPECT_EQ(arc.choose_victims(1, kAll), keys({4}));

  ArcPolicy fresh(4);  // p = 0, same T1 / T2 contents: T1's key goes first
  for (uint64_t i : {4, 1, 2, 3}) fresh.insert(key(i));
  for (uint64_t i : {4, 1, 2}) fresh.touch(key(i));
  EXPECT_EQ(fresh.choose_victims(1, kAll), keys({3}));
}

TEST(ArcPolicy, FallsBackToT1WhenT2HasNothingEvictable) {
  ArcPolicy arc(4);
  adapt(arc);  // prefers T2
  const auto t2_pinned = [&](const ChunkKey& k) { return arc.list_of(k) != List::kT2; };
  EXPECT_EQ(arc.choose_victims(1, t2_pinned), keys({3}));
  EXPECT_EQ(arc.choose_victims(4, t2_pinned), keys({3}));
}

TEST(ArcPolicy, FallsBackToT2WhenT1HasNothingEvictable) {
  ArcPolicy arc(4);
  for (uint64_t i : {1, 2, 3}) arc.insert(key(i));
  arc.touch(key(3));  // T1 = {1, 2}, T2 = {3}, p = 0: prefers T1
  const auto t1_pinned = [&](const ChunkKey& k) { return arc.list_of(k) != List::kT1; };
  EXPECT_EQ(arc.choose_victims(2, t1_pinned), keys({3}));
}

TEST(ArcPolicy, ChooseVictimsChangesNothing) {
  ArcPolicy arc(4);
  adapt(arc);
  const auto before = arc.choose_victims(4, kAll);
  EXPECT_EQ(before, keys({4, 1, 2, 3}));
  EXPECT_EQ(arc.choose_victims(4, kAll), before);
  EXPECT_EQ(arc.target_t1(), 2u);
  EXPECT_EQ(arc.size(), 4u);
  EXPECT_EQ(arc.list_size(List::kB1), 0u);
}

TEST(ArcPolicy, RemoveForgetsWithoutAGhost) {
  ArcPolicy arc(4);
  arc.insert(key(1));
  arc.remove(key(1));
  EXPECT_EQ(arc.list_of(key(1)), List::kNone);
  arc.insert(key(1));
  EXPECT_EQ(arc.list_of(key(1)), List::kT1);
  EXPECT_EQ(arc.target_t1(), 0u);
}

TEST(ArcPolicy, GhostListsAreBoundedByCapacity) {
  ArcPolicy arc(3);
  for (uint64_t i = 0; i < 20; ++i) {
    arc.insert(key(i));
    if (i % 2 == 0) arc.touch(key(i));  // half the ghosts come from T2
    arc.evict(key(i));
    const size_t b1 = arc.list_size(List::kB1), b2 = arc.list_size(List::kB2);
    EXPECT_LE(b1 + b2, 3u) << "after key " << i;
    EXPECT_LE(arc.list_size(List::kT1) + b1, 3u) << "after key " << i;
  }
  EXPECT_EQ(arc.list_of(key(0)), List::kNone);  // the oldest ghosts are forgotten
  EXPECT_NE(arc.list_of(key(19)), List::kNone);
}

TEST(ArcPolicy, TargetStaysWithinCapacity) {
  ArcPolicy arc(2);
  for (uint64_t round = 0; round < 6; ++round) {
    arc.insert(key(100 + round));
    arc.evict(key(100 + round));   // B1
    arc.insert(key(100 + round));  // B1 hit: p grows
    arc.remove(key(100 + round));
    EXPECT_LE(arc.target_t1(), 2u);
  }
  EXPECT_EQ(arc.target_t1(), 2u);
}

TEST(ArcPolicy, PreconditionViolationsThrow) {
  EXPECT_THROW(ArcPolicy(0), std::invalid_argument);
  ArcPolicy arc(2);
  arc.insert(key(1));
  EXPECT_THROW(arc.insert(key(1)), std::logic_error);
  EXPECT_THROW(arc.evict(key(2)), std::logic_error);
}

}  // namespace
}  // namespace kvtier
