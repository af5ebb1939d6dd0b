// Fault-contract tests for the transfer engine (rule ids from docs/architecture.md in each
// name). Faults come from FaultInjectingDevice around the host device; "still running" copies are
// held on a gate, never timed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "gate.h"
#include "kvtier/device/device_fault.h"
#include "kvtier/transfer/transfer_engine.h"
#include "support/transfer_rig.h"

namespace kvtier {
namespace {

using testing::is_zero;
using testing::RigOptions;
using testing::TransferRig;

FaultPlan rule(FaultRule r) {
  return FaultPlan::rules({r});
}

std::vector<ChunkTransfer> one_chunk(const TransferRig& rig, uint32_t first_block, uint32_t slot) {
  return {rig.chunk(first_block, slot)};
}

void expect_audit(const TransferRig& rig) {
  const Status s = rig.engine->audit();
  EXPECT_TRUE(s) << s.error().message;
}

// ---- F1: a device fault becomes a per-job Failed result; the engine keeps serving.

TEST(TransferContract, F1_SubmitFaultBecomesFailedJobAndEngineKeepsServing) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .fail_at = 0})});
  rig.write_block(0, 1);
  EXPECT_NO_THROW(rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0)));
  rig.engine->submit(2, Direction::kStore, one_chunk(rig, 0, 1));
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].job, 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kFailed);
  EXPECT_NE(results[0].error.find("descriptor 0"), std::string::npos) << results[0].error;
  EXPECT_EQ(results[1].outcome, Outcome::kCompleted);
  EXPECT_FALSE(rig.engine->fail_stopped());
  expect_audit(rig);
}

// Creating a stream or an event can fault too (CUDA reports an earlier asynchronous error
// there, or is out of memory). Nothing is enqueued: the job is Failed and the engine serves on;
// a sticky fault is Unprovable and fail-stops (F7).
TEST(TransferContract, F1_AFaultCreatingDeviceResourcesIsAnOutcomeNotARaise) {
  for (bool sticky : {false, true}) {
    SCOPED_TRACE(sticky ? "sticky" : "not sticky");
    TransferRig rig;
    rig.fault.fail_next_creates(1, sticky);
    EXPECT_NO_THROW(rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0)));
    rig.engine->submit(2, Direction::kStore, one_chunk(rig, 0, 1));
    auto results = rig.drain();
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[0].job, 1u);
    EXPECT_EQ(results[0].outcome, sticky ? Outcome::kUnprovable : Outcome::kFailed);
    EXPECT_NE(results[0].error.find("device resources"), std::string::npos) << results[0].error;
    // Behind a sticky fault nothing is submitted; otherwise the next job runs.
    EXPECT_EQ(results[1].outcome, sticky ? Outcome::kFailed : Outcome::kCompleted);
    EXPECT_EQ(rig.engine->fail_stopped(), sticky);
    if (!sticky) expect_audit(rig);
  }
}

// And destroying the events of a Failed job can fault (CUDA returns an earlier error from its
// destroy calls): poll() still reports each job once, and raises nothing.
TEST(TransferContract, F1_AFaultDestroyingAFailedJobsEventsStaysInside) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .fail_at = 0})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  rig.fault.fail_next_destroys(3);  // its two events, and its lane's stream
  std::vector<TransferResult> results;
  EXPECT_NO_THROW(results = rig.drain());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kFailed);
  rig.engine->submit(2, Direction::kStore, one_chunk(rig, 0, 1));
  EXPECT_NO_THROW(results = rig.drain());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kCompleted);
  EXPECT_FALSE(rig.engine->fail_stopped());
  expect_audit(rig);
}

TEST(TransferContract, F1_FaultSurfacingAtPollBecomesFailed) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .latched_errors = 1})});
  rig.engine->submit(1, Direction::kLoad, one_chunk(rig, 0, 0));
  std::vector<TransferResult> results;
  EXPECT_NO_THROW(results = rig.drain());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kFailed) << results[0].error;
  EXPECT_FALSE(rig.engine->fail_stopped());
  expect_audit(rig);
}

