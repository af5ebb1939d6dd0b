// The disk tier against a real directory: round trips, restart, eviction within the size
// bound, compaction, options, and the fallback without io_uring. Every test runs on both IO
// backends (io_uring where the kernel allows it, and the preadv/pwritev threads).
#include "kvtier/tier/disk_tier.h"

#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <atomic>
#include <cstddef>
#include <fstream>
#include <random>
#include <thread>

#include "disk_test_util.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::AlignedChunk;
using testing::chunk_bytes;
using testing::disk_key;
using testing::fill_pattern;
using testing::get_one;
using testing::has_pattern;
using testing::put_one;

constexpr size_t kDiskChunk = 60 * 1024 + 100;  // not a multiple of 4 KiB: padded on disk
constexpr uint64_t kRecord = 4096 + 64 * 1024;  // 15 records fill a segment of 1 MiB
constexpr Duration kDiskTimeout = 10s;

// Bytes of the segment files in a directory, as the file system reports them.
uint64_t segment_file_bytes(const std::filesystem::path& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".kvs") total += e.file_size();
  }
  return total;
}

// Puts chunks first_id, first_id + 1, ... (`count` of `bytes` each) in one call.
Result<std::vector<ChunkStatus>> put_batch(Tier& tier, uint64_t first_id, size_t count,
                                           size_t bytes) {
  std::vector<std::vector<std::byte>> chunks;
  std::vector<std::span<const std::byte>> spans;
  std::vector<ChunkKey> keys;
  for (uint64_t id = first_id; id < first_id + count; ++id) {
    chunks.push_back(chunk_bytes(id, bytes));
    keys.push_back(disk_key(id));
  }
  for (const auto& c : chunks) spans.emplace_back(c);
  return tier.put(keys, spans, kDiskTimeout);
}

class DiskTierTest : public ::testing::TestWithParam<DiskIo> {
 protected:
  std::unique_ptr<DiskTier> open(uint64_t capacity, uint64_t segment = 1 << 20,
                                 double compact_below = 0.5) {
    Result<std::unique_ptr<DiskTier>> tier = DiskTier::open({.directory = dir_.path(),
                                                             .capacity_bytes = capacity,
                                                             .io_threads = 2,
                                                             .segment_bytes = segment,
                                                             .queue_depth = 8,
                                                             .compact_below = compact_below,
                                                             .io = GetParam()});
    EXPECT_TRUE(tier) << tier.error().to_string();
    return tier ? std::move(*tier) : nullptr;
  }
  // Four segments of 1 MiB, up to 16 requests in flight per call.
  std::unique_ptr<DiskTier> open_four_segments(uint32_t io_threads) {
    Result<std::unique_ptr<DiskTier>> tier = DiskTier::open({.directory = dir_.path(),
                                                             .capacity_bytes = 4 << 20,
                                                             .io_threads = io_threads,
                                                             .segment_bytes = 1 << 20,
                                                             .queue_depth = 16,
                                                             .io = GetParam()});
    EXPECT_TRUE(tier) << tier.error().to_string();
    return tier ? std::move(*tier) : nullptr;
  }
  void put(Tier& tier, std::initializer_list<uint64_t> ids) {
    for (uint64_t id : ids) {
      Result<std::vector<ChunkStatus>> r = put_one(tier, id, kDiskChunk);
      ASSERT_TRUE(r) << r.error().to_string();
      ASSERT_EQ((*r)[0], ChunkStatus::kOk) << id;
    }
  }

  testing::TempDir dir_;
};

TEST_P(DiskTierTest, UsesTheBackendAskedFor) {
  auto tier = open(64 << 20);
  if (GetParam() == DiskIo::kThreads) {
    EXPECT_FALSE(tier->uses_io_uring());
    EXPECT_NE(tier->io_description().find("threads"), std::string::npos);
  } else {
    // This machine's kernel runs io_uring; where it would not, kAuto says why (tested below).
    EXPECT_TRUE(tier->uses_io_uring()) << tier->io_description();
  }
  EXPECT_TRUE(tier->direct_io()) << tier->io_description();
}

// Memory at `offset` bytes past a 4 KiB boundary: 0 (host pool slots), 512 (what virtio-blk
// can DMA to), 16 (malloc's alignment; NVMe can DMA to it) and 1 (nothing can).
class OffsetBuffer {
 public:
  OffsetBuffer(size_t bytes, size_t offset) : memory_(bytes + offset), offset_(offset) {}
  std::span<std::byte> span() const {
    return memory_.span().subspan(offset_, memory_.size - offset_);
  }

