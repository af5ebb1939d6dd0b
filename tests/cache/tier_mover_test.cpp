// TierMover between a real CacheManager + HostPool and tiers: scripted fakes for the mover's own
// logic, a real DiskTier and a real redis-server where the tiers' behaviour is the point.
#include "kvtier/cache/tier_mover.h"

#include <gtest/gtest.h>

#include <cstring>

#include "cache_test_util.h"
#include "kvtier/device/host_device.h"
#include "kvtier/tier/chunk_record.h"
#include "kvtier/tier/disk_tier.h"
#include "kvtier/tier/redis_tier.h"
#include "redis_process.h"
#include "support/byte_pattern.h"
#include "support/fake_tier.h"
#include "support/poll_until.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using cache_test::key;
using cache_test::key_range;
using cache_test::kSlotBytes;
using testing::FakeTier;
using testing::fill_pattern;
using testing::has_pattern;
using testing::poll_until;

constexpr Duration kTimeout = 2s;
constexpr Duration kIdle = 10s;

std::unique_ptr<HealthCheckedTier> healthy(std::unique_ptr<Tier> tier,
                                           Duration probe_initial = 1s) {
  return std::make_unique<HealthCheckedTier>(
      std::move(tier),
      HealthOptions{
          .probe_initial = probe_initial, .probe_max = 8 * probe_initial, .probe_timeout = 500ms});
}

std::vector<std::byte> pattern(uint64_t seed) {
  std::vector<std::byte> bytes(kSlotBytes);
  fill_pattern(bytes.data(), kSlotBytes, seed);
  return bytes;
}

// A host cache of `slots` slots and a mover over the given tiers.
struct Rig {
  HostDevice device;
  std::unique_ptr<HostPool> pool;
  std::unique_ptr<CacheManager> cache;
  std::unique_ptr<TierMover> mover;

  Rig(size_t slots, std::vector<MoverTier> tiers, TierMoverOptions options = {}) {
    pool = std::move(HostPool::create(device, kSlotBytes, slots).value());
    cache = cache_test::make_manager(slots);
    mover = std::make_unique<TierMover>(*cache, *pool, std::move(tiers), options);
  }
  ~Rig() {
    mover.reset();
    cache_test::expect_conserved(*cache);  // F12 after every test
  }

  // Stores chunk `id` (pattern seed id) in the host cache as the engine would; the cache tells
  // the mover as it publishes it.
  void store(std::initializer_list<uint64_t> ids) {
    for (uint64_t id : ids) {
      std::optional<StorePlan> plan = cache->prepare_store(std::vector{key(id)});
      ASSERT_TRUE(plan);
      mover->demote_evicted(*plan);
      for (SlotId slot : plan->slots) fill_pattern(pool->slot_ptr(slot), kSlotBytes, id);
      cache->complete_store(plan->keys, Verdict::kSucceeded);
    }
  }
  bool host_has_pattern(uint64_t id) {
    std::optional<SlotId> slot = cache->ready_slot(key(id));
    return slot && has_pattern(pool->slot_ptr(*slot), kSlotBytes, id);
  }
};

// Holds the fake's puts until the scope ends, so that a failed assertion cannot leave the
// mover's writer stuck when the rig is destroyed.
struct HeldPuts {
  explicit HeldPuts(FakeTier* fake) : fake(fake) { fake->hold_puts(true); }
  ~HeldPuts() { fake->hold_puts(false); }
  FakeTier* fake;
};

MoverTier fake_tier(FakeTier** out, std::string name = "fake", Duration probe_initial = 1s) {
  auto fake = std::make_unique<FakeTier>(std::move(name));
  *out = fake.get();
  return MoverTier{healthy(std::move(fake), probe_initial), kTimeout};
}

// Health-checked fakes, top first; each FakeTier* is set to its fake.
std::vector<MoverTier> fakes(std::initializer_list<std::pair<FakeTier**, std::string>> specs) {
  std::vector<MoverTier> tiers;
  for (const auto& [out, name] : specs) tiers.push_back(fake_tier(out, name));
  return tiers;
}