TEST(TransferContract, F1_FaultWhileWaitedForIsReportedByPollNotRaised) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .latched_errors = 1})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  rig.host.quiesce();
  const JobId jobs[] = {1};
  EXPECT_NO_THROW(rig.engine->wait(jobs));
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kFailed);
  EXPECT_NE(results[0].error.find("wait"), std::string::npos) << results[0].error;
  expect_audit(rig);
}

TEST(TransferContract, F1_RandomizedFaultsEveryJobGetsExactlyOneOutcome) {
  TransferRig rig(RigOptions{.transfer = {.max_batch_descriptors = 4, .coalesce = false},
                             .plan = FaultPlan::random(7, RandomFaultRates{.submit_failure = 0.1,
                                                                           .latched_error = 0.1,
                                                                           .record_failure = 0.002,
                                                                           .delay = 0.1})});
  std::multiset<JobId> reported;
  JobId next = 1;
  for (int round = 0; round < 60; ++round) {
    for (int k = 0; k < 3; ++k) {
      const JobId job = next++;
      rig.engine->submit(job, job % 2 ? Direction::kStore : Direction::kLoad,
                         one_chunk(rig, (job % 8) * 4, job % 16));
    }
    rig.host.quiesce();  // what the plan draws must not depend on thread timing
    for (const auto& r : rig.engine->poll()) reported.insert(r.job);
  }
  for (const auto& r : rig.drain(64)) reported.insert(r.job);
  EXPECT_EQ(rig.engine->in_flight(), 0u);
  ASSERT_EQ(reported.size(), next - 1);
  for (JobId j = 1; j < next; ++j) EXPECT_EQ(reported.count(j), 1u) << "job " << j;
  EXPECT_GT(rig.fault.counts().submit_failures, 0u);
  expect_audit(rig);
}

// ---- F2: only device faults are soft.

TEST(TransferContract, F2_NonDeviceErrorsPropagateUnchanged) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .non_device_error = true})});
  EXPECT_THROW(rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0)), std::logic_error);
  // A bad argument is not a cache miss either.
  auto bad = one_chunk(rig, 0, 0);
  bad[0].slot = 999;
  EXPECT_THROW(rig.engine->submit(2, Direction::kStore, bad), std::invalid_argument);
  EXPECT_EQ(rig.engine->stats().failed, 0u);
  expect_audit(rig);
}

// ---- F5: no result while copies may still run; results in submission order.

TEST(TransferContract, F5_PartialBatchFailureIsReportedOnlyAfterEnqueuedCopiesFinish) {
  // 3 chunks, uncoalesced: 3 * 4 blocks * 3 layers = 36 descriptors, in calls of 8. The
  // second call fails at its descriptor 5 after enqueueing 5, all of them held on a gate.
  constexpr size_t kCap = 8;
  constexpr size_t kFailAt = 5;
  TransferRig rig(RigOptions{
      .transfer = {.max_batch_descriptors = kCap, .coalesce = false},
      .plan = FaultPlan::rules({{.call = 0, .hang = true}, {.call = 1, .fail_at = kFailAt}})});
  const uint32_t bpc = rig.group().blocks_per_chunk;
  for (uint32_t b = 0; b < 3 * bpc; ++b) rig.write_block(b, 50 + b);
  const std::vector<ChunkTransfer> chunks{rig.chunk(0, 0), rig.chunk(bpc, 1),
                                          rig.chunk(2 * bpc, 2)};
  rig.engine->submit(1, Direction::kStore, chunks);
  const StreamHandle faulted = rig.fault.faulted_streams().at(0);

  for (int i = 0; i < 3; ++i) {
    rig.host.quiesce();
    EXPECT_TRUE(rig.engine->poll().empty()) << "reported while enqueued copies still run";
  }
  EXPECT_TRUE(is_zero(rig.slot_ptr(0), 3 * rig.slot_bytes)) << "the held copies ran early";

  rig.fault.release_hangs();
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kFailed);
  // The bytes the enqueued copies wrote are accounted for: exactly the first kCap + kFailAt
  // descriptors (slot 0 layers 0-1, then slot 0 layer 2 blocks 0..) landed, nothing after.
  const size_t piece = rig.piece_bytes();
  const size_t landed = kCap + kFailAt;
  for (size_t d = 0; d < 3 * bpc * rig.group().layers; ++d) {
    const size_t chunk = d / (bpc * rig.group().layers);
    const size_t layer = d / bpc % rig.group().layers;
    const size_t block = d % bpc;
    const std::byte* host_piece = rig.slot_ptr(chunk) + (layer * bpc + block) * piece;
    if (d < landed) {
      EXPECT_TRUE(testing::has_pattern(host_piece, piece,
                                       TransferRig::piece_seed(50 + chunk * bpc + block, layer)))
          << "descriptor " << d;
    } else {
      EXPECT_TRUE(is_zero(host_piece, piece)) << "descriptor " << d;
    }
  }
  // The faulted stream is never handed out again.
  const size_t calls_before = rig.fault.call_streams().size();
  for (JobId j = 2; j < 8; ++j) {
    rig.engine->submit(j, Direction::kStore, one_chunk(rig, 0, 3));
    ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kCompleted);
  }
  const auto calls = rig.fault.call_streams();
  for (size_t c = calls_before; c < calls.size(); ++c) EXPECT_NE(calls[c], faulted);
  expect_audit(rig);
}

