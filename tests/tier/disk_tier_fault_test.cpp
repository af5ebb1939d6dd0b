// The disk tier under faults: damaged records are never served (F3), and a full disk or a
// deleted segment file makes the tier fail so that the health wrapper marks it DOWN, and
// recovers once the disk is usable again (H7).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <fstream>

#include "disk_test_util.h"
#include "kvtier/tier/disk_tier.h"
#include "kvtier/tier/health_checked_tier.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::disk_key;
using testing::get_one;
using testing::put_one;

constexpr size_t kFaultChunk = 64 * 1024;
constexpr Duration kFaultTimeout = 10s;

DiskTierOptions options(const std::filesystem::path& dir, DiskIo io = DiskIo::kAuto) {
  return {.directory = dir,
          .capacity_bytes = 64 << 20,
          .io_threads = 2,
          .segment_bytes = 1 << 20,  // 15 records of 64 KiB + a header block
          .queue_depth = 8,
          .io = io};
}

void put_ok(Tier& tier, uint64_t id) {
  Result<std::vector<ChunkStatus>> r = put_one(tier, id, kFaultChunk);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ((*r)[0], ChunkStatus::kOk) << id;
}

// Writes `bytes` at `offset` of `file` with plain buffered IO (the tier's direct reads see it:
// the kernel writes dirty pages back before a direct read of their range).
void overwrite(const std::filesystem::path& file, uint64_t offset, const std::vector<char>& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << file;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.flush());
}

std::vector<char> read_bytes(const std::filesystem::path& file, uint64_t offset, size_t n) {
  std::ifstream f(file, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  std::vector<char> bytes(n);
  f.read(bytes.data(), static_cast<std::streamsize>(n));
  return bytes;
}

// ---- F3: a damaged record is never served ----

class DiskTierF3 : public ::testing::TestWithParam<DiskIo> {
 protected:
  std::unique_ptr<DiskTier> open() {
    Result<std::unique_ptr<DiskTier>> tier = DiskTier::open(options(dir_.path(), GetParam()));
    EXPECT_TRUE(tier) << tier.error().to_string();
    return tier ? std::move(*tier) : nullptr;
  }
  testing::TempDir dir_;
};

TEST_P(DiskTierF3, F3_FlippedPayloadByteIsCorruptAndNeverServed) {
  auto tier = open();
  for (uint64_t id : {1, 2, 3}) put_ok(*tier, id);
  const DiskTier::RecordLocation at = *tier->location_of(disk_key(2));
  std::vector<char> b = read_bytes(at.segment, at.offset + 4096 + 1000, 1);
  b[0] ^= 0x10;
  overwrite(at.segment, at.offset + 4096 + 1000, b);

  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(kFaultChunk));
  std::vector<std::span<std::byte>> dst(out.begin(), out.end());
  const std::vector keys = {disk_key(1), disk_key(2), disk_key(3)};
  EXPECT_EQ(*tier->get(keys, dst, kFaultTimeout),
            (std::vector{ChunkStatus::kOk, ChunkStatus::kCorrupt, ChunkStatus::kOk}));
  const TierCounters c = tier->counters();
  EXPECT_EQ(c.corrupt, 1u);
  EXPECT_EQ(c.hits, 2u);
  // Forgotten: the next lookup misses rather than finding it again.
  EXPECT_EQ(*tier->contains(std::vector{disk_key(2)}, kFaultTimeout), std::vector<bool>{false});
  EXPECT_EQ(get_one(*tier, 2, kFaultChunk), ChunkStatus::kMiss);
  // After a restart the scan finds its (intact) header again; the read still refuses it.
  tier.reset();
  tier = open();
  EXPECT_EQ(get_one(*tier, 2, kFaultChunk), ChunkStatus::kCorrupt);
  EXPECT_EQ(get_one(*tier, 3, kFaultChunk), ChunkStatus::kOk);
}

TEST_P(DiskTierF3, F3_TornPayloadIsCorruptAndNeverServed) {
  auto tier = open();
  for (uint64_t id : {1, 2, 3}) put_ok(*tier, id);
  // A write torn at a block boundary: the header and the first blocks landed, the rest did not.
  const DiskTier::RecordLocation at = *tier->location_of(disk_key(2));
  overwrite(at.segment, at.offset + 4096 + 32768, std::vector<char>(32768, 0));
  EXPECT_EQ(get_one(*tier, 2, kFaultChunk), ChunkStatus::kCorrupt);
  tier.reset();
  tier = open();  // indexed again from its header, and refused again
  EXPECT_EQ(get_one(*tier, 2, kFaultChunk), ChunkStatus::kCorrupt);
  EXPECT_EQ(get_one(*tier, 1, kFaultChunk), ChunkStatus::kOk);
  EXPECT_EQ(tier->counters().hits, 1u);
}

