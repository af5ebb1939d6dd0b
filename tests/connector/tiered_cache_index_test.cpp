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

}  // namespace
}  // namespace kvtier::testing