 private:
  AlignedChunk memory_;
  size_t offset_;
};

TEST_P(DiskTierTest, RoundTripsABatchThroughBuffersOfAnyAlignment) {
  auto tier = open(64 << 20);
  constexpr size_t n = 32;
  constexpr size_t kOffsets[] = {0, 512, 16, 1};
  std::vector<ChunkKey> keys;
  std::vector<std::unique_ptr<OffsetBuffer>> sources;
  std::vector<std::span<const std::byte>> in;
  for (uint64_t i = 0; i < n; ++i) {
    keys.push_back(disk_key(i));
    // Sizes: a multiple of 4 KiB, and not (a partial last block).
    const size_t bytes = i % 2 == 0 ? 64 * 1024 : kDiskChunk;
    sources.push_back(std::make_unique<OffsetBuffer>(bytes, kOffsets[i % 4]));
    fill_pattern(sources.back()->span().data(), bytes, i);
    in.push_back(sources.back()->span().first(bytes));
  }
  ASSERT_EQ(*tier->put(keys, in, kDiskTimeout), std::vector<ChunkStatus>(n, ChunkStatus::kOk));

  std::vector<std::unique_ptr<OffsetBuffer>> back;
  std::vector<std::span<std::byte>> out;
  for (uint64_t i = 0; i < n; ++i) {
    back.push_back(std::make_unique<OffsetBuffer>(in[i].size(), kOffsets[(i / 4) % 4]));
    out.push_back(back.back()->span().first(in[i].size()));
  }
  ASSERT_EQ(*tier->get(keys, out, kDiskTimeout), std::vector<ChunkStatus>(n, ChunkStatus::kOk));
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(has_pattern(out[i].data(), out[i].size(), i)) << i;
  }
  EXPECT_EQ(tier->chunk_count(), n);
  const TierCounters c = tier->counters();
  EXPECT_EQ(c.hits, n);
  EXPECT_EQ(c.chunks_written, n);
}

TEST_P(DiskTierTest, MissAndContains) {
  auto tier = open(64 << 20);
  put(*tier, {1, 3});
  EXPECT_EQ(*tier->contains(std::vector{disk_key(1), disk_key(2), disk_key(3)}, kDiskTimeout),
            (std::vector<bool>{true, false, true}));
  EXPECT_EQ(get_one(*tier, 2, kDiskChunk), ChunkStatus::kMiss);
  EXPECT_EQ(tier->counters().misses, 1u);
}

TEST_P(DiskTierTest, PutOfAKeyItHoldsOnlyTouchesIt) {
  auto tier = open(64 << 20);
  put(*tier, {1});
  const auto before = tier->location_of(disk_key(1));
  put(*tier, {1});
  EXPECT_EQ(tier->location_of(disk_key(1))->offset, before->offset);
  EXPECT_EQ(tier->bytes_used(), kRecord);
}

TEST_P(DiskTierTest, ChunkLargerThanASegmentIsAnError) {
  auto tier = open(1 << 20, 256 << 10);
  Result<std::vector<ChunkStatus>> r = put_one(*tier, 1, 256 << 10);  // + its header block
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ((*r)[0], ChunkStatus::kError);
  EXPECT_EQ(tier->chunk_count(), 0u);
}

TEST_P(DiskTierTest, ReopenFindsEveryChunkAcrossSegments) {
  {
    auto tier = open(64 << 20);
    for (uint64_t id = 0; id < 40; ++id) put(*tier, {id});  // 15 records a segment: 3 segments
    EXPECT_EQ(tier->segment_count(), 3u);
  }
  auto reopened = open(64 << 20);
  EXPECT_EQ(reopened->chunk_count(), 40u);
  EXPECT_EQ(reopened->bytes_used(), 40 * kRecord);
  for (uint64_t id = 0; id < 40; ++id)
    EXPECT_EQ(get_one(*reopened, id, kDiskChunk), ChunkStatus::kOk);
  // Appends continue where the last segment ended, and are found by the next open too.
  put(*reopened, {100, 101});
  EXPECT_EQ(reopened->segment_count(), 3u);
  reopened.reset();
  auto again = open(64 << 20);
  EXPECT_EQ(again->chunk_count(), 42u);
  EXPECT_EQ(get_one(*again, 101, kDiskChunk), ChunkStatus::kOk);
  EXPECT_EQ(get_one(*again, 7, kDiskChunk), ChunkStatus::kOk);
}