TEST_P(DiskTierF3, F3_APutOverARecordTornBeforeARestartWritesItAgain) {
  auto tier = open();
  for (uint64_t id : {1, 2, 3}) put_ok(*tier, id);
  const DiskTier::RecordLocation at = *tier->location_of(disk_key(2));
  tier.reset();
  // The process died while record 2 was in flight: its header landed, half its payload not.
  overwrite(at.segment, at.offset + 4096 + 32768, std::vector<char>(32768, 0));
  tier = open();
  // The scan indexes it from its header; a put of the key must not take it for the chunk.
  put_ok(*tier, 2);
  EXPECT_EQ(get_one(*tier, 2, kFaultChunk), ChunkStatus::kOk);
  EXPECT_EQ(tier->counters().corrupt, 0u);
  // A record read back intact since the restart is trusted: its put writes nothing.
  EXPECT_EQ(get_one(*tier, 1, kFaultChunk), ChunkStatus::kOk);
  const DiskTier::RecordLocation one = *tier->location_of(disk_key(1));
  put_ok(*tier, 1);
  EXPECT_EQ(tier->location_of(disk_key(1))->offset, one.offset);
}

TEST_P(DiskTierF3, F3_TornOrCorruptHeaderIsSkippedOnRebuildAndItsNeighboursSurvive) {
  auto tier = open();
  for (uint64_t id : {1, 2, 3, 4}) put_ok(*tier, id);
  const DiskTier::RecordLocation two = *tier->location_of(disk_key(2));
  const DiskTier::RecordLocation three = *tier->location_of(disk_key(3));
  tier.reset();
  // Record 2's header block never landed (zeros); one bit of record 3's header flipped.
  overwrite(two.segment, two.offset, std::vector<char>(4096, 0));
  std::vector<char> b = read_bytes(three.segment, three.offset + 20, 1);
  b[0] ^= 0x01;
  overwrite(three.segment, three.offset + 20, b);

  tier = open();
  EXPECT_EQ(tier->chunk_count(), 2u);
  EXPECT_EQ(get_one(*tier, 2, kFaultChunk), ChunkStatus::kMiss);
  EXPECT_EQ(get_one(*tier, 3, kFaultChunk), ChunkStatus::kMiss);
  EXPECT_EQ(get_one(*tier, 1, kFaultChunk), ChunkStatus::kOk);
  EXPECT_EQ(get_one(*tier, 4, kFaultChunk), ChunkStatus::kOk);  // found past the damage
}

TEST_P(DiskTierF3, F3_ARecordOfAnotherKeyIsCorrupt) {
  auto tier = open();
  for (uint64_t id : {1, 2}) put_ok(*tier, id);
  // Key 1's place now holds a whole, valid record: key 2's.
  const DiskTier::RecordLocation one = *tier->location_of(disk_key(1));
  const DiskTier::RecordLocation two = *tier->location_of(disk_key(2));
  overwrite(one.segment, one.offset, read_bytes(two.segment, two.offset, two.bytes));
  EXPECT_EQ(get_one(*tier, 1, kFaultChunk), ChunkStatus::kCorrupt);
  EXPECT_EQ(get_one(*tier, 2, kFaultChunk), ChunkStatus::kOk);
}

ChunkStatus get_into(Tier& tier, uint64_t id, std::span<std::byte> dst) {
  const ChunkKey k = disk_key(id);
  Result<std::vector<ChunkStatus>> r =
      tier.get(std::span(&k, 1), std::span(&dst, 1), kFaultTimeout);
  return r ? (*r)[0] : ChunkStatus::kError;
}

