// ProgressWatchdog (H8) with time passed in: what counts as progress, and what is reported.
#include "kvtier/engine/progress_watchdog.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

using namespace std::chrono_literals;

ProgressSnapshot one(uint64_t mark, bool running, uint64_t finished = 0) {
  return ProgressSnapshot{.requests = {{.id = "r1", .mark = mark, .running = running}},
                          .finished = finished};
}

class Watchdog : public ::testing::Test {
 protected:
  ProgressWatchdog dog{2s};
  TimePoint now{};
  std::optional<std::string> at(Duration d, const ProgressSnapshot& s) {
    now += d;
    return dog.observe(now, s);
  }
};

TEST_F(Watchdog, H8_RunningRequestThatComputesNothingIsReportedAfterTheTimeout) {
  EXPECT_FALSE(at(0s, one(16, true)));
  EXPECT_FALSE(at(1s, one(16, true)));
  EXPECT_FALSE(at(1s, one(16, true)));  // exactly the timeout: not yet
  const auto reason = at(10ms, one(16, true));
  ASSERT_TRUE(reason);
  EXPECT_NE(reason->find("request r1"), std::string::npos) << *reason;
  EXPECT_NE(reason->find("while running"), std::string::npos) << *reason;
}

TEST_F(Watchdog, H8_ARequestFirstSeenWithComputedTokensIsProgress) {
  // Snapshots come at the heartbeat's pace: r1 arrived and computed 16 tokens in between. The
  // stall is then the request's, named as such, and not reported early as the core's.
  EXPECT_FALSE(at(0s, ProgressSnapshot{}));
  EXPECT_FALSE(at(1s, one(16, true)));
  EXPECT_FALSE(at(1s, one(16, true)));
  EXPECT_FALSE(at(1s, one(16, true)));  // the timeout since its tokens: not yet
  const auto reason = at(10ms, one(16, true));
  ASSERT_TRUE(reason);
  EXPECT_NE(reason->find("request r1"), std::string::npos) << *reason;
}

TEST_F(Watchdog, H8_ARisingMarkIsProgress) {
  for (uint64_t mark = 16; mark < 40; ++mark) EXPECT_FALSE(at(1s, one(mark, true)));
}

TEST_F(Watchdog, H8_RecomputingAfterPreemptionIsNotProgressAndOnlyRunningTimeCounts) {
  EXPECT_FALSE(at(0s, one(64, true)));
  EXPECT_FALSE(at(1500ms, one(64, true)));
  // Preempted while others finish: waiting time does not count, and recomputing up to the old
  // mark is no progress.
  for (uint64_t finished = 1; finished <= 10; ++finished) {
    EXPECT_FALSE(at(1s, one(64, false, finished)));
  }
  EXPECT_FALSE(at(400ms, one(64, true, 10)));
  EXPECT_TRUE(at(200ms, one(64, true, 10)));
}

TEST_F(Watchdog, H8_CoreWithWaitingWorkThatCompletesNothingIsReported) {
  EXPECT_FALSE(at(0s, one(0, false)));
  EXPECT_FALSE(at(2s, one(0, false)));
  const auto reason = at(1s, one(0, false));
  ASSERT_TRUE(reason);
  EXPECT_NE(reason->find("1 waiting"), std::string::npos) << *reason;
}

TEST_F(Watchdog, H8_TransfersInFlightAndFinishedRequestsKeepTheCoreAlive) {
  ProgressSnapshot loading = one(0, false);
  loading.transfers_in_flight = true;
  EXPECT_FALSE(at(0s, loading));
  EXPECT_FALSE(at(10s, loading));
  // Another request keeps finishing while r1 waits.
  for (uint64_t finished = 1; finished < 10; ++finished) {
    EXPECT_FALSE(at(1s, one(0, false, finished)));
  }
  EXPECT_FALSE(at(0s, ProgressSnapshot{}));
  EXPECT_FALSE(at(100s, ProgressSnapshot{}));  // idle is not stuck
}

}  // namespace
}  // namespace kvtier
