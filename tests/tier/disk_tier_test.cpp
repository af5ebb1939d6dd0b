#include "kvtier/tier/disk_tier.h"

#include <gtest/gtest.h>

#include <fstream>

#include "kvtier/tier/chunk_record.h"
#include "support/byte_pattern.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::fill_pattern;
using testing::has_pattern;

constexpr size_t kChunk = 4096;
constexpr uint64_t kRecord = kChunkRecordHeaderBytes + kChunk;
constexpr Duration kTimeout = 5s;

ChunkKey key(uint64_t i) {
  return ChunkKey{.lo = i, .hi = 0xd15c};
}

std::unique_ptr<DiskTier> open_tier(const std::filesystem::path& dir, uint64_t capacity) {
  Result<std::unique_ptr<DiskTier>> tier =
      DiskTier::open({.directory = dir, .capacity_bytes = capacity, .io_threads = 2});
  EXPECT_TRUE(tier) << tier.error().to_string();
  return tier ? std::move(*tier) : nullptr;
}

// Puts chunk i with pattern seed i for each id.
void put(Tier& tier, std::initializer_list<uint64_t> ids) {
  for (uint64_t id : ids) {
    std::vector<std::byte> bytes(kChunk);
    fill_pattern(bytes.data(), kChunk, id);
    const ChunkKey k = key(id);
    const std::span<const std::byte> chunk(bytes);
    Result<std::vector<ChunkStatus>> r = tier.put(std::span(&k, 1), std::span(&chunk, 1), kTimeout);
    ASSERT_TRUE(r) << r.error().to_string();
    ASSERT_EQ((*r)[0], ChunkStatus::kOk);
  }
}

ChunkStatus get(Tier& tier, uint64_t id, std::vector<std::byte>& out) {
  out.assign(kChunk, std::byte{0});
  const ChunkKey k = key(id);
  const std::span<std::byte> dst(out);
  Result<std::vector<ChunkStatus>> r = tier.get(std::span(&k, 1), std::span(&dst, 1), kTimeout);
  EXPECT_TRUE(r) << r.error().to_string();
  return r ? (*r)[0] : ChunkStatus::kError;
}

TEST(DiskTier, RoundTripsABatch) {
  testing::TempDir dir;
  auto tier = open_tier(dir.path(), 1 << 20);
  std::vector<ChunkKey> keys;
  std::vector<std::vector<std::byte>> chunks(8, std::vector<std::byte>(kChunk));
  std::vector<std::span<const std::byte>> in;
  for (uint64_t i = 0; i < 8; ++i) {
    keys.push_back(key(i));
    fill_pattern(chunks[i].data(), kChunk, i);
    in.emplace_back(chunks[i]);
  }
  ASSERT_EQ(*tier->put(keys, in, kTimeout), std::vector<ChunkStatus>(8, ChunkStatus::kOk));
  std::vector<std::vector<std::byte>> back(8, std::vector<std::byte>(kChunk));
  std::vector<std::span<std::byte>> out(back.begin(), back.end());
  ASSERT_EQ(*tier->get(keys, out, kTimeout), std::vector<ChunkStatus>(8, ChunkStatus::kOk));
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(has_pattern(back[i].data(), kChunk, i)) << i;
  EXPECT_EQ(tier->chunk_count(), 8u);
  EXPECT_EQ(tier->bytes_used(), 8 * kRecord);
  const TierCounters c = tier->counters();
  EXPECT_EQ(c.hits, 8u);
  EXPECT_EQ(c.chunks_written, 8u);
  EXPECT_EQ(c.bytes_written, 8 * kChunk);
  EXPECT_EQ(c.bytes_read, 8 * kChunk);
}

TEST(DiskTier, MissAndContains) {
  testing::TempDir dir;
  auto tier = open_tier(dir.path(), 1 << 20);
  put(*tier, {1, 3});
  const std::vector<ChunkKey> keys = {key(1), key(2), key(3)};
  EXPECT_EQ(*tier->contains(keys, kTimeout), (std::vector<bool>{true, false, true}));
  std::vector<std::byte> out;
  EXPECT_EQ(get(*tier, 2, out), ChunkStatus::kMiss);
  EXPECT_EQ(tier->counters().misses, 1u);
}

TEST(DiskTier, EvictsLeastRecentlyUsedBeyondCapacity) {
  testing::TempDir dir;
  auto tier = open_tier(dir.path(), 3 * kRecord);
  put(*tier, {1, 2, 3});
  std::vector<std::byte> out;
  ASSERT_EQ(get(*tier, 1, out), ChunkStatus::kOk);  // 1 is now the most recent; 2 the oldest
  put(*tier, {4});
  EXPECT_EQ(*tier->contains(std::vector{key(1), key(2), key(3), key(4)}, kTimeout),
            (std::vector<bool>{true, false, true, true}));
  EXPECT_FALSE(std::filesystem::exists(tier->path_of(key(2))));
  EXPECT_EQ(tier->evictions(), 1u);
  EXPECT_LE(tier->bytes_used(), 3 * kRecord);
}