TEST(TierMover, WriteBehindPutsEveryStoredChunkToEveryTier) {
  testing::TempDir dir;
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers;
  tiers.push_back(
      {healthy(std::move(DiskTier::open({.directory = dir.path()}).value())), kTimeout});
  tiers.push_back(fake_tier(&fake));
  Tier& disk = *tiers[0].tier;
  Rig rig(8, std::move(tiers));
  rig.store({1, 2, 3});
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  for (uint64_t id : {1, 2, 3}) {
    ASSERT_TRUE(fake->holds(key(id)));
    EXPECT_EQ(fake->bytes_of(key(id)), pattern(id));
  }
  std::vector<std::byte> back(kSlotBytes);
  const ChunkKey k = key(2);
  const std::span<std::byte> dst(back);
  EXPECT_EQ((*disk.get(std::span(&k, 1), std::span(&dst, 1), kTimeout))[0], ChunkStatus::kOk);
  EXPECT_EQ(back, pattern(2));
  const TierMoverCounters c = rig.mover->counters();
  EXPECT_EQ(c.writes_enqueued, 3u);
  EXPECT_EQ(c.chunks_demoted, 3u);
  EXPECT_EQ(c.writes_dropped, 0u);
}

TEST(TierMover, ADiskTierWhoseSegmentsCannotHoldAChunkIsAnErrorNamingTheCapacityNeeded) {
  // A chunk of three pools' slots (12 KiB) is a record of 16 KiB; the smallest tier has four
  // segments of 8 KiB, so every write would fail.
  HostDevice device;
  std::vector<std::unique_ptr<HostPool>> pools;
  std::vector<const HostPool*> chunk;
  for (int p = 0; p < 3; ++p) {
    pools.push_back(std::move(HostPool::create(device, kSlotBytes, 8).value()));
    chunk.push_back(pools.back().get());
  }
  const std::unique_ptr<CacheManager> cache = cache_test::make_manager(8);
  testing::TempDir dir;
  std::vector<MoverTier> tiers;
  tiers.push_back(
      {healthy(std::move(
           DiskTier::open({.directory = dir.path(), .capacity_bytes = 32 << 10}).value())),
       kTimeout});
  try {
    TierMover mover(*cache, chunk, std::move(tiers), {});
    FAIL() << "a tier that can hold no chunk was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the capacity must be at least 65536 bytes"),
              std::string::npos)
        << e.what();
  }
}

TEST(TierMover, DemotedBytesAreCopiedBeforeTheSlotIsReused) {
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(4, std::move(tiers));
  std::optional<HeldPuts> held(fake);
  rig.store({1});
  ASSERT_TRUE(fake->wait_blocked_in_put(kIdle));  // the writer has the chunk, the tier waits
  // The slot is reused (evicted and rewritten) before the tier gets to the bytes.
  const SlotId slot = *rig.cache->ready_slot(key(1));
  std::memset(rig.pool->slot_ptr(slot), 0xee, kSlotBytes);
  held.reset();
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  EXPECT_EQ(fake->bytes_of(key(1)), pattern(1));
}

TEST(TierMover, FullWriteQueueDropsChunksInsteadOfBlocking) {
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(8, std::move(tiers), {.write_queue_chunks = 2, .write_batch_chunks = 1});
  std::optional<HeldPuts> held(fake);
  rig.store({1});
  ASSERT_TRUE(fake->wait_blocked_in_put(kIdle));  // chunk 1 left the queue; the tier is stuck
  rig.store({2, 3, 4, 5});                        // returns although the tier does not move
  TierMoverCounters c = rig.mover->counters();
  EXPECT_EQ(c.writes_enqueued, 3u);
  EXPECT_EQ(c.writes_dropped, 2u);
  held.reset();
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  EXPECT_TRUE(fake->holds(key(1)) && fake->holds(key(2)) && fake->holds(key(3)));
  EXPECT_FALSE(fake->holds(key(4)) || fake->holds(key(5)));
  EXPECT_EQ(rig.mover->counters().chunks_demoted, 3u);
}

