#include "lru_policy.h"

#include <gtest/gtest.h>

#include "cache_test_util.h"

namespace kvtier {
namespace {

using cache_test::kAll;
using cache_test::key;
using cache_test::keys;

TEST(LruPolicy, EvictsLeastRecentlyInsertedFirst) {
  LruPolicy lru;
  for (uint64_t i : {1, 2, 3}) lru.insert(key(i));
  EXPECT_EQ(lru.choose_victims(2, kAll), keys({1, 2}));
  EXPECT_EQ(lru.choose_victims(5, kAll), keys({1, 2, 3}));
}

TEST(LruPolicy, TouchMakesAKeyMostRecent) {
  LruPolicy lru;
  for (uint64_t i : {1, 2, 3}) lru.insert(key(i));
  lru.touch(key(1));
  lru.touch(key(9));  // not resident: no effect
  EXPECT_EQ(lru.choose_victims(3, kAll), keys({2, 3, 1}));
  EXPECT_EQ(lru.size(), 3u);
}

TEST(LruPolicy, ChooseVictimsSkipsKeysThatAreNotEvictableAndChangesNothing) {
  LruPolicy lru;
  for (uint64_t i : {1, 2, 3, 4}) lru.insert(key(i));
  const auto odd = [](const ChunkKey& k) { return k.lo % 2 == 1; };
  EXPECT_EQ(lru.choose_victims(4, odd), keys({1, 3}));
  EXPECT_EQ(lru.size(), 4u);
  EXPECT_EQ(lru.choose_victims(4, kAll), keys({1, 2, 3, 4}));
}

TEST(LruPolicy, EvictAndRemoveForgetTheKey) {
  LruPolicy lru;
  for (uint64_t i : {1, 2, 3}) lru.insert(key(i));
  lru.evict(key(1));
  lru.remove(key(3));
  lru.remove(key(7));  // not resident: no effect
  EXPECT_FALSE(lru.contains(key(1)));
  EXPECT_FALSE(lru.contains(key(3)));
  EXPECT_EQ(lru.choose_victims(3, kAll), keys({2}));
}

TEST(LruPolicy, PreconditionViolationsThrow) {
  LruPolicy lru;
  lru.insert(key(1));
  EXPECT_THROW(lru.insert(key(1)), std::logic_error);
  EXPECT_THROW(lru.evict(key(2)), std::logic_error);
}

TEST(EvictionPolicyFactory, MakesLruAndArcAndRejectsOthers) {
  auto lru = make_eviction_policy("lru", 8);
  ASSERT_TRUE(lru.has_value());
  EXPECT_EQ((*lru)->name(), "lru");
  auto arc = make_eviction_policy("arc", 8);
  ASSERT_TRUE(arc.has_value());
  EXPECT_EQ((*arc)->name(), "arc");

  auto bad = make_eviction_policy("fifo", 8);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("'fifo'"), std::string::npos) << bad.error().message;

  auto zero = make_eviction_policy("arc", 0);
  ASSERT_FALSE(zero.has_value());
  EXPECT_EQ(zero.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
