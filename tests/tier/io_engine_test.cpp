// The disk tier's private pieces: the xxh3 builds agree with Debian's libxxhash, and both IO
// engines move bytes, keep to the deadline, and report short transfers.
#include "disk/io_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <random>

#include "checksum/xxh3_kernels.h"
#include "support/byte_pattern.h"
#include "support/temp_dir.h"

namespace kvtier::tier_internal {
namespace {

using namespace std::chrono_literals;

TEST(ChecksumKernels, EveryBuildThisCpuRunsAgreesWithLibxxhash) {
  std::vector<std::pair<const char*, uint64_t (*)(const void*, size_t, uint64_t)>> kernels = {
      {"baseline", xxh3_64_seeded_baseline}, {"dispatch", xxh3_64_seeded}};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) kernels.push_back({"avx2", xxh3_64_seeded_avx2});
  if (__builtin_cpu_supports("avx512f")) kernels.push_back({"avx512", xxh3_64_seeded_avx512});
#endif
  std::vector<std::byte> data((3 << 20) + 1);  // hashed from data + 1
  testing::fill_pattern(data.data(), data.size(), 42);
  std::mt19937_64 rng(7);
  std::vector<size_t> sizes = {0, 1, 3, 16, 17, 128, 129, 240, 241, 1024, 4096, 65536, 3 << 20};
  for (int i = 0; i < 200; ++i) sizes.push_back(rng() % 20000);
  for (size_t n : sizes) {
    const uint64_t seed = rng();
    const uint64_t want = XXH3_64bits_withSeed(data.data() + 1, n, seed);
    for (const auto& [name, kernel] : kernels) {
      ASSERT_EQ(kernel(data.data() + 1, n, seed), want) << name << " at " << n << " bytes";
    }
  }
  EXPECT_NE(std::string(xxh3_kernel_name()), "");
}

class IoEngineTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == IoBackend::kIoUring) {
      std::string why;
      engine_ = make_uring_engine(2, 4, &why);
      ASSERT_TRUE(engine_) << why;
    } else {
      engine_ = make_thread_engine(2);
    }
    fd_ = ::open((dir_.path() / "f").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override { ::close(fd_); }

  testing::TempDir dir_;
  std::unique_ptr<IoEngine> engine_;
  int fd_ = -1;
};

TEST_P(IoEngineTest, WritesAndReadsABatchWithHeaderAndPayloadVectors) {
  constexpr size_t n = 32;
  std::vector<AlignedBuffer> in(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    in[i].reserve(8192);
    out[i].reserve(8192);
    testing::fill_pattern(in[i].data(), 8192, i);
  }
  std::vector<int64_t> results(n, -1);
  const auto io = [&](bool write, std::vector<AlignedBuffer>& bufs) {
    return engine_->run(
        n, 4,
        [&](size_t i, IoSlot& slot, IoRequest& r) {
          r.fd = fd_;
          r.offset = (n - 1 - i) * 12288;  // out of order on disk
          r.write = write;
          if (write) std::memcpy(slot.header.data(), bufs[i].data(), 4096);
          r.add(slot.header.data(), 4096);
          r.add(bufs[i].data() + 4096, 4096);
          r.add(bufs[i].data(), 4096);  // three vectors
          return true;
        },
        [&](size_t i, IoSlot&, int64_t result) { results[i] = result; },
        SteadyClock::instance().now() + 10s);
  };
  ASSERT_EQ(io(true, in), n);
  for (int64_t r : results) EXPECT_EQ(r, 12288);
  std::vector<AlignedBuffer> back(n);
  for (auto& b : back) b.reserve(8192);
  ASSERT_EQ(io(false, back), n);
  for (size_t i = 0; i < n; ++i) {
    // Read back: [header slot][back+4096][back+0] from [in 0..4K][in 4K..8K][in 0..4K].
    EXPECT_EQ(std::memcmp(back[i].data() + 4096, in[i].data() + 4096, 4096), 0) << i;
    EXPECT_EQ(std::memcmp(back[i].data(), in[i].data(), 4096), 0) << i;
  }
}

