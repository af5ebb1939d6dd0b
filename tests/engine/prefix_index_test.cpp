// PrefixIndex and choose_core (docs/engine.md "Routing"): the index follows a core's KV events,
// weighs a prefix by where it is cached, and the choice trades the cached prefix against the
// work in flight.
#include "kvtier/engine/prefix_index.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

ChunkKey k(uint64_t i) {
  return ChunkKey{.lo = i, .hi = 77};
}

KvEventBatch stored(std::string medium, std::vector<ChunkKey> keys) {
  return {.events = {{.kind = KvEventKind::kBlockStored,
                      .block_hashes = std::move(keys),
                      .block_size = 4,
                      .medium = std::move(medium)}}};
}

KvEventBatch removed(std::string medium, std::vector<ChunkKey> keys) {
  return {.events = {{.kind = KvEventKind::kBlockRemoved,
                      .block_hashes = std::move(keys),
                      .medium = std::move(medium)}}};
}

// 4 device blocks of 4 tokens (keys 1..4), 2 chunks of 8 tokens (keys 11, 12).
PromptKeys prompt() {
  return {.device = {k(1), k(2), k(3), k(4)},
          .block_size = 4,
          .chunks = {k(11), k(12)},
          .chunk_tokens = 8};
}

TEST(PrefixIndex, CountsTheLeadingBlocksEachCoreHolds) {
  PrefixIndex index(2);
  index.apply(0, stored("device", {k(1), k(2), k(4)}));  // a hole after 2 blocks
  EXPECT_DOUBLE_EQ(index.cached_tokens(0, prompt()), 8 * kDeviceWeight);
  EXPECT_DOUBLE_EQ(index.cached_tokens(1, prompt()), 0);
  index.apply(0, stored("device", {k(3)}));
  EXPECT_DOUBLE_EQ(index.cached_tokens(0, prompt()), 16 * kDeviceWeight);
  index.apply(0, removed("device", {k(1)}));
  EXPECT_DOUBLE_EQ(index.cached_tokens(0, prompt()), 0);
  EXPECT_EQ(index.blocks(0, "device"), 3u);
}

TEST(PrefixIndex, DeviceWeighsMoreThanHostAndHostMoreThanLowerTiers) {
  PrefixIndex index(3);
  index.apply(0, stored("device", {k(1), k(2), k(3), k(4)}));
  index.apply(1, stored("host", {k(11), k(12)}));
  index.apply(2, stored("disk", {k(11), k(12)}));
  const double device = index.cached_tokens(0, prompt());
  const double host = index.cached_tokens(1, prompt());
  const double disk = index.cached_tokens(2, prompt());
  EXPECT_GT(device, host);
  EXPECT_GT(host, disk);
  EXPECT_GT(disk, 0);
  // Device blocks then host chunks beyond them: only what lies beyond counts at the host's rate.
  index.apply(1, stored("device", {k(1), k(2)}));
  EXPECT_DOUBLE_EQ(index.cached_tokens(1, prompt()), 8 * kDeviceWeight + 8 * kHostWeight);
}

TEST(PrefixIndex, AllBlocksClearedForgetsOneCoreOnly) {
  PrefixIndex index(2);
  index.apply(0, stored("device", {k(1)}));
  index.apply(1, stored("device", {k(1)}));
  index.apply(0, {.events = {{.kind = KvEventKind::kAllBlocksCleared}}});
  EXPECT_EQ(index.blocks(0, "device"), 0u);
  EXPECT_EQ(index.blocks(1, "device"), 1u);
}

TEST(ChooseCore, TheLongestCachedPrefixWinsAtEqualLoad) {
  std::vector<CoreLoad> cores(3, CoreLoad{.serving = true});
  cores[2].cached = 100;
  EXPECT_EQ(choose_core(cores, 128), 2u);
}

TEST(ChooseCore, AHotPrefixSpillsOnceItsCoreIsBusierThanWhatItSaves) {
  std::vector<CoreLoad> cores(2, CoreLoad{.serving = true});
  cores[0].cached = 100;  // saves 100 of 128 tokens
  cores[0].work = 399;    // weighs 99.75
  EXPECT_EQ(choose_core(cores, 128), 0u);
  cores[0].work = 404;  // 101
  EXPECT_EQ(choose_core(cores, 128), 1u);
  cores[1].work = 8;  // 2: core 0 is again less than what it saves busier
  EXPECT_EQ(choose_core(cores, 128), 0u);
}

TEST(ChooseCore, OnlyServingCoresAndTiesGoToFewerRequests) {
  std::vector<CoreLoad> cores(3, CoreLoad{.serving = true});
  cores[0].serving = false;
  cores[0].cached = 1000;
  cores[1].requests = 2;
  EXPECT_EQ(choose_core(cores, 64), 2u);
  for (CoreLoad& c : cores) c.serving = false;
  EXPECT_EQ(choose_core(cores, 64), std::nullopt);
}

}  // namespace
}  // namespace kvtier