TEST(TierMover, AStagedCopyIsReusedOnlyAfterItsPutReturns) {
  // The write queue's copies live in a fixed set of staging buffers. One handed out again while
  // a tier still reads it would demote another chunk's bytes under this key.
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(8, std::move(tiers), {.write_queue_chunks = 2, .write_batch_chunks = 1});
  std::optional<HeldPuts> held(fake);
  rig.store({1});
  ASSERT_TRUE(fake->wait_blocked_in_put(kIdle));  // chunk 1's copy is in the tier's hands
  rig.store({2, 3});                              // two more copies while it is
  held.reset();
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  for (uint64_t round = 0; round < 3; ++round) {  // and the buffers, given back, serve again
    rig.store({4 + 2 * round, 5 + 2 * round});
    ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  }
  for (uint64_t id = 1; id <= 9; ++id) {
    ASSERT_TRUE(fake->holds(key(id))) << id;
    EXPECT_EQ(fake->bytes_of(key(id)), pattern(id)) << id;
  }
  EXPECT_EQ(rig.mover->counters().writes_dropped, 0u);
}

TEST(TierMover, OnEvictDemotesEvictedChunksBeforeTheirSlotsAreRewritten) {
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(2, std::move(tiers), {.write_policy = WritePolicy::kOnEvict});
  rig.store({1, 2});
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  EXPECT_FALSE(fake->holds(key(1)));  // stored, not evicted: stays up
  rig.store({3});                     // evicts 1 (least recent) into the slot 3 now fills
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  ASSERT_TRUE(fake->holds(key(1)));
  EXPECT_EQ(fake->bytes_of(key(1)), pattern(1));
  EXPECT_FALSE(fake->holds(key(2)));
  EXPECT_TRUE(rig.host_has_pattern(3));
}

TEST(TierMover, LowerHitsCountTheConsecutiveKeysSomeTierHolds) {
  FakeTier* upper = nullptr;
  FakeTier* lower = nullptr;
  std::vector<MoverTier> tiers = fakes({{&upper, "upper"}, {&lower, "lower"}});
  Rig rig(4, std::move(tiers));
  for (uint64_t id : {0, 1, 4}) upper->insert(key(id), pattern(id));
  lower->insert(key(2), pattern(2));
  const std::vector<ChunkKey> keys = key_range(0, 6);
  EXPECT_EQ(rig.mover->lower_hits(keys, 0), 3u);
  EXPECT_EQ(rig.mover->lower_hits(keys, 1), 2u);
  EXPECT_EQ(rig.mover->lower_hits(keys, 3), 0u);
  EXPECT_EQ(rig.mover->lower_hits(keys, 4), 1u);
  EXPECT_EQ(rig.mover->lower_hits(keys, 6), 0u);
  EXPECT_TRUE(rig.mover->degraded_tiers().empty());
}

TEST(TierMover, H7_LowerHitsSkipADownTierAndNameIt) {
  FakeTier* upper = nullptr;
  FakeTier* lower = nullptr;
  std::vector<MoverTier> tiers = fakes({{&upper, "upper"}, {&lower, "lower"}});
  Rig rig(4, std::move(tiers));
  for (uint64_t id : {0, 1}) upper->insert(key(id), pattern(id));
  lower->insert(key(2), pattern(2));
  lower->set_unreachable(true);
  EXPECT_EQ(rig.mover->lower_hits(key_range(0, 4), 0), 2u);  // no error: the prefix shrinks
  EXPECT_EQ(rig.mover->degraded_tiers(), std::vector<std::string>{"lower"});
  const std::vector<TierMetrics> m = rig.mover->tier_metrics();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].state, TierState::kUp);
  EXPECT_EQ(m[1].state, TierState::kDown);
  EXPECT_EQ(m[1].counters.errors, 1u);
}

TEST(TierMover, H7_ATierWithAPartDownIsNamedByItsPart) {
  FakeTier* upper = nullptr;
  FakeTier* lower = nullptr;
  std::vector<MoverTier> tiers = fakes({{&upper, "upper"}, {&lower, "redis"}});
  Rig rig(4, std::move(tiers));
  lower->insert(key(0), pattern(0));
  lower->insert(key(1), pattern(1));
  lower->set_down_parts({{.name = "10.0.0.7:6379", .error = "refused"}}, {key(1)});
  EXPECT_EQ(rig.mover->lower_hits(key_range(0, 2), 0), 1u);  // key 1's node is down: a miss
  EXPECT_EQ(rig.mover->degraded_tiers(), std::vector<std::string>{"redis/10.0.0.7:6379"});
  EXPECT_EQ(rig.mover->tier_metrics()[1].state, TierState::kDegraded);
  // The mover's own ticks let the tier probe the part; it comes back without any call.
  lower->recover_parts_on_probe(true);
  ASSERT_TRUE(poll_until([&] { return rig.mover->degraded_tiers().empty(); }, 5000ms));
  EXPECT_EQ(rig.mover->lower_hits(key_range(0, 2), 0), 2u);
}