TEST_P(IoEngineTest, NothingStartsAfterTheDeadlineAndShortReadsAreReported) {
  size_t prepared = 0;
  const size_t ran = engine_->run(
      8, 4,
      [&](size_t, IoSlot&, IoRequest&) {
        ++prepared;
        return false;
      },
      [](size_t, IoSlot&, int64_t) {}, SteadyClock::instance().now() - 1s);
  EXPECT_EQ(ran, 0u);
  EXPECT_EQ(prepared, 0u);

  ASSERT_EQ(::ftruncate(fd_, 6000), 0);
  int64_t got = -1;
  ASSERT_EQ(engine_->run(
                1, 4,
                [&](size_t, IoSlot& slot, IoRequest& r) {
                  r.fd = fd_;
                  r.add(slot.header.data(), 4096);
                  slot.bounce.reserve(4096);
                  r.add(slot.bounce.data(), 4096);
                  return true;
                },
                [&](size_t, IoSlot&, int64_t result) { got = result; },
                SteadyClock::instance().now() + 10s),
            1u);
  EXPECT_EQ(got, 6000);
}

TEST_P(IoEngineTest, LargeReadsCompletingTogetherAreEachCompletedOnceWithTheirBytes) {
  // Reads of 1 MiB: those that complete together are handed to the helper threads (on the
  // io_uring engine), whatever their number.
  constexpr size_t n = 8, kBytes = size_t{1} << 20;
  std::vector<AlignedBuffer> in(n), back(n);
  for (size_t i = 0; i < n; ++i) {
    in[i].reserve(kBytes);
    back[i].reserve(kBytes);
    testing::fill_pattern(in[i].data(), kBytes, i + 100);
  }
  std::vector<std::atomic<int>> completed(n);
  std::vector<int64_t> results(n, -1);
  const auto io = [&](bool write, std::vector<AlignedBuffer>& bufs) {
    for (auto& c : completed) c = 0;
    return engine_->run(
        n, 4,
        [&](size_t i, IoSlot&, IoRequest& r) {
          r.fd = fd_;
          r.offset = i * kBytes;
          r.write = write;
          r.add(bufs[i].data(), kBytes);
          return true;
        },
        [&](size_t i, IoSlot&, int64_t result) {
          ++completed[i];
          results[i] = result;
        },
        SteadyClock::instance().now() + 10s);
  };
  ASSERT_EQ(io(true, in), n);
  ASSERT_EQ(io(false, back), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(completed[i].load(), 1) << i;
    EXPECT_EQ(results[i], static_cast<int64_t>(kBytes)) << i;
    EXPECT_EQ(std::memcmp(back[i].data(), in[i].data(), kBytes), 0) << i;
  }
}

// A prepare that raises (an allocation that failed) stops the run as the deadline does: every
// request already prepared completes first (the kernel may be writing its buffers), then run()
// raises, and the engine serves the next runs (a ring is not lost with the exception).
TEST_P(IoEngineTest, APrepareThatRaisesEndsTheRunOnlyAfterWhatWasSubmitted) {
  constexpr size_t n = 8;
  std::vector<AlignedBuffer> bufs(n);
  for (size_t i = 0; i < n; ++i) {
    bufs[i].reserve(4096);
    testing::fill_pattern(bufs[i].data(), 4096, i);
  }
  const auto prepare_write = [&](size_t i, IoRequest& r) {
    r.fd = fd_;
    r.offset = i * 4096;
    r.write = true;
    r.add(bufs[i].data(), 4096);
  };
  for (int round = 0; round < 3; ++round) {  // more rounds than the engine has rings
    std::atomic<int> prepared{0}, completed{0};
    EXPECT_THROW(engine_->run(
                     n, 4,
                     [&](size_t i, IoSlot&, IoRequest& r) {
                       if (i == 3) throw std::bad_alloc();
                       prepare_write(i, r);
                       ++prepared;
                       return true;
                     },
                     [&](size_t, IoSlot&, int64_t result) {
                       EXPECT_EQ(result, 4096);
                       ++completed;
                     },
                     SteadyClock::instance().now() + 10s),
                 std::bad_alloc);
    EXPECT_GE(prepared.load(), 3);
    EXPECT_EQ(completed.load(), prepared.load()) << "round " << round;
  }
  std::atomic<int> completed{0};
  EXPECT_EQ(engine_->run(
                n, 4,
                [&](size_t i, IoSlot&, IoRequest& r) {
                  prepare_write(i, r);
                  return true;
                },
                [&](size_t, IoSlot&, int64_t) { ++completed; }, SteadyClock::instance().now() + 2s),
            n);
  EXPECT_EQ(completed.load(), static_cast<int>(n));
}

INSTANTIATE_TEST_SUITE_P(Backends, IoEngineTest,
                         ::testing::Values(IoBackend::kIoUring, IoBackend::kThreads),
                         [](const auto& info) {
                           return info.param == IoBackend::kThreads ? "Threads" : "IoUring";
                         });

}  // namespace
}  // namespace kvtier::tier_internal