TEST_P(DiskTierF3, F3_ATruncatedRecordIsCorruptNeverServed) {
  auto tier = open();
  for (uint64_t id : {1, 2}) put_ok(*tier, id);
  // A short read (the file cut inside the record) is kCorrupt whatever the buffers held: both
  // the tier's bounce buffer (an odd address) and the caller's own buffer (aligned, read into
  // directly) hold the record's bytes from an earlier read when the cut one is read.
  testing::AlignedChunk odd(kFaultChunk + 1);
  const std::span<std::byte> odd_span = odd.span().subspan(1);
  ASSERT_EQ(get_into(*tier, 2, odd_span), ChunkStatus::kOk);
  const auto cut = [&](uint64_t id) {
    const DiskTier::RecordLocation at = *tier->location_of(disk_key(id));
    std::filesystem::resize_file(at.segment, at.offset + 8192);
  };
  cut(2);
  EXPECT_EQ(get_into(*tier, 2, odd_span), ChunkStatus::kCorrupt);
  put_ok(*tier, 3);
  testing::AlignedChunk aligned(kFaultChunk);
  ASSERT_EQ(get_into(*tier, 3, aligned.span()), ChunkStatus::kOk);
  cut(3);
  EXPECT_EQ(get_into(*tier, 3, aligned.span()), ChunkStatus::kCorrupt);
  EXPECT_EQ(get_one(*tier, 1, kFaultChunk), ChunkStatus::kOk);
}

INSTANTIATE_TEST_SUITE_P(Backends, DiskTierF3, ::testing::Values(DiskIo::kAuto, DiskIo::kThreads),
                         [](const auto& info) {
                           return info.param == DiskIo::kThreads ? "Threads" : "IoUring";
                         });

// ---- H7: a failing disk goes DOWN and recovers ----

struct HealthRig {
  ManualClock clock;
  DiskTier* disk = nullptr;
  std::unique_ptr<HealthCheckedTier> tier;

  explicit HealthRig(const DiskTierOptions& o) {
    Result<std::unique_ptr<DiskTier>> opened = DiskTier::open(o);
    if (!opened) throw std::runtime_error(opened.error().to_string());
    disk = opened->get();
    tier = std::make_unique<HealthCheckedTier>(
        std::move(*opened),
        HealthOptions{.probe_initial = 1s, .probe_max = 8s, .probe_timeout = 1s, .clock = &clock});
  }
};

TEST(DiskTierHealth, H7_ADeletedSegmentFileMarksTheTierDownAndItRecovers) {
  testing::TempDir dir;
  std::optional<HealthRig> rig(std::in_place, options(dir.path()));
  for (uint64_t id = 0; id < 20; ++id) put_ok(*rig->tier, id);  // segments 1 (0-14) and 2
  const std::filesystem::path first = rig->disk->location_of(disk_key(3))->segment;
  ASSERT_NE(first, rig->disk->location_of(disk_key(17))->segment);
  // Found present by an earlier call: each call checks its segments again.
  ASSERT_EQ(get_one(*rig->tier, 3, kFaultChunk), ChunkStatus::kOk);
  std::filesystem::remove(first);

  // The chunk's bytes are still readable through the open file, but the file is gone: the
  // tier fails the call instead of serving from a deleted segment.
  std::vector<std::byte> out(kFaultChunk);
  const ChunkKey k = disk_key(3);
  const std::span<std::byte> d(out);
  Result<std::vector<ChunkStatus>> r =
      rig->tier->get(std::span(&k, 1), std::span(&d, 1), kFaultTimeout);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(rig->tier->state(), TierState::kDown);
  EXPECT_NE(rig->tier->metrics().last_error.find(first.filename().string()), std::string::npos)
      << rig->tier->metrics().last_error;
  // Skipped while DOWN.
  EXPECT_FALSE(put_one(*rig->tier, 50, kFaultChunk));
  EXPECT_EQ(rig->tier->counters().skipped_calls, 1u);

  rig->clock.advance(1s);
  EXPECT_EQ(rig->tier->probe_if_due(), TierState::kUp);
  EXPECT_EQ(get_one(*rig->tier, 3, kFaultChunk), ChunkStatus::kMiss);  // went with its file
  EXPECT_EQ(get_one(*rig->tier, 17, kFaultChunk), ChunkStatus::kOk);
  put_ok(*rig->tier, 50);
  EXPECT_EQ(rig->tier->state(), TierState::kUp);

  rig.reset();  // and a restart agrees
  HealthRig again(options(dir.path()));
  EXPECT_EQ(get_one(*again.tier, 3, kFaultChunk), ChunkStatus::kMiss);
  EXPECT_EQ(get_one(*again.tier, 17, kFaultChunk), ChunkStatus::kOk);
  EXPECT_EQ(get_one(*again.tier, 50, kFaultChunk), ChunkStatus::kOk);
}