TEST_P(DiskTierTest, ReopenServesTheNewestRecordOfAKey) {
  {
    auto tier = open(64 << 20);
    put(*tier, {5});
    // The same key again with another size replaces it (a new record, the old one dead).
    Result<std::vector<ChunkStatus>> r = put_one(*tier, 5, 8192);
    ASSERT_TRUE(r && (*r)[0] == ChunkStatus::kOk);
  }
  auto reopened = open(64 << 20);
  EXPECT_EQ(reopened->chunk_count(), 1u);
  EXPECT_EQ(get_one(*reopened, 5, 8192), ChunkStatus::kOk);
}

TEST_P(DiskTierTest, StaysWithinItsCapacityEvictingLeastRecentlyUsed) {
  // Four segments of 1 MiB (15 records each).
  constexpr uint64_t kCapacity = 4 << 20;
  auto tier = open(kCapacity);
  ASSERT_EQ(tier->segment_bytes(), 1u << 20);
  put(*tier, {0, 1, 2});
  for (uint64_t id = 3; id < 200; ++id) {
    put(*tier, {id});
    // Keys 0-2 stay hot.
    if (id % 10 == 0) {
      for (uint64_t hot : {0, 1, 2}) ASSERT_EQ(get_one(*tier, hot, kDiskChunk), ChunkStatus::kOk);
    }
    ASSERT_LE(tier->disk_bytes(), kCapacity);
    ASSERT_LE(segment_file_bytes(dir_.path()), kCapacity) << "after " << id;
  }
  EXPECT_GT(tier->evictions(), 100u);
  EXPECT_LE(tier->bytes_used(), kCapacity);
  for (uint64_t hot : {0, 1, 2}) EXPECT_EQ(get_one(*tier, hot, kDiskChunk), ChunkStatus::kOk);
  EXPECT_EQ(get_one(*tier, 199, kDiskChunk), ChunkStatus::kOk);
  EXPECT_EQ(get_one(*tier, 3, kDiskChunk), ChunkStatus::kMiss);  // cold and old: evicted
}

TEST_P(DiskTierTest, CompactionReclaimsSpaceAndKeepsLiveChunksReadable) {
  constexpr uint64_t kCapacity = 8 << 20;
  auto tier = open(kCapacity);
  // Segments 1 and 2 full, then most of their chunks replaced by a smaller version elsewhere:
  // only every fifth chunk stays live in them.
  for (uint64_t id = 0; id < 30; ++id) put(*tier, {id});
  ASSERT_EQ(tier->segment_count(), 2u);
  for (uint64_t id = 0; id < 30; ++id) {
    if (id % 5 == 0) continue;
    Result<std::vector<ChunkStatus>> r = put_one(*tier, id, 4096);
    ASSERT_TRUE(r && (*r)[0] == ChunkStatus::kOk);
  }
  const size_t segments_before = tier->segment_count();
  const uint64_t disk_before = tier->disk_bytes();
  ASSERT_EQ(tier->compactions(), 0u);
  // Fill the active segment: the next new segment makes compaction due.
  for (uint64_t id = 100; tier->compactions() == 0 && id < 140; ++id) put(*tier, {id});
  EXPECT_GE(tier->compactions(), 1u);
  // A new segment, and an old one retired: its file kept as a spare for the next segment.
  EXPECT_LE(tier->segment_count(), segments_before);
  EXPECT_EQ(tier->spare_count(), 1u);
  EXPECT_LE(tier->disk_bytes(), disk_before + (1 << 20));
  EXPECT_EQ(tier->evictions(), 0u);
  // Every live chunk is still readable, moved or not.
  for (uint64_t id = 0; id < 30; ++id) {
    EXPECT_EQ(get_one(*tier, id, id % 5 == 0 ? kDiskChunk : 4096), ChunkStatus::kOk) << id;
  }
  // And is found at its new place after a restart.
  tier.reset();
  auto reopened = open(kCapacity);
  for (uint64_t id = 0; id < 30; ++id) {
    EXPECT_EQ(get_one(*reopened, id, id % 5 == 0 ? kDiskChunk : 4096), ChunkStatus::kOk) << id;
  }
  EXPECT_LE(segment_file_bytes(dir_.path()), kCapacity);
}

