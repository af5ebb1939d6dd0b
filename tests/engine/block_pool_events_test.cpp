// The device prefix cache's KV events (docs/events.md): after any sequence of allocations,
// cached blocks, releases and evictions, what a subscriber rebuilds on medium "device" is what
// the BlockPool can find, each block announced with its parent and tokens.
#include <gtest/gtest.h>

#include <random>

#include "kvtier/engine/block_pool.h"
#include "support/kv_event_mirror.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using testing::KvEventMirror;

constexpr uint64_t kUniverse = 48;
constexpr uint32_t kBlockSize = 4;

ChunkKey key(uint64_t i) {
  return ChunkKey{.lo = i, .hi = 0xb10c};
}

std::set<ChunkKey> findable(BlockPool& pool) {
  std::set<ChunkKey> out;
  for (uint64_t i = 0; i < kUniverse; ++i) {
    const ChunkKey k = key(i);
    std::vector<uint32_t> held = pool.acquire_cached(std::span(&k, 1));
    for (uint32_t b : held) pool.release(b);
    if (!held.empty()) out.insert(k);
  }
  return out;
}

// A request's table released and then partly evicted leaves its head cached, not its tail:
// a lookup matches from the first block, so a cached tail without its head is of no use.
TEST(BlockPool, ATableReleasedKeepsItsHeadCachedLongest) {
  BlockPool pool(6);
  std::vector<uint32_t> table;
  std::vector<ChunkKey> keys;
  for (uint64_t i = 0; i < 4; ++i) {
    table.push_back(*pool.allocate());
    keys.push_back(key(i));
    pool.cache(table.back(), keys.back(), i == 0 ? std::nullopt : std::optional(keys[i - 1]));
  }
  pool.release_table(table);
  // Another request takes the two free blocks and two of the table's.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.allocate());
  EXPECT_EQ(pool.cached_prefix(keys), 2u) << "the table's first two blocks are still cached";
}

TEST(BlockPoolEvents, EveryCachedBlockIsAnnouncedAndEveryEvictedOneWithdrawn) {
  testing::TempDir dir;
  const std::string endpoint = "ipc://" + (dir.path() / "events").string();
  const std::string replay = "ipc://" + (dir.path() / "replay").string();
  KvEventPublisher pub({.endpoints = {endpoint}, .replay_endpoints = {replay}});
  KvEventSubscriber sub({.endpoint = endpoint, .replay_endpoint = replay});
  KvEventMirror mirror;
  ASSERT_TRUE(testing::connected(pub, sub, mirror));

  BlockPool pool(16);
  pool.publish_events(&pub, kBlockSize);
  std::mt19937 rng(3);
  std::vector<uint32_t> held;
  uint64_t evictions_possible = 0;
  for (int step = 0; step < 1500; ++step) {
    const uint32_t op = rng() % 10;
    if (op < 5) {
      // A request's blocks: allocate, compute, cache under a key (with its parent and tokens).
      if (std::optional<uint32_t> b = pool.allocate()) {
        const uint64_t i = rng() % kUniverse;
        const std::vector<TokenId> tokens(kBlockSize, static_cast<TokenId>(i));
        pool.cache(*b, key(i), i == 0 ? std::nullopt : std::optional(key(i - 1)), tokens);
        held.push_back(*b);
        ++evictions_possible;
      }
    } else if (op < 8 && !held.empty()) {
      const size_t at = rng() % held.size();
      pool.release(held[at]);
      held.erase(held.begin() + static_cast<ptrdiff_t>(at));
    } else {
      const ChunkKey k = key(rng() % kUniverse);
      for (uint32_t b : pool.acquire_cached(std::span(&k, 1))) held.push_back(b);
    }
    if (step % 50 != 49) continue;
    ASSERT_TRUE(mirror.caught_up(pub, sub));
    ASSERT_EQ(mirror.on("device"), findable(pool)) << "step " << step;
  }
  EXPECT_GT(evictions_possible, 100u);
  EXPECT_EQ(sub.counters().gaps, 0u);
}

TEST(BlockPoolEvents, ABlockIsAnnouncedWithItsParentAndTokens) {
  testing::TempDir dir;
  const std::string endpoint = "ipc://" + (dir.path() / "events").string();
  KvEventPublisher pub({.endpoints = {endpoint}});
  KvEventSubscriber sub({.endpoint = endpoint});
  KvEventMirror handshake;
  ASSERT_TRUE(testing::connected(pub, sub, handshake));
  BlockPool pool(4);
  pool.publish_events(&pub, kBlockSize);
  const std::vector<TokenId> first{1, 2, 3, 4}, second{5, 6, 7, 8};
  pool.cache(*pool.allocate(), key(1), std::nullopt, first);
  pool.cache(*pool.allocate(), key(2), key(1), second);
  pub.flush();
  std::vector<KvEvent> events;
  while (events.empty()) {
    for (const KvEventBatch& b : sub.poll(std::chrono::seconds(5))) {
      for (const KvEvent& e : b.events) {
        if (e.medium == "device") events.push_back(e);
      }
    }
  }
  // One event: the second block continues the first.
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].block_hashes, (std::vector{key(1), key(2)}));
  EXPECT_EQ(events[0].parent, std::nullopt);
  EXPECT_EQ(events[0].token_ids, (std::vector<TokenId>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(events[0].block_size, kBlockSize);
}

}  // namespace
}  // namespace kvtier
