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

// A host cache of 8 slots with a scripted tier below it, and the index over both.
struct Rig {
  HostDevice device;
  std::unique_ptr<HostPool> pool = std::move(HostPool::create(device, kSlotBytes, 8).value());
  std::unique_ptr<CacheManager> cache = cache_test::make_manager(8);
  FakeTier* fake = nullptr;
  std::unique_ptr<TierMover> mover;
  std::unique_ptr<TieredCacheIndex> index;

  Rig() {
    auto tier = std::make_unique<FakeTier>("fake");
    fake = tier.get();
    std::vector<MoverTier> tiers;
    tiers.push_back(
        MoverTier{std::make_unique<HealthCheckedTier>(std::move(tier), HealthOptions{}), 2s});
    mover = std::make_unique<TierMover>(*cache, *pool, std::move(tiers), TierMoverOptions{});
    index = std::make_unique<TieredCacheIndex>(*cache, *mover);
  }
};

TEST(TieredCacheIndex, LookupAheadBringsUpWhatATierHoldsBeforeTheLookupAsks) {
  Rig rig;
  TierMover& mover = *rig.mover;
  TieredCacheIndex& index = *rig.index;
  for (uint64_t id = 0; id < 3; ++id) rig.fake->insert(key(id), pattern(id));
  const std::vector<ChunkKey> keys = key_range(0, 3);

  index.lookup_ahead(keys);  // the request arrived; it is looked up in a later step
  ASSERT_TRUE(mover.wait_idle(10s));
  const LookupResult found = index.lookup(keys);
  EXPECT_EQ(found.hit_chunks, 3u) << "the prefetch the hint started is ready";
  EXPECT_FALSE(found.pending);
  EXPECT_EQ(mover.counters().prefetch_succeeded, 3u);
  // The hint is not a lookup of the cache's: one lookup of 3 chunks, all hits.
  const CacheCounters counted = rig.cache->counters();
  EXPECT_EQ(counted.hits, 3u);
  EXPECT_EQ(counted.misses + counted.pending_lookups, 0u);
}

// Write-behind (on_store) goes with the store's publication: an engine that never takes the
// cache's events (it does not mirror the cache) still has its chunks written down.
TEST(TieredCacheIndex, StoredChunksGoDownWithoutTheEngineTakingEvents) {
  Rig rig;
  std::optional<StorePlan> plan = rig.index->prepare_store(key_range(0, 2));
  ASSERT_TRUE(plan);
  for (size_t i = 0; i < 2; ++i) fill_pattern(rig.pool->slot_ptr(plan->slots[i]), kSlotBytes, i);
  rig.index->complete_store(plan->keys, Verdict::kSucceeded);
  ASSERT_TRUE(rig.mover->wait_idle(10s));
  for (uint64_t id = 0; id < 2; ++id) {
    ASSERT_TRUE(rig.fake->holds(key(id))) << id;
    EXPECT_EQ(rig.fake->bytes_of(key(id)), pattern(id));
  }
}

}  // namespace
}  // namespace kvtier::testing