TEST(TierMover, PrefetchMakesKeysPendingThenPublishesThem) {
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(8, std::move(tiers));
  for (uint64_t id = 0; id < 4; ++id) fake->insert(key(id), pattern(id));
  const std::vector<ChunkKey> keys = key_range(0, 4);
  ASSERT_EQ(rig.mover->prefetch(keys), 4u);
  const LookupResult pending = rig.cache->lookup(keys);
  EXPECT_EQ(pending.hit_chunks, 0u);
  EXPECT_TRUE(pending.pending);  // the connector says "ask again later"
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  EXPECT_EQ(rig.mover->poll(), 4u);
  EXPECT_EQ(rig.cache->lookup(keys).hit_chunks, 4u);
  for (uint64_t id = 0; id < 4; ++id) EXPECT_TRUE(rig.host_has_pattern(id)) << id;
  // Chunks that came from a tier are not written down again.
  EXPECT_EQ(rig.mover->counters().writes_enqueued, 0u);
  EXPECT_EQ(rig.mover->counters().prefetch_succeeded, 4u);
}

TEST(TierMover, PrefetchesQueuedWhileOneIsReadAreReadTogetherInOneCall) {
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(8, std::move(tiers));
  for (uint64_t id = 0; id < 6; ++id) fake->insert(key(id), pattern(id));
  {
    struct HeldGets {
      explicit HeldGets(FakeTier* fake) : fake(fake) { fake->hold_gets(true); }
      ~HeldGets() { fake->hold_gets(false); }
      FakeTier* fake;
    } held(fake);
    ASSERT_EQ(rig.mover->prefetch(key_range(0, 2)), 2u);
    ASSERT_TRUE(fake->wait_blocked_in_get(kIdle));
    // Two requests arrive while the first one's chunks are being read.
    ASSERT_EQ(rig.mover->prefetch(key_range(2, 2)), 2u);
    ASSERT_EQ(rig.mover->prefetch(key_range(4, 2)), 2u);
  }
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  EXPECT_EQ(rig.mover->poll(), 6u);
  EXPECT_EQ(fake->get_sizes(), (std::vector<size_t>{2, 4}))
      << "the two queued prefetches' reads go in one call, in flight together";
  for (uint64_t id = 0; id < 6; ++id) EXPECT_TRUE(rig.host_has_pattern(id)) << id;
}

TEST(TierMover, PrefetchTakesEachChunkFromTheFirstTierThatHasIt) {
  FakeTier* upper = nullptr;
  FakeTier* lower = nullptr;
  std::vector<MoverTier> tiers = fakes({{&upper, "upper"}, {&lower, "lower"}});
  Rig rig(8, std::move(tiers));
  upper->insert(key(0), pattern(0));
  upper->insert(key(1), std::vector<std::byte>(7));  // wrong size: the fake says kCorrupt
  lower->insert(key(1), pattern(1));
  lower->insert(key(2), pattern(2));
  ASSERT_EQ(rig.mover->prefetch(key_range(0, 3)), 3u);
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  rig.mover->poll();
  for (uint64_t id = 0; id < 3; ++id) EXPECT_TRUE(rig.host_has_pattern(id)) << id;
}