TEST(TransferContract, F5_ResultsAreReportedInSubmissionOrderPerDirection) {
  // Job 1 hangs; job 2 fails before enqueueing anything and cannot even record its end
  // marker, so its result is known at submit. It must still wait for job 1.
  TransferRig rig(
      RigOptions{.plan = FaultPlan::rules({{.call = 0, .hang = true},
                                           {.call = 1, .fail_at = 0, .record_fails = true}})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  rig.engine->submit(2, Direction::kStore, one_chunk(rig, 4, 1));
  rig.host.quiesce();
  EXPECT_TRUE(rig.engine->poll().empty());
  rig.fault.release_hangs();
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].job, 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kCompleted);
  EXPECT_EQ(results[1].job, 2u);
  EXPECT_EQ(results[1].outcome, Outcome::kFailed);
  expect_audit(rig);
}

TEST(TransferContract, F5_TransfersOfOneDirectionRunInSubmissionOrder) {
  // Job 1 fails at descriptor 2 after enqueueing 2 held copies; job 2, on a fresh stream
  // (the faulted one takes no new work), writes the same slot. Job 2 must not overtake the
  // copies job 1 left running, or they would overwrite its bytes.
  TransferRig rig(RigOptions{.transfer = {.coalesce = false},
                             .plan = rule({.call = 0, .fail_at = 2, .hang = true})});
  for (uint32_t j = 0; j < 4; ++j) {
    rig.write_block(j, 10 + j);
    rig.write_block(4 + j, 20 + j);
  }
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  rig.engine->submit(2, Direction::kStore, one_chunk(rig, 4, 0));
  rig.host.quiesce();
  EXPECT_TRUE(is_zero(rig.slot_ptr(0), rig.slot_bytes)) << "job 2 overtook the held job 1";
  rig.fault.release_hangs();
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].outcome, Outcome::kFailed);
  EXPECT_EQ(results[1].outcome, Outcome::kCompleted);
  rig.engine->submit(3, Direction::kLoad, one_chunk(rig, 8, 0));
  ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kCompleted);
  for (uint32_t j = 0; j < 4; ++j) EXPECT_TRUE(rig.block_has(8 + j, 20 + j)) << "block " << j;
  expect_audit(rig);
}

