// Fault-contract tests of the connector, across ranks: each names the rule it proves and ends by
// checking F12 (leases conserved).
#include <gtest/gtest.h>

#include <set>

#include "connector/connector_harness.h"
#include "gate.h"

namespace kvtier::testing {
namespace {

// The index of the next copy_batch call on `rank`.
uint64_t next_call(const ConnectorHarness& h, uint32_t rank) {
  return h.ranks[rank]->fault.counts().copy_calls;
}

// Stores every full chunk of `doc` (plus a suffix) and returns once nothing is in flight.
void store_prefix(ConnectorHarness& h, const std::vector<TokenId>& doc) {
  h.add_request(with_suffix(doc, 3, 99), 2);
  h.run_until_done();
  h.drain();
}

TEST(ConnectorContract, F3_StoreFailedOnOneRankIsNeverPublished) {
  for (uint32_t world : {2u, 4u}) {
    ConnectorHarness h(
        {.world_size = world, .prefill_chunk = 64, .plans = std::vector<FaultPlan>(world)});
    h.ranks[world - 1]->fault.set_plan(FaultPlan::rules({FaultRule{.call = 0, .fail_at = 1}}));
    const auto doc = make_tokens(32, 1);
    store_prefix(h, doc);
    EXPECT_EQ(h.scheduler->counters().stores_failed, 1u);
    EXPECT_EQ(h.check_readable_chunks(doc), 0u);
    for (const CacheEvent& e : h.scheduler->take_events()) {
      EXPECT_NE(e.kind, CacheEventKind::kStored) << "a failed store emitted a stored event";
    }
    EXPECT_EQ(h.cache->counters().slots_free, h.options.num_slots) << "its slots are freed";
    // A later request with the same prefix misses and computes.
    const RequestId b = h.add_request(with_suffix(doc, 4, 2), 2);
    h.step();
    EXPECT_EQ(h.requests.at(b).loads, 0u);
    h.run_until_done();
    h.expect_leases_conserved();
  }
}

TEST(ConnectorContract, F4_FailedLoadIsRecomputedWithTwoGroupsOfDifferentBlockSizes) {
  for (uint32_t world : {1u, 2u, 4u}) {
    ConnectorHarness h({.world_size = world, .layout = hybrid_layout()});
    const auto doc = make_tokens(64, 3);
    store_prefix(h, doc);
    const uint32_t failing = world - 1;
    h.ranks[failing]->fault.set_plan(
        FaultPlan::rules({FaultRule{.call = next_call(h, failing), .fail_at = 1}}));
    const RequestId b = h.add_request(with_suffix(doc, 6, 4), 3);
    h.step();
    ASSERT_EQ(h.requests.at(b).loads, 1u);
    EXPECT_EQ(h.failed_loads, 1u);
    EXPECT_EQ(h.requests.at(b).computed, 0u) << "every loaded block of the failing rank is invalid";
    EXPECT_EQ(h.cache->counters().slots_pinned, 0u) << "the source slots are unpinned";
    EXPECT_EQ(h.scheduler->counters().loads_failed, 1u);
    h.run_until_done();  // b's KV is checked against the fault-free bytes when it finishes
    h.expect_leases_conserved();
  }
}

// A load that cannot start: its chunks leave the cache between the lookup and the load (kvtierd
// evicts them, or stops answering). An engine that computes a loading request in its load's step
// computes it from the match's end over blocks that were never loaded; until the failed verdict
// reaches it, the request stores nothing, so none of those blocks is published (F4, F3).
TEST(ConnectorContract, F4_LoadThatCouldNotStartStoresNoneOfItsBlocks) {
  for (uint32_t world : {1u, 2u}) {
    ConnectorHarness h({.world_size = world,
                        .plans = std::vector<FaultPlan>(world),
                        .granularity = TransferGranularity::kLayer});
    const auto doc = make_tokens(32, 41);
    store_prefix(h, doc);
    ASSERT_EQ(h.check_readable_chunks(doc), 4u);
    h.after_match = [&h] { EXPECT_GT(h.cache->reset(), 0u); };
    const RequestId b = h.add_request(with_suffix(doc, 5, 42), 2);
    h.step();
    h.after_match = nullptr;
    EXPECT_EQ(h.failed_loads, 1u);
    EXPECT_EQ(h.scheduler->counters().loads_failed, 1u) << "counted as any failed load";
    EXPECT_EQ(h.requests.at(b).computed, 0u) << "b recomputes from its start";
    EXPECT_TRUE(h.last_metadata.stores.empty()) << "b stored blocks it never loaded";
    h.run_until_done();  // b's KV is checked when it finishes
    EXPECT_EQ(h.check_readable_chunks(doc), 4u) << "the chunks b stored hold the right bytes";
    h.expect_leases_conserved();
  }
}

// The scheduler side alone, with crafted rank reports, on 2 ranks: request "a" publishes the
// first 32 tokens of a 40-token prompt, then request "b" loads them: group 0 blocks [0, 8),
// group 1 blocks [0, 4) of `table`.
struct OneLoadJob {
  explicit OneLoadJob(const Clock& clock = SteadyClock::instance())
      : s({.world_size = 2,
           .layout = layout,
           .model = "harness",
           .job_timeout = std::chrono::seconds(2)},
          cache, clock) {
    const auto prompt = make_tokens(40, 5);
    for (uint32_t b = 0; b < 10; ++b) table[0].push_back(100 + b);
    for (uint32_t b = 0; b < 5; ++b) table[1].push_back(200 + b);
    EXPECT_EQ(
        s.get_num_new_matched_tokens({.id = "a", .tokens = prompt, .num_prompt_tokens = 40}, 0)
            .tokens,
        0u);
    s.update_state_after_alloc("a", table, 0);
    StepMetadata m = s.build_step_metadata({.requests = {{.id = "a",
                                                          .tokens = prompt,
                                                          .num_prompt_tokens = 40,
                                                          .num_computed_after_step = 40}}});
    EXPECT_EQ(m.stores.size(), 1u);
    std::vector<WorkerOutput> acks{{.rank = 0, .finished = {{m.stores.at(0).job}}},
                                   {.rank = 1, .finished = {{m.stores.at(0).job}}}};
    s.update_from_worker_output(acks);
    s.request_finished("a");
    const Match match =
        s.get_num_new_matched_tokens({.id = "b", .tokens = prompt, .num_prompt_tokens = 40}, 0);
    EXPECT_EQ(match.tokens, 32u);
    s.update_state_after_alloc("b", table, 32);
    m = s.build_step_metadata({});
    EXPECT_EQ(m.loads.size(), 1u);
    load = m.loads.at(0).job;
  }
  void expect_clean_after_b_finished() {
    EXPECT_EQ(cache.counters().slots_pinned, 0u);
    s.request_finished("b");
    Status audit = s.audit();
    EXPECT_TRUE(audit) << audit.error().message;
  }
  const KvLayout layout = hybrid_layout();  // group 0: 4-token blocks; group 1: 8-token blocks
  CacheManager cache{16, layout.max_chunk_bytes(), *make_eviction_policy("lru", 16)};
  SchedulerConnector s;
  GroupBlocks table{{}, {}};
  JobId load = 0;
};

// F4 with the invalid blocks anywhere in each group.
TEST(ConnectorContract, F4_TruncatesToTheFirstInvalidBoundaryCommonToAllGroups) {
  struct Case {
    uint32_t group0_index, group1_index;  // table index of the invalid block in each group
    size_t expected;
  };
  for (Case c : {Case{5, 2, 16}, Case{1, 3, 4}, Case{7, 0, 0}}) {
    OneLoadJob j;
    std::vector<WorkerOutput> reports{
        {.rank = 1,
         .finished = {{j.load, Outcome::kFailed}},
         .invalid_blocks = {{j.table[0][c.group0_index]}, {j.table[1][c.group1_index]}}},
        {.rank = 0, .finished = {{j.load}}}};
    const StepOutcome out = j.s.update_from_worker_output(reports);
    ASSERT_EQ(out.loads.size(), 1u);
    EXPECT_EQ(out.loads[0].outcome, Outcome::kFailed);
    EXPECT_EQ(out.loads[0].num_computed, c.expected)
        << "invalid group-0 block " << c.group0_index << ", group-1 block " << c.group1_index;
    j.expect_clean_after_b_finished();
  }
}

// F4: a rank that fails a load without naming its invalid blocks leaves none of them trusted.
TEST(ConnectorContract, F4_FailedLoadThatNoRankDescribesLoadsNothing) {
  OneLoadJob j;
  std::vector<WorkerOutput> reports{{.rank = 1, .finished = {{j.load, Outcome::kFailed}}},
                                    {.rank = 0, .finished = {{j.load}}}};
  const StepOutcome out = j.s.update_from_worker_output(reports);
  ASSERT_EQ(out.loads.size(), 1u);
  EXPECT_EQ(out.loads[0].outcome, Outcome::kFailed);
  EXPECT_EQ(out.loads[0].num_computed, 0u) << "every token of b is recomputed";
  EXPECT_EQ(j.s.counters().loaded_tokens, 0u);
  j.expect_clean_after_b_finished();
}

// F8 with F4: a load ended by the job timeout names no invalid block either; none of its tokens
// count as loaded.
TEST(ConnectorContract, F8_LoadEndedByTheJobTimeoutLoadsNothing) {
  ManualClock clock;
  OneLoadJob j(clock);
  const WorkerOutput rank0{.rank = 0, .finished = {{j.load}}};  // rank 1 never reports
  EXPECT_TRUE(j.s.update_from_worker_output(std::span(&rank0, 1)).loads.empty());
  clock.advance(std::chrono::seconds(2));
  const StepOutcome out = j.s.update_from_worker_output({});
  ASSERT_EQ(out.loads.size(), 1u);
  EXPECT_EQ(out.loads[0].outcome, Outcome::kUnprovable);
  EXPECT_EQ(out.loads[0].num_computed, 0u) << "a timeout never makes a token loaded";
  EXPECT_TRUE(out.fail_stop);
  EXPECT_EQ(j.s.counters().jobs_timed_out, 1u);
  EXPECT_EQ(j.s.counters().loaded_tokens, 0u);
  EXPECT_GT(j.cache.counters().slots_quarantined, 0u);
}

// The scheduler side alone, with crafted rank reports: one store job of 4 chunks on 2 ranks.
struct OneStoreJob {
  explicit OneStoreJob(const Clock& clock = SteadyClock::instance())
      : s({.world_size = 2,
           .layout = single_group_layout(),
           .model = "harness",
           .job_timeout = std::chrono::seconds(2)},
          cache, clock) {
    const auto prompt = make_tokens(40, 21);
    EXPECT_EQ(
        s.get_num_new_matched_tokens({.id = "a", .tokens = prompt, .num_prompt_tokens = 40}, 0)
            .tokens,
        0u);
    s.update_state_after_alloc("a", GroupBlocks{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}, 0);
    const StepMetadata m = s.build_step_metadata({.requests = {{.id = "a",
                                                                .tokens = prompt,
                                                                .num_prompt_tokens = 40,
                                                                .num_computed_after_step = 40}}});
    EXPECT_EQ(m.stores.size(), 1u);
    job = m.stores.at(0).job;
    keys =
        chunk_keys({.model = "harness", .layout_fingerprint = single_group_layout().fingerprint()},
                   prompt, single_group_layout().groups[0].chunk_tokens());
  }
  StepOutcome report(uint32_t rank, Outcome outcome, bool fail_stop = false) {
    WorkerOutput out{.rank = rank, .finished = {{job, outcome}}, .fail_stop = fail_stop};
    return s.update_from_worker_output(std::span(&out, 1));
  }
  CacheManager cache{16, single_group_layout().max_chunk_bytes(), *make_eviction_policy("lru", 16)};
  SchedulerConnector s;
  JobId job = 0;
  std::vector<ChunkKey> keys;
};

// F8 counts a store's time from the step that sent it (its worker output): a step that first
// waited for its loads past the job timeout does not make the store it sent afterwards late; the
// store is late once the timeout passed after that step.
TEST(ConnectorContract, F8_AStoreIsLateOnlyATimeoutAfterTheStepThatSentIt) {
  ManualClock clock;
  OneStoreJob j(clock);
  clock.advance(std::chrono::seconds(3));  // the step waited for its loads
  EXPECT_FALSE(j.s.update_from_worker_output({}).fail_stop) << "late before it was sent";
  clock.advance(std::chrono::seconds(1));
  EXPECT_FALSE(j.report(0, Outcome::kCompleted).fail_stop);
  EXPECT_FALSE(j.s.overdue_job());
  clock.advance(std::chrono::milliseconds(1500));
  const StepOutcome late = j.s.update_from_worker_output({});
  EXPECT_TRUE(late.fail_stop);
  EXPECT_EQ(j.s.counters().jobs_timed_out, 1u);
  EXPECT_EQ(j.cache.state(j.keys[0]), LookupState::kMiss) << "never published (F3, F7)";
}

TEST(ConnectorContract, F7_UnprovableVerdictFailStopsTheScheduler) {
  OneStoreJob j;
  j.report(0, Outcome::kCompleted);
  const StepOutcome out = j.report(1, Outcome::kUnprovable);  // no fail-stop flag from the rank
  EXPECT_TRUE(out.fail_stop);
  EXPECT_TRUE(j.s.fail_stopped());
  EXPECT_EQ(j.cache.counters().slots_quarantined, 5u);
  EXPECT_EQ(j.cache.state(j.keys[0]), LookupState::kMiss);
  Status audit = j.s.audit();
  EXPECT_TRUE(audit) << audit.error().message;
}

TEST(ConnectorContract, F9_RepeatedAckFromOneRankDoesNotCompleteTheJob) {
  OneStoreJob j;
  j.report(0, Outcome::kCompleted);
  j.report(0, Outcome::kCompleted);
  EXPECT_EQ(j.s.counters().jobs_in_flight, 1u) << "rank 1 has not acknowledged";
  EXPECT_EQ(j.s.counters().stale_acks, 1u);
  EXPECT_EQ(j.cache.state(j.keys[0]), LookupState::kPending);
  j.report(1, Outcome::kCompleted);
  EXPECT_EQ(j.cache.state(j.keys[0]), LookupState::kHit);
  Status audit = j.s.audit();
  EXPECT_TRUE(audit) << audit.error().message;
}

TEST(ConnectorContract, F7_UnprovableLoadQuarantinesItsSlotsAndFailStops) {
  ConnectorHarness h({.world_size = 2});
  const auto doc = make_tokens(32, 6);
  store_prefix(h, doc);
  h.ranks[1]->fault.set_plan(
      FaultPlan::rules({FaultRule{.call = next_call(h, 1), .record_fails = true}}));
  const RequestId b = h.add_request(with_suffix(doc, 4, 7), 2);
  h.step();
  EXPECT_TRUE(h.scheduler->fail_stopped());
  EXPECT_TRUE(h.last_outcome.fail_stop);
  EXPECT_EQ(h.requests.at(b).state, SimState::kAborted) << "never recomputed into its blocks";
  const CacheCounters c = h.cache->counters();
  EXPECT_EQ(c.slots_quarantined, 4u);
  EXPECT_EQ(c.quarantined_bytes, 4u * h.options.layout.max_chunk_bytes());
  // A fail-stopped connector starts no new transfer.
  const RequestId d = h.add_request(with_suffix(doc, 5, 8), 2);
  h.step();
  EXPECT_EQ(h.requests.at(d).loads, 0u);
  EXPECT_TRUE(h.last_metadata.loads.empty());
  EXPECT_TRUE(h.last_metadata.stores.empty());
  h.expect_leases_conserved();
}

TEST(ConnectorContract, F7_UnprovableStoreIsQuarantinedNeverPublished) {
  ConnectorHarness h({.world_size = 4, .prefill_chunk = 64});
  h.ranks[2]->fault.set_plan(FaultPlan::rules({FaultRule{.call = 0, .record_fails = true}}));
  const auto doc = make_tokens(32, 9);
  h.add_request(with_suffix(doc, 3, 10), 2);
  for (int i = 0; i < 5; ++i) h.step();
  EXPECT_TRUE(h.scheduler->fail_stopped());
  EXPECT_EQ(h.check_readable_chunks(doc), 0u);
  EXPECT_EQ(h.cache->counters().slots_quarantined, 4u);
  h.expect_leases_conserved();
}

TEST(ConnectorContract, F7_UnprovableStoreNeverReleasesItsRequestsBlocks) {
  ConnectorHarness h({.world_size = 2, .prefill_chunk = 64});
  h.ranks[1]->fault.set_plan(FaultPlan::rules({FaultRule{.call = 0, .record_fails = true}}));
  const auto doc = make_tokens(32, 9);
  const RequestId a = h.add_request(with_suffix(doc, 3, 10), 2);
  for (int i = 0; i < 5; ++i) h.step();
  ASSERT_TRUE(h.scheduler->fail_stopped());
  // The request ended, but its store's copies may still read its blocks: they stay its own.
  ASSERT_TRUE(h.requests.contains(a)) << "released to the engine after an unprovable store";
  EXPECT_EQ(h.requests.at(a).state, SimState::kFinishing);
  EXPECT_FALSE(h.requests.at(a).blocks[0].empty());
  h.expect_leases_conserved();
}

// And an Unprovable load's: its copies may still write the blocks, so they are never handed
// back, whether the request ended before the verdict or after it.
TEST(ConnectorContract, F7_UnprovableLoadNeverReleasesItsRequestsBlocks) {
  for (const bool finished_first : {true, false}) {
    SCOPED_TRACE(finished_first ? "finished before the verdict" : "finished after it");
    OneLoadJob j;
    if (finished_first) {
      EXPECT_TRUE(j.s.request_finished("b")) << "its load is in flight";
    }
    std::vector<WorkerOutput> outputs{
        {.rank = 0, .finished = {{.job = j.load, .outcome = Outcome::kUnprovable}}},
        {.rank = 1, .finished = {{.job = j.load}}}};
    const StepOutcome out = j.s.update_from_worker_output(outputs);
    EXPECT_TRUE(out.fail_stop);
    EXPECT_TRUE(out.released.empty()) << "blocks an Unprovable load may still write, handed back";
    if (!finished_first) {
      EXPECT_TRUE(j.s.request_finished("b")) << "its blocks stay the request's";
    }
    const StepOutcome later = j.s.update_from_worker_output({});
    EXPECT_TRUE(later.released.empty());
  }
}

TEST(ConnectorContract, F8_JobNotCompleteAfterTheMarginIsUnprovable) {
  ConnectorHarness h({.world_size = 2,
                      .prefill_chunk = 64,
                      .job_timeout = std::chrono::seconds(2),
                      .step_time = std::chrono::milliseconds(100)});
  const auto doc = make_tokens(32, 11);
  h.add_request(with_suffix(doc, 3, 12), 1);
  h.step();  // at t = 0: computes the prompt; its store job is created
  ASSERT_EQ(h.last_metadata.stores.size(), 1u);
  h.silent_ranks = {1};  // rank 1's reports stop arriving: a stuck worker
  for (int i = 1; i < 20; ++i) {
    h.step();  // up to t = 1.9 s
    ASSERT_FALSE(h.scheduler->fail_stopped())
        << "declared unprovable before the margin, step " << i;
  }
  h.step();  // t = 2 s: transfer_deadline_s + completion_margin_s passed
  EXPECT_TRUE(h.scheduler->fail_stopped());
  EXPECT_EQ(h.scheduler->counters().jobs_timed_out, 1u);
  EXPECT_EQ(h.cache->counters().slots_quarantined, 4u) << "a timeout never authorizes reuse";
  EXPECT_EQ(h.check_readable_chunks(doc), 0u);
  // The late ack, when it comes, is ignored (F9).
  h.silent_ranks.clear();
  h.extra_outputs = std::move(h.withheld);
  h.step();
  EXPECT_EQ(h.scheduler->counters().stale_acks, 1u);
  EXPECT_EQ(h.cache->counters().slots_quarantined, 4u);
  h.expect_leases_conserved();
}

TEST(ConnectorContract, F9_FailureReportedBeforeTheLastAckIsSticky) {
  ConnectorHarness h({.world_size = 2, .prefill_chunk = 64});
  // Rank 0's store copies hang until released; rank 1's store fails at once.
  h.ranks[0]->fault.set_plan(FaultPlan::rules({FaultRule{.call = 0, .hang = true}}));
  h.ranks[1]->fault.set_plan(FaultPlan::rules({FaultRule{.call = 0, .fail_at = 0}}));
  const auto doc = make_tokens(32, 13);
  h.add_request(with_suffix(doc, 3, 14), 4);
  h.step();
  h.step();  // the store runs: rank 1 reports Failed, rank 0 nothing yet
  EXPECT_EQ(h.scheduler->counters().jobs_in_flight, 1u);
  EXPECT_EQ(h.cache->counters().slots_pending, 4u);
  h.ranks[0]->fault.release_hangs();
  h.step();  // rank 0 reports Completed, a step later
  EXPECT_EQ(h.scheduler->counters().jobs_in_flight, 0u);
  EXPECT_EQ(h.scheduler->counters().stores_failed, 1u);
  EXPECT_EQ(h.check_readable_chunks(doc), 0u) << "the earlier failure decides the job";
  h.run_until_done();
  h.expect_leases_conserved();
}

TEST(ConnectorContract, F9_AcksAfterAResetAreIgnored) {
  ConnectorHarness h({.world_size = 2, .prefill_chunk = 64});
  h.ranks[0]->fault.set_plan(FaultPlan::rules({FaultRule{.call = 0, .hang = true}}));
  const auto doc = make_tokens(32, 15);
  h.add_request(with_suffix(doc, 3, 16), 4);
  h.step();
  const JobId before_reset = h.last_metadata.stores.at(0).job;
  h.step();  // the store is in flight (hung on rank 0)
  ASSERT_TRUE(h.scheduler->reset_cache());
  h.ranks[0]->fault.release_hangs();
  h.step();  // both ranks have now completed the pre-reset store
  EXPECT_EQ(h.check_readable_chunks(doc), 0u) << "a store from before the reset is not published";
  EXPECT_EQ(h.cache->counters().slots_free, h.options.num_slots);
  // A repeated ack of the retired job changes nothing.
  h.extra_outputs = {WorkerOutput{.rank = 0, .finished = {{before_reset}}},
                     WorkerOutput{.rank = 1, .finished = {{before_reset}}}};
  h.step();
  EXPECT_EQ(h.scheduler->counters().stale_acks, 2u);
  EXPECT_EQ(h.check_readable_chunks(doc), 0u);
  // New jobs get new ids: nothing from before the reset can be confused with them.
  const auto other = make_tokens(32, 17);
  h.add_request(with_suffix(other, 3, 18), 1);
  h.step();
  ASSERT_FALSE(h.last_metadata.stores.empty());
  EXPECT_GT(h.last_metadata.stores[0].job, before_reset);
  h.run_until_done();
  EXPECT_EQ(h.check_readable_chunks(other), 4u);
  h.expect_leases_conserved();
}

TEST(ConnectorContract, F10_ReallocatedBlockIsFencedBehindTheStoreReadingIt) {
  ConnectorHarness h({.prefill_chunk = 64, .reuse_freed_blocks_first = true});
  // The store's copies hang: without a fence, the next owner's forward pass would overwrite the
  // blocks before the store read them, and the store would publish the wrong KV.
  h.ranks[0]->fault.set_plan(FaultPlan::rules({FaultRule{.call = 0, .hang = true}}));
  const auto doc_a = make_tokens(32, 19);
  const RequestId a = h.add_request(doc_a, 8);
  h.step();  // a's prompt is computed; its store is queued
  ASSERT_EQ(h.last_metadata.stores.size(), 1u);
  const JobId store = h.last_metadata.stores[0].job;
  h.preempt(a);  // the engine frees a's blocks while the store will read them
  const RequestId b = h.add_request(make_tokens(32, 20), 8);
  h.step();  // b gets a's blocks; its forward pass must wait for the store
  EXPECT_EQ(h.last_metadata.flush, std::vector<JobId>{store});
  EXPECT_EQ(h.scheduler->counters().flushes, 8u) << "a's 8 blocks went to b";
  h.ranks[0]->fault.release_hangs();
  h.step();
  EXPECT_EQ(h.check_readable_chunks(doc_a), 4u) << "the store read a's KV, not b's";
  (void)b;
  h.run_until_done();
  h.expect_leases_conserved();
}

// ---- Layer-wise transfers (connector.transfer_granularity: layer).

HarnessOptions layerwise(HarnessOptions o) {
  o.granularity = TransferGranularity::kLayer;
  return o;
}

TEST(ConnectorContract, F10_LayerwiseStoreOfLayerLWaitsForLayerLsCompute) {
  ConnectorHarness h(layerwise({.prefill_chunk = 64}));
  // Layer 1's compute is held: layer 0's store copies meanwhile, layer 1's must wait for it.
  Gate layer1;
  h.before_layer = [&](KvLayer k) {
    if (k.layer == 1) layer1.wait();
  };
  const auto doc = make_tokens(32, 41);
  h.add_request(with_suffix(doc, 3, 42), 2);
  h.step();
  ASSERT_EQ(h.last_metadata.stores.size(), 1u);
  EXPECT_EQ(h.ranks[0]->worker->engine().stats().completed, 1u)
      << "layer 0's store copied while layer 1 computes";
  EXPECT_EQ(h.scheduler->counters().stores_completed, 0u) << "the job waits for all its layers";
  layer1.open();
  h.before_layer = nullptr;
  h.run_until_done();
  EXPECT_EQ(h.check_readable_chunks(doc), 4u) << "layer 1's store read layer 1's finished KV";
  h.expect_leases_conserved();
}

TEST(ConnectorContract, F10_LayerwiseAttentionOfLayerLWaitsForLayerLsLoad) {
  ConnectorHarness h(layerwise({.prefill_chunk = 64}));
  const auto doc = make_tokens(32, 43);
  store_prefix(h, doc);
  // The load's layer-1 part (its second copy call) hangs; layer 0 lands.
  h.ranks[0]->fault.set_plan(
      FaultPlan::rules({FaultRule{.call = next_call(h, 0) + 1, .hang = true}}));
  std::set<uint32_t> computed_layers;
  h.before_layer = [&](KvLayer k) { computed_layers.insert(k.layer); };
  const RequestId b = h.add_request(with_suffix(doc, 6, 44), 2);
  h.step();
  ASSERT_EQ(h.last_metadata.loads.size(), 1u);
  EXPECT_EQ(computed_layers, std::set<uint32_t>{0}) << "layer 0 computes while layer 1 loads";
  h.ranks[0]->fault.release_hangs();
  h.step();
  EXPECT_EQ(computed_layers, (std::set<uint32_t>{0, 1}));
  EXPECT_EQ(h.requests.at(b).loads, 1u);
  EXPECT_EQ(h.failed_loads, 0u);
  EXPECT_GE(h.requests.at(b).computed, 32u + 6u) << "its load's step computed the suffix";
  h.before_layer = nullptr;
  h.run_until_done();  // b's KV, loaded and computed, is checked when it finishes
  h.expect_leases_conserved();
}

TEST(ConnectorContract, F5_LayerwiseJobIsReportedOnlyOnceEveryLayerEnded) {
  ConnectorHarness h(layerwise({.prefill_chunk = 64}));
  const auto doc = make_tokens(32, 47);
  store_prefix(h, doc);
  // The load's layer-0 part fails part-way; its layer-1 part (the next copy call) hangs, so
  // its copies may still write the request's blocks.
  const uint64_t first = next_call(h, 0);
  h.ranks[0]->fault.set_plan(FaultPlan::rules(
      {FaultRule{.call = first, .fail_at = 1}, FaultRule{.call = first + 1, .hang = true}}));
  const RequestId b = h.add_request(with_suffix(doc, 6, 48), 2);
  h.step();
  ASSERT_EQ(h.last_metadata.loads.size(), 1u);
  const JobId load = h.last_metadata.loads[0].job;
  // Poll the worker until the transfer engine has reported the failed layer-0 part.
  LocalWorkerConnector& worker = *h.ranks[0]->worker;
  std::vector<JobVerdict> reported;
  while (worker.engine().stats().failed == 0) {
    for (JobVerdict& v : worker.get_finished()) reported.push_back(std::move(v));
  }
  EXPECT_TRUE(std::ranges::none_of(reported, [&](const JobVerdict& v) { return v.job == load; }))
      << "a failed layer is no verdict while another layer's copies may still run";
  EXPECT_GT(h.cache->counters().slots_pinned, 0u) << "the load's source slots stay pinned";
  h.ranks[0]->fault.release_hangs();
  for (int i = 0; i < 50 && h.requests.at(b).loads == 0; ++i) h.step();
  EXPECT_EQ(h.requests.at(b).loads, 1u);
  EXPECT_EQ(h.scheduler->counters().loads_failed, 1u) << "the job's verdict is its worst layer's";
  h.run_until_done();
  h.expect_leases_conserved();
}

TEST(ConnectorContract, F4_LayerwiseFailedLayerInvalidatesAllLayersOfTheBlocksInEveryGroup) {
  for (uint32_t world : {1u, 2u}) {
    ConnectorHarness h(layerwise({.world_size = world, .layout = hybrid_layout()}));
    const auto doc = make_tokens(64, 45);
    store_prefix(h, doc);
    // Parts go layer-major: (layer 0, group 0), (layer 0, group 1), (layer 1, group 0). The
    // middle one fails part-way; the parts after it complete.
    const uint32_t failing = world - 1;
    h.ranks[failing]->fault.set_plan(
        FaultPlan::rules({FaultRule{.call = next_call(h, failing) + 1, .fail_at = 1}}));
    const RequestId b = h.add_request(with_suffix(doc, 6, 46), 3);
    h.step();
    ASSERT_EQ(h.requests.at(b).loads, 1u);
    EXPECT_EQ(h.failed_loads, 1u);
    EXPECT_EQ(h.scheduler->counters().loads_failed, 1u);
    EXPECT_EQ(h.requests.at(b).computed, 0u) << "every block of the load, in both groups, is "
                                                "invalid; what its step computed is not kept";
    EXPECT_EQ(h.cache->counters().slots_pinned, 0u) << "the source slots are unpinned";
    h.run_until_done();  // b's KV is checked against the fault-free bytes when it finishes
    h.expect_leases_conserved();
  }
}

}  // namespace
}  // namespace kvtier::testing
