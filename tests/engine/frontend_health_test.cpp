// EngineHealth: the /health state machine, driven with explicit times (no sleeping).
#include <gtest/gtest.h>

#include "kvtier/engine/engine_health.h"

namespace kvtier {
namespace {

using std::chrono::milliseconds;

class EngineHealthTest : public ::testing::Test {
 protected:
  EngineHealthTest() : health(2, milliseconds(500)) {}
  void all_ready() {
    health.hello(0, t0);
    health.hello(1, t0);
  }
  TimePoint t0 = TimePoint(std::chrono::seconds(100));
  EngineHealth health;
};

TEST_F(EngineHealthTest, StartingUntilEveryCoreSaidHello) {
  EXPECT_EQ(health.report().http_status, 503);
  EXPECT_EQ(health.report().body["status"], "starting");
  health.hello(0, t0);
  EXPECT_EQ(health.report().body["status"], "starting");
  EXPECT_NE(health.report().body["reason"].get<std::string>().find("engine core 1"),
            std::string::npos);
  health.hello(1, t0);
  EXPECT_EQ(health.report().http_status, 200);
  EXPECT_EQ(health.report().body, nlohmann::json({{"status", "ok"}}));
  EXPECT_TRUE(health.serving(0));
}

TEST_F(EngineHealthTest, H2_FailureIsRecordedOnceAndStays) {
  all_ready();
  EXPECT_TRUE(health.fail(1, CoreFailure::kFailed, "engine core 1 failed: worker 1/0 died"));
  EXPECT_FALSE(health.fail(1, CoreFailure::kFailed, "engine core 1 killed by signal 9"));
  // Heartbeats and hellos after the failure change nothing.
  health.heartbeat(1, t0 + milliseconds(10), {});
  health.hello(1, t0 + milliseconds(20));
  const HealthReport report = health.report();
  EXPECT_EQ(report.http_status, 503);
  EXPECT_EQ(report.body["status"], "failed");
  EXPECT_EQ(report.body["reason"], "engine core 1 failed: worker 1/0 died");
  EXPECT_FALSE(health.serving(1));
  EXPECT_TRUE(health.serving(0));
}

TEST_F(EngineHealthTest, H3_FailedEngineNamesTheFirstFailureEvenWhenClosed) {
  all_ready();
  health.fail(0, CoreFailure::kFailed, "engine core 0 exited with status 1");
  health.fail(1, CoreFailure::kFailed, "engine core 1 exited with status 1");
  health.close();
  EXPECT_EQ(health.report().body["status"], "failed");
  EXPECT_EQ(health.report().body["reason"], "engine core 0 exited with status 1");
}

TEST_F(EngineHealthTest, H3_ClosedIs503) {
  all_ready();
  health.close();
  EXPECT_EQ(health.report().http_status, 503);
  EXPECT_EQ(health.report().body["status"], "closed");
  EXPECT_FALSE(health.serving(0));
}

TEST_F(EngineHealthTest, H6_StalledAfterTheTimeoutNotBefore) {
  all_ready();
  health.heartbeat(0, t0 + milliseconds(400), {});
  // Core 1 was last heard at t0: exactly at the timeout it is not stalled yet.
  EXPECT_TRUE(health.check_stalls(t0 + milliseconds(500)).empty());
  EXPECT_EQ(health.report().http_status, 200);
  const std::vector<uint32_t> stalled = health.check_stalls(t0 + milliseconds(501));
  ASSERT_EQ(stalled, std::vector<uint32_t>{1});
  const HealthReport report = health.report();
  EXPECT_EQ(report.http_status, 503);
  EXPECT_EQ(report.body["status"], "stalled");
  EXPECT_NE(report.body["reason"].get<std::string>().find("engine core 1 stalled"),
            std::string::npos);
  // Recorded once: a later check does not report it again, and it stays (H2).
  EXPECT_TRUE(health.check_stalls(t0 + milliseconds(700)).empty());
  health.heartbeat(1, t0 + milliseconds(800), {});
  EXPECT_EQ(health.report().body["status"], "stalled");
}

TEST_F(EngineHealthTest, H6_AStartingCoreIsNotStalledButIs503) {
  // Neither core said hello: a minute later, still "starting", not stalled.
  EXPECT_TRUE(health.check_stalls(t0 + std::chrono::seconds(60)).empty());
  EXPECT_EQ(health.report().http_status, 503);
  EXPECT_EQ(health.report().body["status"], "starting");
}

TEST_F(EngineHealthTest, H6_NoStallsWhileClosing) {
  all_ready();
  health.close();
  EXPECT_TRUE(health.check_stalls(t0 + std::chrono::seconds(10)).empty());
  EXPECT_EQ(health.report().body["status"], "closed");
}

TEST_F(EngineHealthTest, H7_DegradedAnswers200AndNamesIt) {
  all_ready();
  health.heartbeat(0, t0, {"cache server"});
  health.heartbeat(1, t0, {"host tier", "cache server"});
  HealthReport report = health.report();
  EXPECT_EQ(report.http_status, 200);
  EXPECT_EQ(report.body["status"], "degraded");
  EXPECT_EQ(report.body["degraded"], nlohmann::json({"cache server", "host tier"}));
  // Recovery is automatic: the next heartbeats name nothing.
  health.heartbeat(0, t0, {});
  health.heartbeat(1, t0, {});
  EXPECT_EQ(health.report().body["status"], "ok");
}

TEST_F(EngineHealthTest, FailureOutranksDegraded) {
  all_ready();
  health.heartbeat(0, t0, {"cache server"});
  health.fail(1, CoreFailure::kFailed, "engine core 1 failed: x");
  EXPECT_EQ(health.report().body["status"], "failed");
}

}  // namespace
}  // namespace kvtier