TEST(TransferContract, F5_OrderHoldsWhenTheNewestTransferHasNoEndMarker) {
  // Job 1 is held on lane A. Job 2 enqueues nothing and cannot record its end marker (Failed,
  // lane A faulted). Job 3 goes on a new lane and must still wait for job 1's copies.
  TransferRig rig(
      RigOptions{.plan = FaultPlan::rules({{.call = 0, .hang = true},
                                           {.call = 1, .fail_at = 0, .record_fails = true}})});
  for (uint32_t j = 0; j < 4; ++j) {
    rig.write_block(j, 10 + j);
    rig.write_block(4 + j, 20 + j);
  }
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  rig.engine->submit(2, Direction::kStore, one_chunk(rig, 0, 1));
  rig.engine->submit(3, Direction::kStore, one_chunk(rig, 4, 0));
  rig.host.quiesce();
  EXPECT_TRUE(is_zero(rig.slot_ptr(0), rig.slot_bytes)) << "job 3 overtook the held job 1";
  rig.fault.release_hangs();
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[2].outcome, Outcome::kCompleted);
  rig.engine->submit(4, Direction::kLoad, one_chunk(rig, 8, 0));
  ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kCompleted);
  for (uint32_t j = 0; j < 4; ++j) EXPECT_TRUE(rig.block_has(8 + j, 20 + j)) << "block " << j;
  expect_audit(rig);
}

TEST(TransferContract, F6_StreamFaultedAtQueryTakesNoNewTransferEvenBeforeItIsReported) {
  TransferRig rig(RigOptions{.transfer = {.query_fault_limit = 3},
                             .plan = rule({.call = 0, .latched_errors = 2})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  rig.host.quiesce();
  EXPECT_TRUE(rig.engine->poll().empty());  // the query raised: job 1 is not decided yet
  rig.engine->submit(2, Direction::kStore, one_chunk(rig, 4, 1));
  const auto calls = rig.fault.call_streams();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_NE(calls[1], calls[0]) << "a stream that raised at query took a new transfer";
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].outcome, Outcome::kFailed);
  EXPECT_EQ(results[1].outcome, Outcome::kCompleted);
  expect_audit(rig);
}

TEST(TransferContract, F7_UnprovableAtSubmitClosesTheDirectionAtOnce) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .record_fails = true})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  EXPECT_TRUE(rig.engine->fail_stopped()) << "fail-stop must not wait for the next poll";
  rig.engine->submit(2, Direction::kStore, one_chunk(rig, 4, 1));
  EXPECT_EQ(rig.fault.counts().copy_calls, 1u) << "copies enqueued after an Unprovable";
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].outcome, Outcome::kUnprovable);
  EXPECT_EQ(results[1].outcome, Outcome::kFailed);
  expect_audit(rig);
}

TEST(TransferContract, F7_StickyFaultIsUnprovableAndStopsBothDirections) {
  TransferRig rig;
  rig.engine->submit(1, Direction::kLoad, one_chunk(rig, 0, 0));
  rig.fault.set_plan(FaultPlan::rules({{.call = 1, .fail_at = 0, .sticky = true}}));
  rig.engine->submit(2, Direction::kStore, one_chunk(rig, 0, 1));
  EXPECT_TRUE(rig.engine->fail_stopped());
  rig.engine->submit(3, Direction::kLoad, one_chunk(rig, 4, 2));
  EXPECT_EQ(rig.fault.counts().copy_calls, 2u);
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 3u);
  std::map<JobId, Outcome> outcome;
  for (const auto& r : results) outcome[r.job] = r.outcome;
  EXPECT_EQ(outcome[2], Outcome::kUnprovable);
  EXPECT_EQ(outcome[3], Outcome::kFailed) << "refused before enqueueing";
  expect_audit(rig);
}

// ---- F6: faulted streams, events and buffers are never pooled.

TEST(TransferContract, F6_FaultedStreamEventsAndBuffersAreDiscarded) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .latched_errors = 1})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kFailed);
  const StreamHandle faulted = rig.fault.faulted_streams().at(0);
  for (JobId j = 2; j < 6; ++j) {
    rig.engine->submit(j, Direction::kStore, one_chunk(rig, 0, 1));
    ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kCompleted);
  }
  const auto calls = rig.fault.call_streams();
  for (size_t c = 1; c < calls.size(); ++c) EXPECT_NE(calls[c], faulted);
  const auto s = rig.engine->stats();
  EXPECT_EQ(s.streams.discarded, 1u);
  EXPECT_EQ(s.events.discarded, 2u);
  EXPECT_EQ(s.descriptor_buffers.discarded, 1u);
  EXPECT_EQ(s.streams.pooled, 1u);
  expect_audit(rig);
}