TEST(TierMover, F3_PrefetchOfAMissingOrDownChunkIsNeverPublished) {
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(8, std::move(tiers));
  fake->insert(key(0), pattern(0));
  ASSERT_EQ(rig.mover->prefetch(key_range(0, 2)), 2u);  // key 1 is nowhere
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  rig.mover->poll();
  EXPECT_EQ(rig.cache->state(key(0)), LookupState::kHit);
  EXPECT_EQ(rig.cache->state(key(1)), LookupState::kMiss);
  fake->set_unreachable(true);
  ASSERT_EQ(rig.mover->prefetch(key_range(5, 2)), 2u);
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  rig.mover->poll();
  EXPECT_EQ(rig.cache->state(key(5)), LookupState::kMiss);
  EXPECT_EQ(rig.cache->state(key(6)), LookupState::kMiss);
  const std::vector<CacheEvent> events = rig.cache->take_events();
  ASSERT_EQ(events.size(), 1u);  // only key 0 was published
  EXPECT_EQ(events[0].keys, std::vector{key(0)});
  EXPECT_EQ(rig.cache->counters().stores_failed, 3u);
  EXPECT_EQ(rig.mover->counters().prefetch_failed, 3u);
}

// An engine's host cache over `ranks` pools of `slots` slots each, and a mover over a fake.
struct RanksRig {
  HostDevice device;
  std::vector<std::unique_ptr<HostPool>> pools;
  std::unique_ptr<CacheManager> cache;
  FakeTier* fake = nullptr;
  std::unique_ptr<TierMover> mover;

  RanksRig(size_t ranks, size_t slots, TierMoverOptions options = {}) {
    std::vector<const HostPool*> views;
    for (size_t r = 0; r < ranks; ++r) {
      pools.push_back(std::move(HostPool::create(device, kSlotBytes, slots).value()));
      views.push_back(pools.back().get());
    }
    cache = cache_test::make_manager(slots);
    mover = std::make_unique<TierMover>(*cache, views, fakes({{&fake, "fake"}}), options);
  }
  ~RanksRig() {
    mover.reset();
    cache_test::expect_conserved(*cache);
  }
};

// An engine's host cache over several ranks: a chunk is slot s of every rank's pool, rank 0
// first, in the tiers as one chunk.
TEST(TierMover, ChunkOfSeveralPoolsIsEveryPoolsShareInOrder) {
  RanksRig rig(3, 4);
  const auto& pools = rig.pools;
  CacheManager* cache = rig.cache.get();
  FakeTier* fake = rig.fake;
  TierMover* mover = rig.mover.get();
  std::optional<StorePlan> plan = cache->prepare_store(std::vector{key(1)});
  ASSERT_TRUE(plan);
  for (size_t r = 0; r < 3; ++r)
    fill_pattern(pools[r]->slot_ptr(plan->slots[0]), kSlotBytes, 10 + r);
  cache->complete_store(plan->keys, Verdict::kSucceeded);
  ASSERT_TRUE(mover->wait_idle(kIdle));
  ASSERT_TRUE(fake->holds(key(1)));
  std::vector<std::byte> whole;
  for (uint64_t r = 0; r < 3; ++r) {
    const std::vector<std::byte> share = pattern(10 + r);
    whole.insert(whole.end(), share.begin(), share.end());
  }
  EXPECT_EQ(fake->bytes_of(key(1)), whole);

  // Read back into other slots: each rank's pool gets its own share.
  fake->insert(key(2), whole);
  ASSERT_EQ(mover->prefetch(std::vector{key(2)}), 1u);
  ASSERT_TRUE(mover->wait_idle(kIdle));
  EXPECT_EQ(mover->poll(), 1u);
  const std::optional<SlotId> slot = cache->ready_slot(key(2));
  ASSERT_TRUE(slot);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_TRUE(has_pattern(pools[r]->slot_ptr(*slot), kSlotBytes, 10 + r)) << "rank " << r;
  }
}

