// The engine core and its workers as real processes, with the test as the frontend.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <thread>

#include "engine/core_process_harness.h"
#include "engine/engine_runs.h"
#include "kvtier/engine/byte_vocab.h"

namespace kvtier::testing {
namespace {

TEST(EngineCore, ServesARequestOnOneAndTwoRanks) {
  std::vector<TokenId> first;
  for (uint32_t world : {1u, 2u}) {
    CoreProcessHarness h(small_engine(world));
    ASSERT_TRUE(h.wait_ready()) << h.failed().value_or("no hello");
    const Completion c = h.complete(text(100, 1), 8);
    ASSERT_TRUE(c.done);
    EXPECT_EQ(c.error, "");
    EXPECT_EQ(c.tokens.size(), 8u);
    if (first.empty()) first = c.tokens;
    EXPECT_EQ(c.tokens, first) << "the same output on every world size";
  }
}

// The core's messages to its frontend are never dropped: while the frontend reads nothing, the
// core sends far more than ZeroMQ's default high-water marks hold (1,000 messages a side), and
// every request still gets every token and its end.
TEST(EngineCore, MessagesToAFrontendThatFallsBehindAreNeverDropped) {
  CoreProcessHarness h(small_engine(1));
  ASSERT_TRUE(h.wait_ready()) << h.failed().value_or("no hello");
  constexpr size_t kRequests = 16;
  constexpr size_t kTokens = 200;  // an `out` per request per step: 3,200 messages
  std::vector<std::string> ids;
  for (size_t i = 0; i < kRequests; ++i)
    ids.push_back(h.add(text(8, static_cast<char>(i)), kTokens));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the frontend falls behind
  ASSERT_TRUE(h.wait_until(
      [&] {
        return std::ranges::all_of(ids,
                                   [&](const std::string& id) { return h.completions()[id].done; });
      },
      std::chrono::seconds(60)))
      << h.failed().value_or("requests never ended");
  for (const std::string& id : ids) {
    EXPECT_EQ(h.completions()[id].error, "") << id;
    EXPECT_EQ(h.completions()[id].tokens.size(), kTokens) << id;
  }
}

}  // namespace
}  // namespace kvtier::testing