// ---- F7: unprovable => quarantine + fail-stop.

TEST(TransferContract, F7_EndMarkerThatCannotBeRecordedIsUnprovable) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .record_fails = true})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kUnprovable);
  EXPECT_TRUE(rig.engine->fail_stopped());
  const auto s = rig.engine->stats();
  EXPECT_EQ(s.streams.quarantined, 1u);
  EXPECT_EQ(s.events.quarantined, 2u);
  EXPECT_EQ(s.descriptor_buffers.quarantined, 1u);
  // The direction takes no new work; the job still gets its one outcome.
  rig.engine->submit(2, Direction::kStore, one_chunk(rig, 0, 1));
  auto later = rig.drain();
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].outcome, Outcome::kFailed);
  EXPECT_EQ(rig.fault.counts().copy_calls, 1u);
  expect_audit(rig);
}

// F7/F10: a load whose copies the compute stream cannot be fenced behind (the device refused
// the wait) may be read by the forward pass while it runs: whatever its copies end as, it is
// Unprovable and the engine fail-stops (it used to be reported Completed).
TEST(TransferContract, F7_ALoadTheComputeStreamCannotBeFencedBehindIsUnprovable) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .wait_fails = true})});
  rig.engine->submit(1, Direction::kLoad, one_chunk(rig, 0, 0));
  const JobId job = 1;
  EXPECT_FALSE(rig.engine->fence_compute(std::span(&job, 1)));
  EXPECT_TRUE(rig.engine->fail_stopped());
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kUnprovable) << results[0].error;
  expect_audit(rig);
}

// F5 and F7: a submit failure that does not say how far the call got may have enqueued all of
// it, so a job whose end marker then cannot be recorded is Unprovable, never merely Failed.
TEST(TransferContract, F7_SubmitFaultWithoutAnIndexMayHaveEnqueuedTheWholeCall) {
  TransferRig rig(
      RigOptions{.plan = rule({.call = 0, .fail_at = 1, .unindexed = true, .record_fails = true})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  const auto results = rig.drain();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kUnprovable) << results[0].error;
  EXPECT_TRUE(rig.engine->fail_stopped());
  EXPECT_EQ(rig.engine->stats().descriptor_buffers.quarantined, 1u);
  expect_audit(rig);
}

TEST(TransferContract, F7_RecordFailureWithNothingEnqueuedIsOnlyFailed) {
  TransferRig rig(RigOptions{.plan = rule({.call = 0, .fail_at = 0, .record_fails = true})});
  rig.engine->submit(1, Direction::kLoad, one_chunk(rig, 0, 0));
  ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kFailed);
  EXPECT_FALSE(rig.engine->fail_stopped());
  expect_audit(rig);
}

TEST(TransferContract, F7_DeviceThatKeepsErroringOnQueryIsUnprovable) {
  TransferRig rig(RigOptions{.transfer = {.query_fault_limit = 3},
                             .plan = rule({.call = 0, .latched_errors = FaultRule::kForever})});
  rig.engine->submit(1, Direction::kLoad, one_chunk(rig, 0, 0));
  rig.engine->submit(2, Direction::kLoad, one_chunk(rig, 4, 1));
  rig.host.quiesce();
  EXPECT_TRUE(rig.engine->poll().empty());
  EXPECT_TRUE(rig.engine->poll().empty());
  auto results = rig.engine->poll();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].outcome, Outcome::kUnprovable);
  EXPECT_EQ(results[1].outcome, Outcome::kUnprovable) << "queued behind an unprovable transfer";
  EXPECT_TRUE(rig.engine->fail_stopped());
  expect_audit(rig);
}

// ---- F8: deadlines, checked while polling; a timeout never authorizes reuse.

