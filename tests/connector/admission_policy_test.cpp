// The admission policy's parts on their own: the frequency sketch's counts and aging, and the
// policy's switch between store_threshold and "seen twice" as reuse comes and goes.
#include "admission_policy.h"

#include <gtest/gtest.h>

#include <vector>

#include "frequency_sketch.h"
#include "kvtier/core/chunk_key.h"

namespace kvtier::testing {
namespace {

ChunkKey key(uint32_t i) {
  const uint32_t token = i;
  return next_chunk_key(ChunkKey{}, std::span(&token, 1));
}

TEST(FrequencySketch, CountsEachKeyAndNeverUnderestimates) {
  FrequencySketch sketch(12);
  for (uint32_t i = 0; i < 100; ++i) {
    for (uint32_t n = 0; n <= i % 4; ++n) sketch.add(key(i));
  }
  for (uint32_t i = 0; i < 100; ++i) EXPECT_GE(sketch.estimate(key(i)), i % 4 + 1) << i;
  size_t unseen_nonzero = 0;
  for (uint32_t i = 1000; i < 2000; ++i) unseen_nonzero += sketch.estimate(key(i)) > 0;
  EXPECT_LE(unseen_nonzero, 5u) << "a sparse sketch reads 0 for keys it never saw";
}

TEST(FrequencySketch, HalvesEveryCounterAfterAQuarterRowOfAdds) {
  FrequencySketch sketch(8);  // rows of 256: halves every 64 adds
  for (int n = 0; n < 4; ++n) sketch.add(key(7));
  for (uint32_t i = 0; i < 59; ++i) sketch.add(key(100 + i));
  EXPECT_EQ(sketch.halvings(), 0u);
  EXPECT_GE(sketch.estimate(key(7)), 4u);
  sketch.add(key(99));
  EXPECT_EQ(sketch.halvings(), 1u);
  EXPECT_GE(sketch.estimate(key(7)), 2u);
  EXPECT_LT(sketch.estimate(key(7)), 4u) << "counts decay";
}

std::vector<ChunkKey> prompt(uint32_t first, uint32_t chunks) {
  std::vector<ChunkKey> keys;
  for (uint32_t c = 0; c < chunks; ++c) keys.push_back(key(first + c));
  return keys;
}

void observe(AdmissionPolicy& policy, const std::vector<ChunkKey>& keys) {
  const std::span<const ChunkKey> groups[] = {keys};
  policy.observe(groups);
}

TEST(AdmissionPolicy, StoresEverythingUntilAWindowOfRequestsReusedNothing) {
  AdmissionPolicy policy(1, 4);
  for (uint32_t r = 0; r < 3; ++r) {
    observe(policy, prompt(1000 * r, 3));
    EXPECT_TRUE(policy.admits(key(1000 * r + 1))) << "the window is not full yet: " << r;
  }
  observe(policy, prompt(3000, 3));
  EXPECT_FALSE(policy.reuse_seen());
  EXPECT_EQ(policy.threshold(), 2u);
  EXPECT_FALSE(policy.admits(key(3001))) << "asked for once, and nothing is reused";

  // A prompt that begins with an earlier prompt's prefix: reuse, store everything again.
  std::vector<ChunkKey> again = prompt(3000, 2);
  again.push_back(key(5000));
  observe(policy, again);
  EXPECT_TRUE(policy.reuse_seen());
  EXPECT_EQ(policy.threshold(), 1u);
  EXPECT_TRUE(policy.admits(key(5000))) << "a chunk seen once is stored again";

  // It takes a whole window of requests without reuse to stop again.
  for (uint32_t r = 0; r < 3; ++r) observe(policy, prompt(10000 + 1000 * r, 2));
  EXPECT_TRUE(policy.reuse_seen());
  observe(policy, prompt(20000, 2));
  EXPECT_FALSE(policy.reuse_seen());
}

TEST(AdmissionPolicy, ChunksAskedForTwiceAreStoredWithoutReuse) {
  AdmissionPolicy policy(1, 2);
  observe(policy, prompt(100, 2));
  observe(policy, prompt(200, 2));
  ASSERT_FALSE(policy.reuse_seen());
  // A request whose prompt shares no first chunk but repeats a later chunk key (another group's
  // keys, say): the repeated chunk is admitted, the rest not.
  observe(policy, {key(300), key(201)});
  EXPECT_FALSE(policy.reuse_seen());
  EXPECT_TRUE(policy.admits(key(201)));
  EXPECT_FALSE(policy.admits(key(300)));
}

TEST(AdmissionPolicy, WindowZeroLeavesItToStoreThreshold) {
  AdmissionPolicy all(1, 0);
  AdmissionPolicy third(3, 0);
  for (uint32_t r = 0; r < 100; ++r) {
    observe(all, prompt(1000 * r, 2));
    observe(third, prompt(1000 * r, 2));
  }
  EXPECT_TRUE(all.admits(key(99000)));
  EXPECT_EQ(third.threshold(), 3u);
  observe(third, prompt(5, 1));
  observe(third, prompt(5, 1));
  EXPECT_FALSE(third.admits(key(5)));
  observe(third, prompt(5, 1));
  EXPECT_TRUE(third.admits(key(5)));
}

TEST(AdmissionPolicy, ClearForgetsCountsAndReuse) {
  AdmissionPolicy policy(1, 1);
  observe(policy, prompt(100, 2));
  ASSERT_FALSE(policy.reuse_seen());
  policy.clear();
  EXPECT_TRUE(policy.reuse_seen()) << "a cleared policy starts by storing";
  observe(policy, prompt(100, 2));
  EXPECT_FALSE(policy.reuse_seen()) << "the earlier prompt was forgotten";
}

}  // namespace
}  // namespace kvtier::testing