TEST(DiskTierHealth, H7_ADeletedDirectoryMarksTheTierDownAndItRecovers) {
  testing::TempDir parent;
  const std::filesystem::path dir = parent.path() / "disk";
  HealthRig rig(options(dir));
  for (uint64_t id = 0; id < 5; ++id) put_ok(*rig.tier, id);
  std::filesystem::remove_all(dir);

  Result<std::vector<ChunkStatus>> r = put_one(*rig.tier, 10, kFaultChunk);
  ASSERT_FALSE(r);
  EXPECT_EQ(rig.tier->state(), TierState::kDown);
  EXPECT_NE(rig.tier->metrics().last_error.find("deleted"), std::string::npos)
      << rig.tier->metrics().last_error;

  rig.clock.advance(1s);
  EXPECT_EQ(rig.tier->probe_if_due(), TierState::kUp);
  EXPECT_TRUE(std::filesystem::exists(dir / "LOCK"));
  put_ok(*rig.tier, 10);
  EXPECT_EQ(get_one(*rig.tier, 10, kFaultChunk), ChunkStatus::kOk);
  EXPECT_EQ(get_one(*rig.tier, 1, kFaultChunk), ChunkStatus::kMiss);
}

// The full-disk scenario: a tier whose next segment does not fit goes DOWN naming why, stays
// DOWN while its probes find no room, and comes back once there is room.
void full_disk_scenario(const std::filesystem::path& dir, const std::function<void()>& fill,
                        const std::function<void()>& make_room, const std::string& expected) {
  HealthRig rig(options(dir));
  for (uint64_t id = 0; id < 15; ++id) put_ok(*rig.tier, id);  // segment 1, full
  fill();
  Result<std::vector<ChunkStatus>> r = put_one(*rig.tier, 15, kFaultChunk);  // needs segment 2
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find(expected), std::string::npos) << r.error().message;
  EXPECT_EQ(rig.tier->state(), TierState::kDown);

  rig.clock.advance(1s);
  EXPECT_EQ(rig.tier->probe_if_due(), TierState::kDown);  // still no room
  EXPECT_NE(rig.tier->metrics().last_error.find(expected), std::string::npos);

  make_room();
  rig.clock.advance(2s);
  EXPECT_EQ(rig.tier->probe_if_due(), TierState::kUp);
  put_ok(*rig.tier, 15);
  for (uint64_t id = 0; id < 16; ++id)
    EXPECT_EQ(get_one(*rig.tier, id, kFaultChunk), ChunkStatus::kOk);
}

TEST(DiskTierHealth, H7_AFullDiskMarksTheTierDownAndItRecovers) {
  // A real full file system: a 4 MiB tmpfs, mounted in a child process's own user and mount
  // namespaces (no privileges needed).
  testing::TempDir mount_point;
  const int status = testing::run_with_small_tmpfs(mount_point.path(), "4m", [&] {
    const std::filesystem::path filler = mount_point.path() / "filler";
    full_disk_scenario(
        mount_point.path() / "disk",
        [&] {  // 1 MiB of segment + 2.5 MiB: about 0.5 MiB left, less than a segment
          std::ofstream f(filler, std::ios::binary);
          const std::vector<char> bytes(5 << 19, 'x');
          f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
          ASSERT_TRUE(f.flush());
        },
        [&] { std::filesystem::remove(filler); }, "No space left on device");
  });
  // Under ThreadSanitizer it always skips: its runtime starts a thread in a forked child, and
  // unshare(CLONE_NEWUSER) refuses a process with more than one thread (EINVAL).
  // H7_AFileSizeLimitMarksTheTierDownAndItRecovers runs the same scenario there.
  if (status == testing::kNoUserNamespaces) {
    GTEST_SKIP() << "could not mount a small tmpfs in a user namespace";
  }
  EXPECT_EQ(status, 0);
}

TEST(DiskTierHealth, H7_AFileSizeLimitMarksTheTierDownAndItRecovers) {
  // The same through RLIMIT_FSIZE, which needs no namespaces: allocating a segment past the
  // limit fails with EFBIG (the tier ignores SIGXFSZ, whose default action ends the process).
  testing::TempDir dir;
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  full_disk_scenario(
      dir.path(),
      [&] {
        rlimit low = saved;
        low.rlim_cur = 512 << 10;
        ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &low), 0);
      },
      [&] { ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0); }, "File too large");
  ::setrlimit(RLIMIT_FSIZE, &saved);
}

}  // namespace
}  // namespace kvtier