TEST_P(DiskTierTest, AFullTierWritesIntoItsRetiredFilesAndTheirOldRecordsAreNeverFoundAgain) {
  constexpr uint64_t kCapacity = 4 << 20;  // four segments of 1 MiB, 15 records each
  std::vector<uint64_t> held;
  size_t spares = 0;
  {
    auto tier = open(kCapacity);
    // Full after 60 chunks; from then on every new segment is a segment file that eviction
    // emptied. Stop 5 records into a reused one, so that 10 records of its earlier life follow.
    uint64_t id = 0;
    while (tier->segments_reused() < 3 && id < 400) put(*tier, {id++});
    ASSERT_EQ(tier->segments_reused(), 3u) << "after " << id << " chunks";
    for (int i = 0; i < 5; ++i) put(*tier, {id++});
    EXPECT_EQ(tier->segment_count() + tier->spare_count(), 4u);
    EXPECT_LE(segment_file_bytes(dir_.path()), kCapacity);
    for (uint64_t k = 0; k < id; ++k) {
      const ChunkStatus status = get_one(*tier, k, kDiskChunk);
      ASSERT_TRUE(status == ChunkStatus::kOk || status == ChunkStatus::kMiss) << k;
      if (status == ChunkStatus::kOk) held.push_back(k);
    }
    EXPECT_LT(held.size(), id);  // some were evicted
    spares = tier->spare_count();
  }
  // After a restart the tier holds exactly what it held: the older records still in the
  // reused files (of chunks evicted since) belong to segments that no longer exist.
  auto reopened = open(kCapacity);
  EXPECT_EQ(reopened->chunk_count(), held.size());
  for (uint64_t k : held) EXPECT_EQ(get_one(*reopened, k, kDiskChunk), ChunkStatus::kOk) << k;
  EXPECT_EQ(reopened->spare_count(), spares);
  // The spares found on disk are reused too.
  for (uint64_t id = 1000; reopened->segments_reused() == 0 && id < 1100; ++id) {
    put(*reopened, {id});
  }
  EXPECT_GE(reopened->segments_reused(), 1u);
  EXPECT_LE(segment_file_bytes(dir_.path()), kCapacity);
}

TEST_P(DiskTierTest, ABatchLargerThanTheWholeTierIsStoredInTurnWithoutAnError) {
  // Four segments of 1 MiB, three records of 300 KiB each: the batch of 16 is larger than the
  // tier. Its first records are evicted by its last, and the call is never refused for room
  // that only its own writes in flight are holding.
  constexpr size_t kBig = 300 * 1024;
  auto opened = open_four_segments(2);
  ASSERT_TRUE(opened);
  DiskTier& tier = *opened;
  EXPECT_EQ(tier.queue_depth_for(kBig), 3u);
  Result<std::vector<ChunkStatus>> r = put_batch(tier, 0, 16, kBig);
  ASSERT_TRUE(r) << r.error().to_string();
  for (ChunkStatus s : *r) EXPECT_EQ(s, ChunkStatus::kOk);
  EXPECT_GT(tier.evictions(), 0u);
  EXPECT_EQ(get_one(tier, 15, kBig), ChunkStatus::kOk);
  EXPECT_LE(segment_file_bytes(dir_.path()), 4u << 20);
}

