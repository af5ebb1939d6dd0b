#include "kvtier/tier/health_checked_tier.h"

#include <gtest/gtest.h>

#include "support/fake_tier.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::FakeTier;

constexpr Duration kCallTimeout = 1s;
const ChunkKey kHealthKey{.lo = 1, .hi = 2};

struct Rig {
  ManualClock clock;
  FakeTier* fake = nullptr;
  std::unique_ptr<HealthCheckedTier> tier;

  Rig() {
    auto inner = std::make_unique<FakeTier>("fake");
    fake = inner.get();
    tier = std::make_unique<HealthCheckedTier>(
        std::move(inner),
        HealthOptions{.probe_initial = 1s, .probe_max = 4s, .probe_timeout = 1s, .clock = &clock});
  }
  Result<std::vector<bool>> contains() {
    return tier->contains(std::span(&kHealthKey, 1), kCallTimeout);
  }
};

TEST(HealthCheckedTier, H7_FailingTierIsMarkedDownAndSkipped) {
  Rig rig;
  ASSERT_TRUE(rig.contains());
  EXPECT_EQ(rig.tier->state(), TierState::kUp);
  rig.fake->set_unreachable(true);
  EXPECT_FALSE(rig.contains());
  EXPECT_EQ(rig.tier->state(), TierState::kDown);
  const TierMetrics m = rig.tier->metrics();
  EXPECT_EQ(m.name, "fake");
  EXPECT_EQ(m.state, TierState::kDown);
  EXPECT_NE(m.last_error.find("unreachable"), std::string::npos) << m.last_error;
  // Skipped while down: the tier is not called at all, and the caller learns at once.
  const int pings = rig.fake->pings();
  for (int i = 0; i < 5; ++i) {
    Result<std::vector<bool>> r = rig.contains();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  }
  EXPECT_EQ(rig.fake->pings(), pings);
  EXPECT_EQ(rig.tier->counters().skipped_calls, 5u);
}

// A tier out of memory fails its calls and is DOWN, as an unreachable one: the exception would
// otherwise end the thread that called it (a tier mover's) and the process with it.
TEST(HealthCheckedTier, H7_ATierOutOfMemoryIsDownNotACrash) {
  Rig rig;
  rig.fake->set_out_of_memory(true);
  std::vector<std::byte> bytes(8);
  const std::span<const std::byte> chunk(bytes);
  const Result<std::vector<ChunkStatus>> put =
      rig.tier->put(std::span(&kHealthKey, 1), std::span(&chunk, 1), kCallTimeout);
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(rig.tier->state(), TierState::kDown);
  EXPECT_NE(rig.tier->metrics().last_error.find("out of memory"), std::string::npos);
  // Its probe is a call too: while it still fails the tier stays DOWN, then it recovers.
  rig.clock.advance(1s);
  EXPECT_FALSE(rig.contains());
  EXPECT_EQ(rig.tier->state(), TierState::kDown);
  rig.fake->set_out_of_memory(false);
  rig.clock.advance(2s);
  EXPECT_TRUE(rig.contains());
  EXPECT_EQ(rig.tier->state(), TierState::kUp);
}

TEST(HealthCheckedTier, H7_ProbesWithExponentialBackoffThenRecovers) {
  Rig rig;
  rig.fake->set_unreachable(true);
  ASSERT_FALSE(rig.contains());  // down; first probe due after 1 s
  rig.clock.advance(999ms);
  EXPECT_EQ(rig.tier->probe_if_due(), TierState::kDown);
  EXPECT_EQ(rig.fake->pings(), 0);  // not due yet
  rig.clock.advance(1ms);
  EXPECT_EQ(rig.tier->probe_if_due(), TierState::kDown);
  EXPECT_EQ(rig.fake->pings(), 1);  // failed: next in 2 s
  rig.clock.advance(1999ms);
  rig.tier->probe_if_due();
  EXPECT_EQ(rig.fake->pings(), 1);
  rig.clock.advance(1ms);
  rig.tier->probe_if_due();
  EXPECT_EQ(rig.fake->pings(), 2);  // failed: next in 4 s (the cap)
  rig.clock.advance(4s);
  rig.tier->probe_if_due();
  EXPECT_EQ(rig.fake->pings(), 3);  // failed: still 4 s, capped
  rig.clock.advance(3999ms);
  rig.tier->probe_if_due();
  EXPECT_EQ(rig.fake->pings(), 3);
  // The tier comes back; the next due probe finds it, with no call needed from outside.
  rig.fake->set_unreachable(false);
  rig.clock.advance(1ms);
  EXPECT_EQ(rig.tier->probe_if_due(), TierState::kUp);
  EXPECT_TRUE(rig.tier->metrics().last_error.empty());
  EXPECT_TRUE(rig.contains());
}

TEST(HealthCheckedTier, H7_ACallAtTheProbeTimeProbesAndProceeds) {
  Rig rig;
  rig.fake->set_unreachable(true);
  ASSERT_FALSE(rig.contains());
  rig.fake->set_unreachable(false);
  EXPECT_FALSE(rig.contains());  // still within the backoff: skipped
  rig.clock.advance(1s);
  Result<std::vector<bool>> r = rig.contains();  // probe succeeds, the call goes through
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(rig.tier->state(), TierState::kUp);
}