namespace kvtier::testing {
namespace {

// Both transfer granularities: whole-request loads, and layer-wise ones (the default), where a
// loading request is computed in its load's step.
class EngineCoreGranularity : public ::testing::TestWithParam<TransferGranularity> {
 protected:
  Config device(bool offload, uint32_t world_size = 1) const {
    Config c = small_device(offload, world_size);
    c.connector.transfer_granularity = GetParam();
    return c;
  }
};

TEST_P(EngineCoreGranularity, SharedPrefixEvictedFromTheDeviceIsLoadedFromKvtierWithTheSameOutput) {
  const RunResult off = shared_prefix_run(device(false));
  const RunResult on = shared_prefix_run(device(true));
  EXPECT_EQ(on.outputs, off.outputs);
  ASSERT_EQ(on.cached.size(), 6u);
  EXPECT_EQ(off.cached[3], 0u) << "the device no longer holds A's prefix";
  EXPECT_GE(on.cached[3], 384u) << "A's prefix (24 blocks) comes back from the host cache";
  EXPECT_GE(on.counters.value("kvtier_hit_tokens_total", 0), 384);
}

TEST_P(EngineCoreGranularity, InjectedLoadAndStoreFaultsLeaveOutputsIdentical) {
  const RunResult clean = shared_prefix_run(device(true, 2));
  Config faulty = device(true, 2);
  faulty.faults.submit_failure_rate = 0.3;
  faulty.faults.latched_error_rate = 0.2;
  faulty.faults.delay_rate = 0.2;
  const RunResult run = shared_prefix_run(faulty);
  EXPECT_EQ(run.outputs, clean.outputs);
  EXPECT_GT(run.counters.value("kvtier_stores_failed_total", 0), 0) << run.counters.dump();
  // The workers' injectors report what they drew (the chaos bench counts faults by them).
  EXPECT_GT(run.counters.value("fault_injector_copy_calls_total", 0), 0) << run.counters.dump();
  EXPECT_GT(run.counters.value("fault_injector_submit_failures_total", 0), 0);
  EXPECT_GT(run.counters.value("fault_injector_delays_total", 0), 0);
  EXPECT_FALSE(clean.counters.contains("fault_injector_copy_calls_total"));
}

INSTANTIATE_TEST_SUITE_P(EngineCore, EngineCoreGranularity,
                         ::testing::Values(TransferGranularity::kRequest,
                                           TransferGranularity::kLayer),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace kvtier::testing

namespace kvtier::testing {
namespace {

using std::chrono::milliseconds;

// A request that runs long enough to be in flight when a worker goes.
std::string start_long_request(CoreProcessHarness& h) {
  const std::string id = h.add(text(64, 5), 4000);  // fits small_engine's device
  h.wait_until([&] { return !h.completions()[id].tokens.empty(); }, std::chrono::seconds(30));
  return id;
}

TEST(EngineCoreHealth, H2_WorkerDeathIsReportedNamingTheWorkerAndRequestsEnd) {
  Config config = small_engine(2);
  config.model.max_context = 8192;
  CoreProcessHarness h(config);
  ASSERT_TRUE(h.wait_ready());
  const std::string id = start_long_request(h);
  ASSERT_EQ(h.worker_pids().size(), 2u);
  const auto killed = std::chrono::steady_clock::now();
  send_signal(h.worker_pids()[1], SIGKILL);
  ASSERT_TRUE(h.wait_until([&] { return h.failed().has_value(); }, milliseconds(1000)));
  const auto reported = std::chrono::steady_clock::now() - killed;
  EXPECT_NE(h.failed()->find("worker 0/1"), std::string::npos) << *h.failed();
  EXPECT_NE(h.failed()->find("died"), std::string::npos) << *h.failed();
  EXPECT_LT(reported, milliseconds(500));
  // H5: the request in flight ends with an error, promptly.
  ASSERT_TRUE(h.wait_until([&] { return h.completions()[id].done; }, milliseconds(1000)));
  EXPECT_NE(h.completions()[id].error.find("worker 0/1"), std::string::npos);
  EXPECT_TRUE(h.completions()[id].ended_after_core_failed)
      << "the failure is reported before any cleanup";
}

// Stop signals (StopSignals): a worker takes SIGTERM as a shutdown message and exits 0 rather
// than dying of it; its engine core sees the exit as any other.
TEST(EngineCoreStopSignals, WorkerExitsZeroOnSigterm) {
  CoreProcessHarness h(small_engine(2));
  ASSERT_TRUE(h.wait_ready());
  ASSERT_EQ(h.worker_pids().size(), 2u);
  send_signal(h.worker_pids()[1], SIGTERM);
  ASSERT_TRUE(h.wait_until([&] { return h.failed().has_value(); }, std::chrono::seconds(10)));
  EXPECT_NE(h.failed()->find("worker 0/1"), std::string::npos) << *h.failed();
  EXPECT_NE(h.failed()->find("died: exited with status 0"), std::string::npos) << *h.failed();
}

// An engine core takes SIGTERM (or SIGINT) as a shutdown message: its workers get theirs, and
// it exits 0.
TEST(EngineCoreStopSignals, EngineCoreShutsDownAndExitsZeroOnSigterm) {
  for (int signo : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(signo == SIGTERM ? "SIGTERM" : "SIGINT");
    CoreProcessHarness h(small_engine(2));
    ASSERT_TRUE(h.wait_ready());
    h.core().signal(signo);
    ASSERT_TRUE(h.core().wait_exit(std::chrono::seconds(10)));
    EXPECT_EQ(h.core().poll_exit(), "exited with status 0");
    EXPECT_FALSE(h.failed().has_value()) << *h.failed();
  }
}

TEST(EngineCoreHealth, H6_StoppedWorkerIsReportedStalled) {
  Config config = small_engine(2);
  config.engine.stall_timeout_s = 0.5;
  config.model.max_context = 8192;
  CoreProcessHarness h(config);
  ASSERT_TRUE(h.wait_ready());
  start_long_request(h);
  send_signal(h.worker_pids()[0], SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_TRUE(h.wait_until([&] { return h.failed().has_value(); }, milliseconds(1500)));
  EXPECT_GE(std::chrono::steady_clock::now() - stopped, milliseconds(400))
      << "not before the timeout";
  EXPECT_NE(h.failed()->find("worker 0/0"), std::string::npos) << *h.failed();
  EXPECT_NE(h.failed()->find("stalled"), std::string::npos) << *h.failed();
  send_signal(h.worker_pids()[0], SIGCONT);
}

// H6 is about a silent process, not a long step: a worker whose forward pass takes longer than
// stall_timeout_s keeps heartbeating while it waits for it.
TEST(EngineCoreHealth, H6_WorkerInAStepLongerThanTheStallTimeoutIsNotStalled) {
  Config config = small_engine(2);
  config.engine.stall_timeout_s = 0.3;
  config.faults.slow_forward_s = 1.0;  // every step: more than three stall timeouts
  CoreProcessHarness h(config);
  ASSERT_TRUE(h.wait_ready());
  const Completion c = h.complete(text(40, 8), 2, std::chrono::seconds(20));
  EXPECT_TRUE(c.done);
  EXPECT_TRUE(c.error.empty()) << c.error;
  EXPECT_EQ(c.tokens.size(), 2u);
  EXPECT_FALSE(h.failed().has_value()) << *h.failed();
}

// The request's only step (its prefill, max_tokens 1) stores its chunks layer by layer, and each
// store's end marker fails. No step follows, so no worker's next start_load can find the
// fail-stop (F7): the engine core itself must turn FAILED after that step.
TEST(EngineCoreHealth, H4_UnprovableTransferFailStopsTheEngine) {
  Config config = small_engine(2);
  config.faults.record_failure_rate = 1.0;  // every end marker fails: Unprovable (F7)
  CoreProcessHarness h(config);
  ASSERT_TRUE(h.wait_ready());
  const Completion c = h.complete(text(200, 6), 1, std::chrono::seconds(10));
  EXPECT_TRUE(c.done);
  ASSERT_TRUE(h.wait_until([&] { return h.failed().has_value(); }, std::chrono::seconds(5)));
  EXPECT_NE(h.failed()->find("fail-stop"), std::string::npos) << *h.failed();
}

// F7: a rank that fail-stopped in start_load (whole-request stores go there, and each one's end
// marker fails) computes nothing more: it leaves before the step's forward pass, so the request
// gets no token of that step (only the prefill's, computed before any store was sent).
TEST(EngineCoreHealth, F7_RankThatFailStopsInStartLoadLeavesBeforeItsForwardPass) {
  Config config = small_engine(2);
  config.connector.transfer_granularity = TransferGranularity::kRequest;
  config.faults.record_failure_rate = 1.0;
  config.faults.direction = FaultDirection::kStore;
  CoreProcessHarness h(config);
  ASSERT_TRUE(h.wait_ready());
  const Completion c = h.complete(text(200, 6), 4, std::chrono::seconds(10));
  ASSERT_TRUE(h.wait_until([&] { return h.failed().has_value(); }, std::chrono::seconds(5)));
  EXPECT_NE(h.failed()->find("fail-stop (F7) before the forward pass"), std::string::npos)
      << *h.failed();
  EXPECT_LE(c.tokens.size(), 1u) << "a token of a forward pass after the fail-stop";
}

}  // namespace
}  // namespace kvtier::testing