TEST_P(DiskTierTest, CallsRacingForTheLastRoomFailOnlyTheKeysThatFoundNone) {
  // Four callers at once into four segments of three records each: their writes in flight can
  // hold all the room there is. A key that finds none is kError (not stored); the call and the
  // tier go on.
  constexpr size_t kBig = 300 * 1024;
  auto opened = open_four_segments(4);
  ASSERT_TRUE(opened);
  DiskTier& tier = *opened;
  std::atomic<size_t> failed_calls{0}, stored{0};
  std::vector<std::thread> callers;
  for (uint64_t caller = 0; caller < 4; ++caller) {
    callers.emplace_back([&, caller] {
      for (uint64_t round = 0; round < 8; ++round) {
        Result<std::vector<ChunkStatus>> r = put_batch(tier, (caller * 8 + round) * 6, 6, kBig);
        if (!r) {
          ++failed_calls;
          continue;
        }
        for (ChunkStatus s : *r) stored += s == ChunkStatus::kOk;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failed_calls.load(), 0u);
  EXPECT_GT(stored.load(), 0u);
  EXPECT_LE(segment_file_bytes(dir_.path()), 4u << 20);
  EXPECT_TRUE(put_one(tier, 999, kBig).has_value());
  EXPECT_EQ(get_one(tier, 999, kBig), ChunkStatus::kOk);
}

TEST_P(DiskTierTest, RestartWithASmallerCapacityEvictsDownToIt) {
  {
    auto tier = open(16 << 20);
    for (uint64_t id = 0; id < 60; ++id) put(*tier, {id});  // 4 segments
  }
  auto reopened = open(2 << 20);
  EXPECT_LE(reopened->disk_bytes(), 2u << 20);
  EXPECT_LE(segment_file_bytes(dir_.path()), 2u << 20);
  EXPECT_GT(reopened->evictions(), 0u);
  EXPECT_EQ(get_one(*reopened, 59, kDiskChunk), ChunkStatus::kOk);
}

TEST_P(DiskTierTest, ATimeoutThatHasPassedStartsNoIo) {
  auto tier = open(64 << 20);
  put(*tier, {1});
  Result<std::vector<ChunkStatus>> r = put_one(*tier, 2, kDiskChunk, Duration::zero());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kDeadlineExceeded);
  EXPECT_FALSE((*tier->contains(std::vector{disk_key(2)}, kDiskTimeout))[0]);
  std::vector<std::byte> out(kDiskChunk);
  const ChunkKey k = disk_key(1);
  const std::span<std::byte> d(out);
  Result<std::vector<ChunkStatus>> g = tier->get(std::span(&k, 1), std::span(&d, 1), 0s);
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, ErrorCode::kDeadlineExceeded);
}

TEST_P(DiskTierTest, ASecondTierOnTheSameDirectoryIsRefused) {
  auto tier = open(64 << 20);
  Result<std::unique_ptr<DiskTier>> second = DiskTier::open({.directory = dir_.path()});
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(second.error().message.find("in use"), std::string::npos) << second.error().message;
}

TEST_P(DiskTierTest, RemovesTheOneFilePerChunkLayoutOfEarlierVersions) {
  const auto legacy = dir_.path() / "ab";
  std::filesystem::create_directories(legacy);
  std::ofstream(legacy / "ab000000000000000000000000000001.kvc") << "old";
  std::ofstream(legacy / "ab000000000000000000000000000002.kvc.tmp.1.1") << "torn";
  auto tier = open(64 << 20);
  EXPECT_FALSE(std::filesystem::exists(legacy));
}

TEST_P(DiskTierTest, ThreadsPuttingAndGettingWhileItEvictsAndCompactsSeeOnlyWholeChunks) {
  // Four segments of 1 MiB; 4 threads over 120 keys (about twice what fits), a third of them
  // read far more often than the rest, so eviction and compaction run all the time.
  constexpr uint64_t kCapacity = 4 << 20;
  auto tier = open(kCapacity);
  std::atomic<uint64_t> hits{0};
  std::atomic<bool> wrong{false};
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<std::byte> out(kDiskChunk);
      for (int op = 0; op < 400; ++op) {
        const uint64_t id = rng() % 3 == 0 ? rng() % 120 : rng() % 40;
        const ChunkKey k = disk_key(id);
        if (rng() % 2 == 0) {
          const std::vector<std::byte> c = chunk_bytes(id, kDiskChunk);
          const std::span<const std::byte> s(c);
          Result<std::vector<ChunkStatus>> r =
              tier->put(std::span(&k, 1), std::span(&s, 1), kDiskTimeout);
          if (!r || (*r)[0] != ChunkStatus::kOk) wrong = true;
        } else {
          const std::span<std::byte> d(out);
          Result<std::vector<ChunkStatus>> r =
              tier->get(std::span(&k, 1), std::span(&d, 1), kDiskTimeout);
          if (!r || ((*r)[0] != ChunkStatus::kOk && (*r)[0] != ChunkStatus::kMiss)) wrong = true;
          if (r && (*r)[0] == ChunkStatus::kOk) {
            ++hits;
            if (!has_pattern(out.data(), kDiskChunk, id)) wrong = true;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(wrong);
  EXPECT_GT(hits, 0u);
  EXPECT_GT(tier->evictions(), 0u);
  EXPECT_GT(tier->compactions(), 0u);
  EXPECT_LE(segment_file_bytes(dir_.path()), kCapacity);
  // Every chunk it still holds is whole, now and after a restart.
  std::vector<uint64_t> held;
  for (uint64_t id = 0; id < 120; ++id) {
    if ((*tier->contains(std::vector{disk_key(id)}, kDiskTimeout))[0]) held.push_back(id);
  }
  ASSERT_FALSE(held.empty());
  for (uint64_t id : held) EXPECT_EQ(get_one(*tier, id, kDiskChunk), ChunkStatus::kOk) << id;
  tier.reset();
  auto reopened = open(kCapacity);
  for (uint64_t id : held) EXPECT_EQ(get_one(*reopened, id, kDiskChunk), ChunkStatus::kOk) << id;
}

INSTANTIATE_TEST_SUITE_P(Backends, DiskTierTest, ::testing::Values(DiskIo::kAuto, DiskIo::kThreads),
                         [](const auto& info) {
                           return info.param == DiskIo::kThreads ? "Threads" : "IoUring";
                         });

TEST(DiskTier, RejectsBadOptions) {
  EXPECT_EQ(DiskTier::open({.directory = ""}).error().code, ErrorCode::kInvalidArgument);
  testing::TempDir dir;
  EXPECT_EQ(DiskTier::open({.directory = dir.path(), .capacity_bytes = 4 * 4096}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(DiskTier::open({.directory = dir.path(), .io_threads = 0}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(DiskTier::open({.directory = dir.path(), .queue_depth = 0}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(DiskTier::open({.directory = dir.path(), .compact_below = 1.0}).error().code,
            ErrorCode::kInvalidArgument);
}

TEST(DiskTier, SegmentsAreAtMostAQuarterOfTheCapacity) {
  testing::TempDir dir;
  auto tier = DiskTier::open({.directory = dir.path(), .capacity_bytes = 10 << 20});
  ASSERT_TRUE(tier);
  EXPECT_EQ((*tier)->segment_bytes(), (10u << 20) / 4 / 4096 * 4096);
  // A segment's worth in flight at most (2.5 MiB: nine records of 256 KiB, one of 2 MiB) ...
  EXPECT_EQ((*tier)->queue_depth_for(256 << 10), 9u);
  EXPECT_EQ((*tier)->queue_depth_for(2 << 20), 1u);
  // ... and 16 MiB at most.
  testing::TempDir big_dir;
  auto big = DiskTier::open({.directory = big_dir.path(), .capacity_bytes = uint64_t{4} << 30});
  ASSERT_TRUE(big);
  EXPECT_EQ((*big)->queue_depth_for(256 << 10), 16u);
  EXPECT_EQ((*big)->queue_depth_for(2 << 20), 7u);
}

// Installs a seccomp filter that makes io_uring_setup fail with EPERM, as container runtimes'
// default profiles do.
bool refuse_io_uring() {
#if defined(__x86_64__)
  constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
  return false;
#endif
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{.len = sizeof filter / sizeof filter[0], .filter = filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

TEST(DiskTier, FallsBackToThreadsWhenIoUringIsRefused) {
  testing::TempDir dir;
  const int status = testing::run_in_child([&] {
    ASSERT_TRUE(refuse_io_uring()) << "seccomp: " << std::strerror(errno);
    // Asked for explicitly: a clear error.
    Result<std::unique_ptr<DiskTier>> strict =
        DiskTier::open({.directory = dir.path(), .io = DiskIo::kIoUring});
    ASSERT_FALSE(strict);
    EXPECT_NE(strict.error().message.find("io_uring"), std::string::npos);
    EXPECT_NE(strict.error().message.find("not permitted"), std::string::npos)
        << strict.error().message;
    // Automatic: works, on threads, and says why.
    Result<std::unique_ptr<DiskTier>> tier = DiskTier::open({.directory = dir.path()});
    ASSERT_TRUE(tier) << tier.error().to_string();
    EXPECT_FALSE((*tier)->uses_io_uring());
    EXPECT_NE((*tier)->io_description().find("io_uring unavailable"), std::string::npos)
        << (*tier)->io_description();
    Result<std::vector<ChunkStatus>> r = put_one(**tier, 1, kDiskChunk);
    ASSERT_TRUE(r && (*r)[0] == ChunkStatus::kOk);
    EXPECT_EQ(get_one(**tier, 1, kDiskChunk), ChunkStatus::kOk);
  });
  EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace kvtier