TEST(HealthCheckedTier, H7_MissesAndCorruptChunksAreAnswersNotFailures) {
  Rig rig;
  rig.fake->insert(kHealthKey,
                   std::vector<std::byte>(10));  // wrong size: the fake answers kCorrupt
  const ChunkKey absent{.lo = 9, .hi = 9};
  std::vector<std::byte> a(16), b(16);
  const std::vector<ChunkKey> keys = {kHealthKey, absent};
  const std::vector<std::span<std::byte>> dst = {a, b};
  Result<std::vector<ChunkStatus>> r = rig.tier->get(keys, dst, kCallTimeout);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, (std::vector{ChunkStatus::kCorrupt, ChunkStatus::kMiss}));
  EXPECT_EQ(rig.tier->state(), TierState::kUp);
  const TierCounters c = rig.tier->counters();
  EXPECT_EQ(c.corrupt, 1u);
  EXPECT_EQ(c.misses, 1u);
}

TEST(HealthCheckedTier, H7_APartDownIsDegradedNotDownAndItsKeysAreSkipped) {
  Rig rig;
  const ChunkKey other{.lo = 3, .hi = 4};
  rig.fake->set_down_parts({{.name = "node-b", .error = "refused"}}, {kHealthKey});
  std::vector<std::byte> a(16, std::byte{1}), b(16, std::byte{2});
  const std::vector<ChunkKey> keys = {kHealthKey, other};
  const std::vector<std::span<const std::byte>> chunks = {a, b};
  Result<std::vector<ChunkStatus>> put = rig.tier->put(keys, chunks, kCallTimeout);
  ASSERT_TRUE(put);
  EXPECT_EQ(*put, (std::vector{ChunkStatus::kSkipped, ChunkStatus::kOk}));
  // Skipped keys are neither errors nor a reason to take the whole tier down.
  EXPECT_EQ(rig.tier->state(), TierState::kDegraded);
  TierMetrics m = rig.tier->metrics();
  EXPECT_EQ(m.state, TierState::kDegraded);
  ASSERT_EQ(m.down_parts.size(), 1u);
  EXPECT_EQ(m.down_parts[0].name, "node-b");
  EXPECT_EQ(m.down_parts[0].error, "refused");
  EXPECT_EQ(m.counters.skipped_keys, 1u);
  EXPECT_EQ(m.counters.errors, 0u);
  EXPECT_EQ(degraded_names(m), std::vector<std::string>{"fake/node-b"});
  EXPECT_EQ(*rig.tier->contains(keys, kCallTimeout), (std::vector<bool>{false, true}));
  // The wrapper lets the tier probe its parts; it recovers by itself.
  rig.fake->recover_parts_on_probe(true);
  EXPECT_EQ(rig.tier->probe_if_due(), TierState::kUp);
  EXPECT_EQ(rig.fake->part_probes(), 1);
  EXPECT_TRUE(degraded_names(rig.tier->metrics()).empty());
  // A DOWN tier is named whole, and does not probe parts until its own probe succeeds.
  rig.fake->set_unreachable(true);
  EXPECT_FALSE(rig.contains());
  EXPECT_EQ(degraded_names(rig.tier->metrics()), std::vector<std::string>{"fake"});
  EXPECT_EQ(rig.tier->probe_if_due(), TierState::kDown);
  EXPECT_EQ(rig.fake->part_probes(), 1);
}

// A probe that raises is a failed probe: the state is not left probing, so the next probe runs
// when due and a recovered part comes back (it used to stay DOWN for good).
TEST(HealthState, H7_AProbeThatRaisesFailsAndTheNextOneStillRuns) {
  ManualClock clock;
  HealthState state(
      HealthOptions{.probe_initial = 1s, .probe_max = 4s, .probe_timeout = 1s, .clock = &clock});
  state.mark_down("broken");
  clock.advance(1s);
  EXPECT_THROW(state.admit([]() -> Status { throw std::runtime_error("probe bug"); }),
               std::runtime_error);
  EXPECT_FALSE(state.up());
  clock.advance(2s);  // the backoff doubled
  bool probed = false;
  EXPECT_TRUE(state.admit([&]() -> Status {
    probed = true;
    return {};
  }));
  EXPECT_TRUE(probed);
  EXPECT_TRUE(state.up());
}

TEST(HealthCheckedTier, RejectsBadOptions) {
  EXPECT_THROW(HealthCheckedTier(nullptr, {}), std::invalid_argument);
  EXPECT_THROW(
      HealthCheckedTier(std::make_unique<FakeTier>(), {.probe_initial = 2s, .probe_max = 1s}),
      std::invalid_argument);
  EXPECT_THROW(HealthCheckedTier(std::make_unique<FakeTier>(), {.probe_initial = 0s}),
               std::invalid_argument);
}

}  // namespace
}  // namespace kvtier