// A read-through as long as a request's missing prefix is read in calls of
// prefetch_batch_bytes: each stays inside the tier's timeout, and a chunk of several pools is
// staged one batch at a time, not all of them at once.
TEST(TierMover, ALongReadThroughIsReadInBatchesIntoEveryPool) {
  RanksRig rig(2, 8, TierMoverOptions{.prefetch_batch_bytes = 3 * 2 * kSlotBytes});
  const auto& pools = rig.pools;
  CacheManager* cache = rig.cache.get();
  FakeTier* fake = rig.fake;
  TierMover* mover = rig.mover.get();
  for (uint64_t id = 0; id < 8; ++id) {
    std::vector<std::byte> whole = pattern(100 + id);
    const std::vector<std::byte> second = pattern(200 + id);
    whole.insert(whole.end(), second.begin(), second.end());
    fake->insert(key(id), whole);
  }
  ASSERT_EQ(mover->prefetch(key_range(0, 8)), 8u);
  ASSERT_TRUE(mover->wait_idle(kIdle));
  EXPECT_EQ(mover->poll(), 8u);
  EXPECT_EQ(fake->get_sizes(), (std::vector<size_t>{3, 3, 2}));
  for (uint64_t id = 0; id < 8; ++id) {
    const std::optional<SlotId> slot = cache->ready_slot(key(id));
    ASSERT_TRUE(slot) << id;
    EXPECT_TRUE(has_pattern(pools[0]->slot_ptr(*slot), kSlotBytes, 100 + id)) << id;
    EXPECT_TRUE(has_pattern(pools[1]->slot_ptr(*slot), kSlotBytes, 200 + id)) << id;
  }
}

TEST(TierMover, F3_ReadThroughFetchesWhatATierHoldsAndNeverRetriesAFailedKey) {
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(8, std::move(tiers));
  rig.store({0});
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  fake->insert(key(1), pattern(1));
  fake->insert(key(2), std::vector<std::byte>(7));  // corrupt: the fake says kCorrupt
  const std::vector<ChunkKey> keys = key_range(0, 4);
  // Key 0 is a host hit; 1 and 2 are in the tier (3 is nowhere): they are fetched.
  EXPECT_TRUE(rig.mover->read_through(keys, 1));
  EXPECT_TRUE(rig.cache->lookup(keys).pending);
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  rig.mover->poll();
  EXPECT_EQ(rig.cache->lookup(keys).hit_chunks, 2u);
  EXPECT_TRUE(rig.host_has_pattern(1));
  EXPECT_EQ(rig.cache->state(key(2)), LookupState::kMiss) << "a corrupt chunk is never published";
  // The tier still says it holds key 2: without the memory of the failed prefetch every lookup
  // would be pending forever.
  EXPECT_FALSE(rig.mover->read_through(keys, 2));
  EXPECT_EQ(rig.mover->counters().prefetch_keys, 2u);
}

// Only the keys a read-through reserved count as tried: one it asked for that the host cache
// already held (so it was never fetched) is fetched once it left the host cache.
TEST(TierMover, ReadThroughRemembersOnlyTheKeysItFetched) {
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(8, std::move(tiers));
  rig.store({0, 2});  // written behind to the tier as well
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  fake->insert(key(1), pattern(1));
  const std::vector<ChunkKey> keys = key_range(0, 3);
  // Key 0 is a host hit; the tier holds 1 and 2, and only 1 is absent from the host cache.
  ASSERT_TRUE(rig.mover->read_through(keys, 1));
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  EXPECT_EQ(rig.mover->poll(), 1u);
  rig.cache->reset();  // the host cache loses everything, key 2 among it
  EXPECT_TRUE(rig.mover->read_through(std::vector{key(2)}, 0))
      << "key 2 was never fetched, and the tier holds it intact";
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  EXPECT_EQ(rig.mover->poll(), 1u);
  EXPECT_TRUE(rig.host_has_pattern(2));
}

TEST(TierMover, DestroyedMidPrefetchLeavesNothingPending) {
  FakeTier* fake = nullptr;
  std::vector<MoverTier> tiers = fakes({{&fake, "fake"}});
  Rig rig(8, std::move(tiers));
  for (uint64_t id = 0; id < 8; ++id) fake->insert(key(id), pattern(id));
  for (uint64_t id = 0; id < 8; ++id) rig.mover->prefetch(std::vector{key(id)});
  rig.mover.reset();  // F12: no slot stays pending (checked again by ~Rig)
  EXPECT_EQ(rig.cache->counters().slots_pending, 0u);
}

// ---- against a real redis-server ----

struct RedisRig {
  testing::TempDir dir;
  std::unique_ptr<bench::RedisServerProcess> server;
  RedisTier* redis = nullptr;

  RedisRig() {
    auto s = bench::RedisServerProcess::start({.directory = dir.path()}, 10s);
    EXPECT_TRUE(s) << s.error().to_string();
    if (s) server = std::move(*s);
  }
  MoverTier tier(Duration probe_initial = 1s) {
    auto t =
        RedisTier::open({.url = server->url(),
                         .key_prefix = redis_key_prefix({.model = "m", .layout_fingerprint = 1})});
    redis = t->get();
    return MoverTier{healthy(std::move(*t), probe_initial), 500ms};
  }
};

