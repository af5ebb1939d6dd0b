// The transfer engine and the cache manager together, the way a worker uses them: prepare a
// store, copy, then publish or free by the transfer's outcome; pin, load, unpin. Faults come
// from the injector; every test ends by checking both audits (F12).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kvtier/cache/cache_manager.h"
#include "kvtier/cache/host_pool.h"
#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/device/host_device.h"
#include "kvtier/transfer/transfer_engine.h"
#include "support/byte_pattern.h"

namespace kvtier {
namespace {

using testing::fill_pattern;
using testing::has_pattern;

constexpr uint32_t kBlocks = 64;
constexpr uint32_t kSlots = 8;

struct Harness {
  explicit Harness(FaultPlan plan) : fault(host, std::move(plan)) {
    layout.device_layout = DeviceLayout::kCrossLayer;
    layout.groups.push_back(KvGroup{.layers = 2,
                                    .kv_heads = 1,
                                    .head_dim = 8,
                                    .dtype_bytes = 2,
                                    .block_size = 4,
                                    .blocks_per_chunk = 2});
    kv = fault.allocate(kBlocks * block_bytes());
    pool = HostPool::create(fault, layout.max_chunk_bytes(), kSlots).value();
    cache = std::make_unique<CacheManager>(kSlots, pool->slot_bytes(),
                                           make_eviction_policy("lru", kSlots).value());
    compute = fault.create_stream();
    engine = std::make_unique<TransferEngine>(
        fault, layout, KvCacheAddresses{{GroupCacheAddresses{{kv}, kBlocks}}},
        HostSlots{pool->slot_address(0), pool->slot_bytes(), kSlots}, compute,
        TransferOptions{.coalesce = false});
  }
  ~Harness() {
    engine.reset();
    fault.release_hangs();
    host.quiesce();
  }

  size_t block_bytes() const { return layout.groups[0].block_bytes(); }
  std::byte* block(uint32_t b) const {
    return reinterpret_cast<std::byte*>(kv + b * block_bytes());
  }
  static ChunkKey key(uint64_t i) { return ChunkKey{i, 0xabc}; }

  // Chunk i is blocks (2i, 2i+1), holding pattern seeds (1000i, 1000i+1).
  void compute_chunk(uint64_t i) const {
    for (uint32_t j = 0; j < 2; ++j) fill_pattern(block(2 * i + j), block_bytes(), 1000 * i + j);
  }
  bool slot_holds_chunk(SlotId slot, uint64_t i) const {
    for (uint32_t j = 0; j < 2; ++j) {
      if (!has_pattern(pool->slot_ptr(slot) + j * block_bytes(), block_bytes(), 1000 * i + j)) {
        return false;
      }
    }
    return true;
  }

  std::vector<TransferResult> drain() {
    std::vector<TransferResult> all;
    for (int i = 0; i < 16 && engine->in_flight() > 0; ++i) {
      host.quiesce();
      for (auto& r : engine->poll()) all.push_back(std::move(r));
    }
    return all;
  }

  void expect_audits() const {
    const Status c = cache->audit();
    EXPECT_TRUE(c) << c.error().message;
    const Status e = engine->audit();
    EXPECT_TRUE(e) << e.error().message;
  }

