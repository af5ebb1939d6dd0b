// The disk tier's KV events (docs/events.md): every chunk it stores is announced on medium
// "disk", every chunk it evicts withdrawn, and a tier opened again announces what it found.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "disk_test_util.h"
#include "kvtier/tier/disk_tier.h"
#include "support/kv_event_mirror.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using testing::disk_key;
using testing::KvEventMirror;

constexpr uint64_t kUniverse = 40;

std::set<ChunkKey> held(DiskTier& tier) {
  std::vector<ChunkKey> keys;
  for (uint64_t i = 0; i < kUniverse; ++i) keys.push_back(disk_key(i));
  Result<std::vector<bool>> found = tier.contains(keys, std::chrono::seconds(5));
  EXPECT_TRUE(found.has_value());
  std::set<ChunkKey> out;
  for (uint64_t i = 0; found && i < kUniverse; ++i) {
    if ((*found)[i]) out.insert(disk_key(i));
  }
  return out;
}

struct Stream {
  testing::TempDir dir;
  std::string endpoint = "ipc://" + (dir.path() / "events").string();
  std::string replay = "ipc://" + (dir.path() / "replay").string();
  KvEventPublisher pub{{.endpoints = {endpoint}, .replay_endpoints = {replay}}};
  KvEventSubscriber sub{{.endpoint = endpoint, .replay_endpoint = replay}};
  KvEventMirror mirror;
};

// A tier of 64 KiB in `dir` (four segments of 16 KiB, two 4 KiB chunk records each), publishing
// its events on `s`; null (and a failure) when it does not open.
std::unique_ptr<DiskTier> small_tier(const std::filesystem::path& dir, Stream& s) {
  auto tier = DiskTier::open({.directory = dir, .capacity_bytes = 64 << 10});
  EXPECT_TRUE(tier) << tier.error().message;
  if (!tier) return nullptr;
  (*tier)->publish_events(&s.pub, 16);
  return std::move(*tier);
}

TEST(DiskTierEvents, StoresAndEvictionsAreMirroredAndAReopenedTierAnnouncesItsChunks) {
  testing::TempDir dir;
  Stream s;
  ASSERT_TRUE(testing::connected(s.pub, s.sub, s.mirror));
  {
    auto tier = small_tier(dir.path(), s);  // evictions from the 9th chunk on
    ASSERT_TRUE(tier);
    std::mt19937 rng(5);
    std::vector<std::byte> chunk(4096, std::byte{7});
    for (int step = 0; step < 120; ++step) {
      const ChunkKey k = disk_key(rng() % kUniverse);
      const std::span<const std::byte> bytes(chunk);
      ASSERT_TRUE(tier->put(std::span(&k, 1), std::span(&bytes, 1), std::chrono::seconds(5)));
      if (step % 20 != 19) continue;
      ASSERT_TRUE(s.mirror.caught_up(s.pub, s.sub));
      ASSERT_EQ(s.mirror.on("disk"), held(*tier)) << "step " << step;
    }
    EXPECT_GT(tier->evictions(), 20u);
  }
  // A new publisher and subscriber: what the reopened tier announces is what it holds.
  Stream again;
  ASSERT_TRUE(testing::connected(again.pub, again.sub, again.mirror));
  auto reopened = small_tier(dir.path(), again);
  ASSERT_TRUE(reopened);
  ASSERT_TRUE(again.mirror.caught_up(again.pub, again.sub));
  EXPECT_FALSE(again.mirror.on("disk").empty());
  EXPECT_EQ(again.mirror.on("disk"), held(*reopened));
}

// Chunks of a segment file deleted behind the tier's back are forgotten, and withdrawn too.
TEST(DiskTierEvents, ChunksOfADeletedSegmentFileAreWithdrawn) {
  testing::TempDir dir;
  Stream s;
  ASSERT_TRUE(testing::connected(s.pub, s.sub, s.mirror));
  auto tier = small_tier(dir.path(), s);  // six chunks fill three segments
  ASSERT_TRUE(tier);
  for (uint64_t id = 0; id < 6; ++id) ASSERT_TRUE(testing::put_one(*tier, id, 4096));
  std::vector<std::filesystem::path> segments;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    if (e.path().filename().string().starts_with("seg-")) segments.push_back(e.path());
  }
  ASSERT_EQ(segments.size(), 3u);
  std::ranges::sort(segments);
  std::filesystem::remove(segments.front());         // the first two chunks' file
  ASSERT_TRUE(tier->ping(std::chrono::seconds(5)));  // finds it gone
  ASSERT_TRUE(s.mirror.caught_up(s.pub, s.sub));
  EXPECT_EQ(held(*tier).size(), 4u);
  EXPECT_EQ(s.mirror.on("disk"), held(*tier));
}

}  // namespace
}  // namespace kvtier