TEST(TierMoverRedis, F3_CorruptChunkInRedisIsNeverPublished) {
  RedisRig r;
  ASSERT_TRUE(r.server);
  std::vector<MoverTier> tiers;
  tiers.push_back(r.tier());
  Rig rig(8, std::move(tiers));
  rig.store({0, 1, 2});
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  ASSERT_EQ(rig.mover->counters().chunks_demoted, 3u);
  // Flip one payload byte of chunk 1 in Redis, then make the host forget all three.
  const std::string offset = std::to_string(kChunkRecordHeaderBytes + 10);
  ASSERT_TRUE(
      r.server->command({"SETRANGE", r.redis->redis_key(key(1)), offset, "\x7f"}, kTimeout));
  rig.cache->reset();
  rig.cache->take_events();
  ASSERT_EQ(rig.mover->lower_hits(key_range(0, 3), 0), 3u);  // present (not yet verified)
  ASSERT_EQ(rig.mover->prefetch(key_range(0, 3)), 3u);
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  rig.mover->poll();
  EXPECT_EQ(rig.cache->state(key(0)), LookupState::kHit);
  EXPECT_EQ(rig.cache->state(key(1)), LookupState::kMiss);  // never readable
  EXPECT_EQ(rig.cache->state(key(2)), LookupState::kHit);
  EXPECT_TRUE(rig.host_has_pattern(0));
  EXPECT_TRUE(rig.host_has_pattern(2));
  EXPECT_EQ(rig.cache->lookup(key_range(0, 3)).hit_chunks, 1u);
  EXPECT_EQ(rig.mover->tier_metrics()[0].counters.corrupt, 1u);
  EXPECT_EQ(rig.mover->counters().prefetch_failed, 1u);
}

TEST(TierMoverRedis, H7_RedisKilledMidRunDegradesThenRecoversOnItsOwn) {
  RedisRig r;
  ASSERT_TRUE(r.server);
  std::vector<MoverTier> tiers;
  tiers.push_back(r.tier(/*probe_initial=*/20ms));
  Rig rig(16, std::move(tiers), {.health_tick = 5ms});
  rig.store({0, 1, 2, 3});
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  ASSERT_EQ(rig.mover->lower_hits(key_range(0, 4), 0), 4u);
  const LookupResult before = rig.cache->lookup(key_range(0, 8));

  r.server->kill();
  rig.store({4, 5});  // the engine goes on storing; the write to Redis fails in the background
  ASSERT_TRUE(poll_until([&] { return !rig.mover->degraded_tiers().empty(); }, 5000ms));
  EXPECT_EQ(rig.mover->degraded_tiers(), std::vector<std::string>{"redis"});
  EXPECT_EQ(rig.mover->lower_hits(key_range(0, 4), 0), 0u);  // skipped: a miss, not a failure
  rig.store({6, 7});  // writes while DOWN are skipped, never block
  const LookupResult during = rig.cache->lookup(key_range(0, 8));
  EXPECT_EQ(during.hit_chunks, 8u);  // the host cache serves as before, plus the new chunks
  EXPECT_EQ(before.hit_chunks, 4u);
  for (uint64_t id = 0; id < 8; ++id) EXPECT_TRUE(rig.host_has_pattern(id)) << id;

  ASSERT_TRUE(r.server->restart(10s));
  // Nothing calls the tier: the mover's own probes find it back.
  ASSERT_TRUE(poll_until([&] { return rig.mover->degraded_tiers().empty(); }, 5000ms));
  rig.store({8});
  ASSERT_TRUE(rig.mover->wait_idle(kIdle));
  EXPECT_EQ(r.server->command({"EXISTS", r.redis->redis_key(key(8))}, kTimeout).value(), "1");
  EXPECT_EQ(rig.mover->lower_hits(key_range(8, 1), 0), 1u);
  EXPECT_GE(rig.mover->tier_metrics()[0].counters.skipped_calls, 1u);
}

}  // namespace
}  // namespace kvtier
