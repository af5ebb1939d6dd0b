#include "staging_buffers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <stdexcept>

namespace kvtier::cache_internal {
namespace {

TEST(StagingBuffers, HandsOutEachBufferOnceAlignedForDirectIo) {
  StagingBuffers staging(10'000, 3);  // not a multiple of 4 KiB: each buffer still starts on one
  std::set<std::byte*> seen;
  std::vector<uint32_t> taken;
  for (int i = 0; i < 3; ++i) {
    const std::optional<uint32_t> b = staging.take();
    ASSERT_TRUE(b.has_value());
    const std::span<std::byte> bytes = staging.bytes(*b);
    EXPECT_EQ(bytes.size(), 10'000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes.data()) % 4096, 0u);
    std::memset(bytes.data(), i, bytes.size());  // every byte is writable
    EXPECT_TRUE(seen.insert(bytes.data()).second) << "a buffer went out twice";
    taken.push_back(*b);
  }
  EXPECT_FALSE(staging.take().has_value());  // all out
  // The buffers do not overlap: each still holds what was written to it.
  for (int i = 0; i < 3; ++i) {
    const std::span<std::byte> bytes = staging.bytes(taken[i]);
    EXPECT_EQ(bytes.front(), std::byte(i));
    EXPECT_EQ(bytes.back(), std::byte(i));
  }
  staging.give(taken[1]);
  EXPECT_EQ(staging.take(), taken[1]);  // the one given back, and only it
  EXPECT_FALSE(staging.take().has_value());
}

TEST(StagingBuffers, RejectsAZeroSize) {
  EXPECT_THROW(StagingBuffers(0, 4), std::invalid_argument);
  EXPECT_THROW(StagingBuffers(4096, 0), std::invalid_argument);
}

}  // namespace
}  // namespace kvtier::cache_internal