TEST(DiskTier, ChunkLargerThanCapacityIsAnError) {
  testing::TempDir dir;
  auto tier = open_tier(dir.path(), kRecord - 1);
  std::vector<std::byte> bytes(kChunk);
  const ChunkKey k = key(1);
  const std::span<const std::byte> chunk(bytes);
  EXPECT_EQ((*tier->put(std::span(&k, 1), std::span(&chunk, 1), kTimeout))[0], ChunkStatus::kError);
  EXPECT_EQ(tier->chunk_count(), 0u);
}

TEST(DiskTier, FoundAgainAfterRestart) {
  testing::TempDir dir;
  {
    auto tier = open_tier(dir.path(), 1 << 20);
    put(*tier, {1, 2, 3});
  }
  // A write that crashed before its rename leaves a temp file: it is not a record.
  const std::filesystem::path leftover = dir.path() / "00" / "junk.kvc.tmp.1.1";
  std::filesystem::create_directories(leftover.parent_path());
  std::ofstream(leftover) << "torn";
  ASSERT_TRUE(std::filesystem::exists(leftover));
  auto reopened = open_tier(dir.path(), 1 << 20);
  EXPECT_EQ(reopened->chunk_count(), 3u);
  EXPECT_EQ(reopened->bytes_used(), 3 * kRecord);
  EXPECT_FALSE(std::filesystem::exists(leftover));
  std::vector<std::byte> out;
  for (uint64_t id : {1, 2, 3}) {
    ASSERT_EQ(get(*reopened, id, out), ChunkStatus::kOk);
    EXPECT_TRUE(has_pattern(out.data(), kChunk, id));
  }
}

TEST(DiskTier, RestartWithSmallerCapacityEvicts) {
  testing::TempDir dir;
  {
    auto tier = open_tier(dir.path(), 1 << 20);
    put(*tier, {1, 2, 3});
  }
  auto reopened = open_tier(dir.path(), 2 * kRecord);
  EXPECT_EQ(reopened->chunk_count(), 2u);
  EXPECT_LE(reopened->bytes_used(), 2 * kRecord);
}

void flip_byte(const std::filesystem::path& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << file;
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x40));
}

TEST(DiskTier, FlippedByteOnDiskIsAMissNeverServed) {
  testing::TempDir dir;
  auto tier = open_tier(dir.path(), 1 << 20);
  put(*tier, {7});
  flip_byte(tier->path_of(key(7)), kChunkRecordHeaderBytes + 100);
  std::vector<std::byte> out;
  EXPECT_EQ(get(*tier, 7, out), ChunkStatus::kCorrupt);
  const TierCounters c = tier->counters();
  EXPECT_EQ(c.corrupt, 1u);
  EXPECT_EQ(c.hits, 0u);
  // Deleted: the next lookup misses instead of finding it again.
  EXPECT_EQ(*tier->contains(std::vector{key(7)}, kTimeout), std::vector<bool>{false});
  EXPECT_FALSE(std::filesystem::exists(tier->path_of(key(7))));
}

TEST(DiskTier, TruncatedOrMisplacedRecordIsCorrupt) {
  testing::TempDir dir;
  auto tier = open_tier(dir.path(), 1 << 20);
  put(*tier, {1, 2});
  std::filesystem::resize_file(tier->path_of(key(1)), kRecord - 1);
  // Key 2's file is replaced by a valid record of key 3: right checksum, wrong key.
  put(*tier, {3});
  std::filesystem::copy_file(tier->path_of(key(3)), tier->path_of(key(2)),
                             std::filesystem::copy_options::overwrite_existing);
  std::vector<std::byte> out;
  EXPECT_EQ(get(*tier, 1, out), ChunkStatus::kCorrupt);
  EXPECT_EQ(get(*tier, 2, out), ChunkStatus::kCorrupt);
  EXPECT_EQ(get(*tier, 3, out), ChunkStatus::kOk);
}

TEST(DiskTier, RejectsBadOptions) {
  EXPECT_EQ(DiskTier::open({.directory = ""}).error().code, ErrorCode::kInvalidArgument);
  testing::TempDir dir;
  EXPECT_EQ(DiskTier::open({.directory = dir.path(), .capacity_bytes = 0}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(DiskTier::open({.directory = dir.path(), .io_threads = 0}).error().code,
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