  HostDevice host;
  FaultInjectingDevice fault;
  KvLayout layout;
  DeviceAddress kv = 0;
  std::unique_ptr<HostPool> pool;
  std::unique_ptr<CacheManager> cache;
  StreamHandle compute;
  std::unique_ptr<TransferEngine> engine;
};

// Applies a store outcome the way the worker side must.
void complete(CacheManager& cache, const ChunkKey& k, Outcome o) {
  const ChunkKey keys[] = {k};
  if (o == Outcome::kCompleted) cache.complete_store(keys, Verdict::kSucceeded);
  if (o == Outcome::kFailed) cache.complete_store(keys, Verdict::kFailed);
  if (o == Outcome::kUnprovable) cache.quarantine_store(keys);
}

TEST(StoreLoadContract, F3_StoreThatFailedMidBatchIsNeverPublished) {
  // Descriptor 1 of 2 fails after descriptor 0 landed: the slot holds half a chunk.
  Harness h(FaultPlan::rules({FaultRule{.call = 0, .fail_at = 1}}));
  h.compute_chunk(0);
  const ChunkKey keys[] = {Harness::key(0)};
  auto plan = h.cache->prepare_store(keys).value();
  h.engine->submit(
      1, Direction::kStore,
      std::vector<ChunkTransfer>{{.group = 0, .blocks = {0, 1}, .slot = plan.slots[0]}});
  auto results = h.drain();
  ASSERT_EQ(results.size(), 1u);
  ASSERT_EQ(results[0].outcome, Outcome::kFailed);
  complete(*h.cache, keys[0], results[0].outcome);
  EXPECT_EQ(h.cache->lookup(keys).hit_chunks, 0u);
  EXPECT_FALSE(h.cache->prepare_load(keys).has_value());
  for (const CacheEvent& e : h.cache->take_events()) {
    EXPECT_NE(e.kind, CacheEventKind::kStored) << "a failed store emitted a stored event";
  }
  EXPECT_EQ(h.cache->counters().slots_free, kSlots);
  h.expect_audits();
}

TEST(StoreLoadContract, F7_UnprovableStoreKeepsItsSlotForeverAndFailStops) {
  Harness h(FaultPlan::rules({FaultRule{.call = 0, .record_fails = true}}));
  h.compute_chunk(0);
  const ChunkKey keys[] = {Harness::key(0)};
  auto plan = h.cache->prepare_store(keys).value();
  const SlotId held = plan.slots[0];
  h.engine->submit(1, Direction::kStore,
                   std::vector<ChunkTransfer>{{.group = 0, .blocks = {0, 1}, .slot = held}});
  auto results = h.drain();
  ASSERT_EQ(results.at(0).outcome, Outcome::kUnprovable);
  complete(*h.cache, keys[0], results[0].outcome);
  EXPECT_TRUE(h.engine->fail_stopped());
  EXPECT_EQ(h.cache->counters().quarantined_bytes, h.pool->slot_bytes());
  // Under full eviction pressure the held slot is never handed out again.
  for (uint64_t round = 1; round <= 3 * kSlots; ++round) {
    const ChunkKey k[] = {Harness::key(round)};
    auto p = h.cache->prepare_store(k);
    ASSERT_TRUE(p.has_value());
    EXPECT_NE(p->slots.at(0), held);
    h.cache->complete_store(k, Verdict::kSucceeded);
  }
  EXPECT_EQ(h.cache->counters().slots_quarantined, 1u);
  h.expect_audits();
}

TEST(StoreLoadContract,
     F12_RandomizedStoresAndLoadsUnderFaultsConserveLeasesAndPublishOnlyGoodBytes) {
  Harness h(FaultPlan::random(
      2024, RandomFaultRates{.submit_failure = 0.15, .latched_error = 0.1, .delay = 0.05}));
  std::mt19937_64 rng(99);
  std::map<JobId, std::pair<Direction, std::vector<uint64_t>>> jobs;
  JobId next = 1;
  auto apply = [&](const TransferResult& r) {
    auto [dir, chunks] = jobs.at(r.job);
    for (uint64_t i : chunks) {
      const ChunkKey k[] = {Harness::key(i)};
      if (dir == Direction::kStore) {
        complete(*h.cache, k[0], r.outcome);
      } else if (r.outcome == Outcome::kUnprovable) {
        h.cache->quarantine_load(k);
      } else {
        h.cache->complete_load(k);
      }
    }
    jobs.erase(r.job);
  };
  for (int step = 0; step < 400; ++step) {
    const uint64_t i = rng() % 24;  // 24 chunk identities compete for 8 slots
    const ChunkKey k[] = {Harness::key(i)};
    if (h.cache->state(k[0]) == LookupState::kHit && rng() % 2) {
      auto slots = h.cache->prepare_load(k);
      ASSERT_TRUE(slots.has_value());
      // Into scratch blocks: round-trip bytes are checked by the transfer tests.
      h.engine->submit(
          next, Direction::kLoad,
          std::vector<ChunkTransfer>{{.group = 0, .blocks = {60, 61}, .slot = (*slots)[0]}});
      jobs[next++] = {Direction::kLoad, {i}};
    } else if (auto plan = h.cache->prepare_store(k); plan && !plan->keys.empty()) {
      h.compute_chunk(i);
      const auto b = static_cast<uint32_t>(2 * i);
      h.engine->submit(
          next, Direction::kStore,
          std::vector<ChunkTransfer>{{.group = 0, .blocks = {b, b + 1}, .slot = plan->slots[0]}});
      jobs[next++] = {Direction::kStore, {i}};
    }
    if (step % 3 == 0) {
      for (auto& r : h.drain()) apply(r);
      // Invariant after every drain: every published chunk holds exactly its bytes.
      for (uint64_t c = 0; c < 24; ++c) {
        const ChunkKey kk[] = {Harness::key(c)};
        if (h.cache->state(kk[0]) != LookupState::kHit) continue;
        auto slots = h.cache->prepare_load(kk);
        ASSERT_TRUE(slots.has_value());
        EXPECT_TRUE(h.slot_holds_chunk((*slots)[0], c)) << "published bad bytes for chunk " << c;
        h.cache->complete_load(kk);
      }
      ASSERT_TRUE(h.cache->audit()) << h.cache->audit().error().message;
    }
  }
  for (auto& r : h.drain()) apply(r);
  EXPECT_TRUE(jobs.empty());
  EXPECT_GT(h.fault.counts().submit_failures, 0u);
  EXPECT_GT(h.cache->counters().stores_failed, 0u);
  EXPECT_GT(h.cache->counters().stores_succeeded, 0u);
  h.expect_audits();
}

}  // namespace
}  // namespace kvtier