TEST(TransferContract, F8_TransferPastItsDeadlineIsUnprovableAndNotBefore) {
  TransferRig rig(RigOptions{.transfer = {.deadline = std::chrono::seconds(30)},
                             .plan = rule({.call = 0, .hang = true})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  rig.host.quiesce();
  EXPECT_TRUE(rig.engine->poll().empty());
  rig.clock.advance(std::chrono::seconds(30) - std::chrono::nanoseconds(1));
  EXPECT_TRUE(rig.engine->poll().empty()) << "reported before its deadline";
  rig.clock.advance(std::chrono::nanoseconds(1));
  auto results = rig.engine->poll();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kUnprovable);
  EXPECT_NE(results[0].error.find("deadline"), std::string::npos);
  EXPECT_TRUE(rig.engine->fail_stopped());
  EXPECT_EQ(rig.engine->stats().streams.quarantined, 1u);
  expect_audit(rig);
}

TEST(TransferContract, F8_WaitIsBoundedByTheDeadline) {
  TransferRig rig(RigOptions{.transfer = {.deadline = std::chrono::seconds(1)},
                             .plan = rule({.call = 0, .hang = true})});
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  // wait() runs while the copies hang; it returns once the (manual) clock passes the deadline.
  std::thread waiter([&] {
    const JobId jobs[] = {1};
    rig.engine->wait(jobs);
  });
  rig.clock.advance(std::chrono::seconds(1));
  waiter.join();
  ASSERT_EQ(rig.engine->poll().at(0).outcome, Outcome::kUnprovable);
  expect_audit(rig);
}

// ---- F10: stores read finished KV; loads land after earlier writes.

TEST(TransferContract, F10_StoreWaitsForTheComputeThatWritesItsBlocks) {
  TransferRig rig;
  rig.write_block(0, 1);  // stale bytes
  Gate compute_done;
  rig.fault.launch_host_func(rig.compute, [&] {
    compute_done.wait();
    for (uint32_t j = 0; j < 4; ++j) rig.write_block(j, 20 + j);  // the forward pass
  });
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 0));
  rig.host.quiesce();  // a store that does not wait for compute has copied stale bytes by now
  compute_done.open();
  ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kCompleted);
  rig.engine->submit(2, Direction::kLoad, one_chunk(rig, 8, 0));
  ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kCompleted);
  for (uint32_t j = 0; j < 4; ++j) EXPECT_TRUE(rig.block_has(8 + j, 20 + j)) << "block " << j;
}

TEST(TransferContract, F10_LoadLandsAfterEarlierWritesToItsBlocks) {
  TransferRig rig;
  for (uint32_t j = 0; j < 4; ++j) rig.write_block(j, 30 + j);
  rig.engine->submit(1, Direction::kStore, one_chunk(rig, 0, 5));
  ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kCompleted);
  // Compute of an earlier request still writes blocks 8..11 when they are reused for a load.
  Gate compute_done;
  rig.fault.launch_host_func(rig.compute, [&] {
    compute_done.wait();
    for (uint32_t j = 0; j < 4; ++j) rig.write_block(8 + j, 99);
  });
  rig.engine->submit(2, Direction::kLoad, one_chunk(rig, 8, 5));
  rig.host.quiesce();
  compute_done.open();
  ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kCompleted);
  for (uint32_t j = 0; j < 4; ++j) EXPECT_TRUE(rig.block_has(8 + j, 30 + j)) << "block " << j;
}

// ---- F12: resources conserved after every kind of fault.

TEST(TransferContract, F12_ResourcesAreConservedAfterFaultsOfEveryKind) {
  TransferRig rig(
      RigOptions{.transfer = {.query_fault_limit = 3},
                 .plan = FaultPlan::rules({{.call = 0, .fail_at = 2},
                                           {.call = 1, .latched_errors = 1},
                                           {.call = 2, .delay = std::chrono::microseconds(100)},
                                           {.call = 4, .record_fails = true}})});
  for (JobId j = 1; j <= 6; ++j) {
    rig.engine->submit(j, Direction::kLoad, one_chunk(rig, 4 * (j % 4), j));
  }
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 6u);
  const auto s = rig.engine->stats();
  EXPECT_EQ(s.failed, 3u) << "jobs 1, 2, and 6 (refused: submitted after job 5 fail-stopped)";
  EXPECT_EQ(s.unprovable, 1u) << "job 5's end marker could not be recorded";
  EXPECT_EQ(s.completed, 2u);
  expect_audit(rig);
}

}  // namespace
}  // namespace kvtier
