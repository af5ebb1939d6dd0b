// TieredCacheIndex over a real CacheManager, HostPool and TierMover, with a scripted tier below.
#include "kvtier/connector/tiered_cache_index.h"

#include <gtest/gtest.h>

#include "cache/cache_test_util.h"
#include "kvtier/device/host_device.h"
#include "support/byte_pattern.h"
#include "support/fake_tier.h"

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;
using cache_test::key;
using cache_test::key_range;
using cache_test::kSlotBytes;

std::vector<std::byte> pattern(uint64_t seed) {
  std::vector<std::byte> bytes(kSlotBytes);
  fill_pattern(bytes.data(), kSlotBytes, seed);
  return bytes;
}

TEST(TieredCacheIndex, LookupAheadBringsUpWhatATierHoldsBeforeTheLookupAsks) {
  HostDevice device;
  auto pool = std::move(HostPool::create(device, kSlotBytes, 8).value());
  auto cache = cache_test::make_manager(8);
  auto fake = std::make_unique<FakeTier>("fake");
  FakeTier& tier = *fake;
  std::vector<MoverTier> tiers;
  tiers.push_back(
      MoverTier{std::make_unique<HealthCheckedTier>(std::move(fake), HealthOptions{}), 2s});
  TierMover mover(*cache, *pool, std::move(tiers), TierMoverOptions{});
  TieredCacheIndex index(*cache, mover);
  for (uint64_t id = 0; id < 3; ++id) tier.insert(key(id), pattern(id));
  const std::vector<ChunkKey> keys = key_range(0, 3);

  index.lookup_ahead(keys);  // the request arrived; it is looked up in a later step
  ASSERT_TRUE(mover.wait_idle(10s));
  const LookupResult found = index.lookup(keys);
  EXPECT_EQ(found.hit_chunks, 3u) << "the prefetch the hint started is ready";
  EXPECT_FALSE(found.pending);
  EXPECT_EQ(mover.counters().prefetch_succeeded, 3u);
}

// Write-behind (on_store) goes with the store's publication: an engine that never takes the
// cache's events (it does not mirror the cache) still has its chunks written down.
TEST(TieredCacheIndex, StoredChunksGoDownWithoutTheEngineTakingEvents) {
  HostDevice device;
  auto pool = std::move(HostPool::create(device, kSlotBytes, 8).value());
  auto cache = cache_test::make_manager(8);
  auto fake = std::make_unique<FakeTier>("fake");
  FakeTier& tier = *fake;
  std::vector<MoverTier> tiers;
  tiers.push_back(
      MoverTier{std::make_unique<HealthCheckedTier>(std::move(fake), HealthOptions{}), 2s});
  TierMover mover(*cache, *pool, std::move(tiers), TierMoverOptions{});
  TieredCacheIndex index(*cache, mover);
  std::optional<StorePlan> plan = index.prepare_store(key_range(0, 2));
  ASSERT_TRUE(plan);
  for (size_t i = 0; i < 2; ++i) fill_pattern(pool->slot_ptr(plan->slots[i]), kSlotBytes, i);
  index.complete_store(plan->keys, Verdict::kSucceeded);
  ASSERT_TRUE(mover.wait_idle(10s));
  for (uint64_t id = 0; id < 2; ++id) {
    ASSERT_TRUE(tier.holds(key(id))) << id;
    EXPECT_EQ(tier.bytes_of(key(id)), pattern(id));
  }
}

}  // namespace
}  // namespace kvtier::testing
