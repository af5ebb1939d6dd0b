// The connector's scheduler and worker sides on the happy path, across 1, 2 and 4 ranks, and
// the scheduler side's bookkeeping on its own.
#include <gtest/gtest.h>

#include <map>

#include "connector/connector_harness.h"

namespace kvtier::testing {
namespace {

class ConnectorRanks : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ConnectorRanks, SharedPrefixIsLoadedAndHoldsTheStoredBytes) {
  for (KvLayout layout : {single_group_layout(), hybrid_layout(DeviceLayout::kCrossLayer)}) {
    ConnectorHarness h({.world_size = GetParam(), .layout = layout});
    const auto doc = make_tokens(64, 1);
    h.add_request(with_suffix(doc, 5, 2), 3);
    h.run_until_done();
    EXPECT_GT(h.check_readable_chunks(doc), 0u);

    const RequestId b = h.add_request(with_suffix(doc, 7, 3), 3);
    h.step();
    EXPECT_EQ(h.last_metadata.loads.size(), 1u);
    EXPECT_EQ(h.requests.at(b).computed, 64u) << "the whole shared prefix is loaded";
    h.run_until_done();  // the bytes are checked as each request finishes
    EXPECT_EQ(h.scheduler->counters().loads_completed, 1u);
    EXPECT_EQ(h.scheduler->counters().loaded_tokens, 64u);
    h.expect_leases_conserved();
  }
}

TEST_P(ConnectorRanks, ConcurrentLookupsOfOnePrefixAreDeferred) {
  ConnectorHarness h({.world_size = GetParam()});
  const auto doc = make_tokens(48, 4);
  h.add_request(with_suffix(doc, 3, 5), 2);
  h.run_until_done();
  const RequestId b = h.add_request(with_suffix(doc, 4, 6), 2);
  const RequestId c = h.add_request(with_suffix(doc, 5, 7), 2);
  h.step();
  // b's load was created first; c asked while b's chunks were being loaded and was deferred.
  EXPECT_EQ(h.requests.at(b).loads, 1u);
  EXPECT_EQ(h.requests.at(c).state, SimState::kWaiting);
  EXPECT_EQ(h.scheduler->counters().deferred_lookups, 1u);
  h.step();
  EXPECT_EQ(h.requests.at(c).loads, 1u) << "c loads once b's load ended";
  h.run_until_done();
  h.expect_leases_conserved();
}

INSTANTIATE_TEST_SUITE_P(WorldSize, ConnectorRanks, ::testing::Values(1u, 2u, 4u));

TEST(Connector, StoreThresholdWaitsForReuse) {
  ConnectorHarness h({.store_threshold = 2});
  const auto doc = make_tokens(32, 8);
  h.add_request(with_suffix(doc, 3, 9), 2);
  h.run_until_done();
  EXPECT_EQ(h.check_readable_chunks(doc), 0u) << "asked for once: not stored";
  h.add_request(with_suffix(doc, 3, 10), 2);
  h.run_until_done();
  EXPECT_EQ(h.check_readable_chunks(doc), 4u) << "asked for twice: stored";
  h.expect_leases_conserved();
}

TEST(Connector, AdmissionStopsStoringWhileNothingIsReusedAndStartsAgainOnReuse) {
  ConnectorHarness h({.admission_window = 3});
  std::vector<std::vector<TokenId>> docs;
  for (uint32_t i = 0; i < 4; ++i) {
    docs.push_back(make_tokens(32, 40 + i));
    h.add_request(with_suffix(docs.back(), 3, 50 + i), 2);
    h.run_until_done();
  }
  EXPECT_EQ(h.check_readable_chunks(docs[1]), 4u) << "the window is not full yet";
  // The third request in a row that reuses nothing fills the window, itself included.
  EXPECT_EQ(h.check_readable_chunks(docs[2]), 0u);
  EXPECT_EQ(h.check_readable_chunks(docs[3]), 0u);
  EXPECT_EQ(h.scheduler->counters().stores_not_admitted, 8u);
  EXPECT_EQ(h.scheduler->counters().admission_threshold, 2u);

  // The fourth document is asked for again: reuse. Its chunks, asked for twice, are stored,
  // and so is the new document after it.
  h.add_request(with_suffix(docs[3], 5, 60), 2);
  h.run_until_done();
  EXPECT_EQ(h.check_readable_chunks(docs[3]), 4u);
  EXPECT_EQ(h.scheduler->counters().admission_threshold, 1u);
  const auto fresh = make_tokens(32, 61);
  h.add_request(with_suffix(fresh, 3, 62), 2);
  h.run_until_done();
  EXPECT_EQ(h.check_readable_chunks(fresh), 4u) << "reuse seen: a first sight is stored";
  h.expect_leases_conserved();
}

TEST(Connector, StoresOverTheInFlightBoundAreDeferredAndTheRequestKeepsComputing) {
  // One chunk may be in flight; the first store's copies hang, so the store direction is
  // behind for as long as the hang lasts.
  ConnectorHarness h({.prefill_chunk = 8, .max_store_chunks_in_flight = 1});
  h.ranks[0]->fault.set_plan(FaultPlan::rules({FaultRule{.call = 0, .hang = true}}));
  const auto doc = make_tokens(32, 21);
  const RequestId a = h.add_request(with_suffix(doc, 3, 22), 40);
  for (int i = 0; i < 10; ++i) h.step();
  // The prompt (35 tokens, 4 chunks) was computed and decoding goes on: no step waited.
  EXPECT_GT(h.requests.at(a).computed, 35u);
  EXPECT_EQ(h.scheduler->counters().jobs_in_flight, 1u) << "only chunk 0's store was issued";
  EXPECT_GE(h.scheduler->counters().stores_deferred, 3u) << "chunks 1-3 were put off";
  h.ranks[0]->fault.release_hangs();
  h.run_until_done();
  EXPECT_EQ(h.check_readable_chunks(doc), 4u)
      << "the deferred chunks were stored once the direction caught up, a still running";
  h.expect_leases_conserved();
}

TEST(Connector, ALoadIsNotQueuedBehindAHungStore) {
  ConnectorHarness h({.prefill_chunk = 64});
  const auto doc = make_tokens(32, 23);
  h.add_request(with_suffix(doc, 3, 24), 2);
  h.run_until_done();
  ASSERT_EQ(h.check_readable_chunks(doc), 4u);
  // Another request's store hangs; a request whose prefix is cached loads meanwhile.
  h.ranks[0]->fault.set_plan(
      FaultPlan::rules({FaultRule{.call = h.ranks[0]->fault.counts().copy_calls, .hang = true}}));
  h.add_request(make_tokens(32, 25), 30);
  h.step();
  h.step();  // its store is submitted and hangs
  ASSERT_EQ(h.scheduler->counters().jobs_in_flight, 1u);
  const RequestId b = h.add_request(with_suffix(doc, 5, 26), 2);
  for (int i = 0; i < 5 && h.requests.contains(b); ++i) h.step();
  EXPECT_FALSE(h.requests.contains(b)) << "b loaded its prefix and finished";
  EXPECT_EQ(h.scheduler->counters().loads_completed, 1u);
  EXPECT_EQ(h.scheduler->counters().jobs_in_flight, 1u) << "the store still hangs";
  h.ranks[0]->fault.release_hangs();
  h.run_until_done();
  h.expect_leases_conserved();
}

TEST(Connector, DecodeChunksAreStoredOnlyWhenConfigured) {
  for (bool store_decode : {false, true}) {
    ConnectorHarness h({.store_decode = store_decode});
    const RequestId a = h.add_request(make_tokens(16, 11), 20);
    std::vector<TokenId> all;
    for (int i = 0; i < 100 && !h.requests.empty(); ++i) {
      if (h.requests.contains(a)) all = h.requests.at(a).tokens;
      h.step();
    }
    h.drain();
    all.resize(32);  // prompt (2 chunks) + 2 chunks of generated tokens
    EXPECT_EQ(h.check_readable_chunks(all), store_decode ? 4u : 2u);
    h.expect_leases_conserved();
  }
}

TEST(Connector, LoadStartingInsideAChunkCopiesOnlyTheMissingBlocks) {
  // A device prefix-cache hit of 4 tokens (one block) ends inside the first 8-token chunk.
  ConnectorHarness h({});
  const auto doc = make_tokens(32, 12);
  h.add_request(with_suffix(doc, 3, 13), 1);
  h.run_until_done();
  SchedulerConnector& s = *h.scheduler;
  const auto prompt = with_suffix(doc, 5, 14);
  const Match m = s.get_num_new_matched_tokens(
      {.id = "b", .tokens = prompt, .num_prompt_tokens = prompt.size()}, 4);
  ASSERT_EQ(m.tokens, 28u);
  s.update_state_after_alloc("b", GroupBlocks{{50, 51, 52, 53, 54, 55, 56, 57, 58}}, 28);
  const StepMetadata meta = s.build_step_metadata({});
  ASSERT_EQ(meta.loads.size(), 1u);
  const auto& chunks = meta.loads[0].chunks;
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].first_block, 1u);
  EXPECT_EQ(chunks[0].blocks, std::vector<uint32_t>{51});
  EXPECT_EQ(chunks[1].first_block, 0u);
  EXPECT_EQ(chunks[1].blocks, (std::vector<uint32_t>{52, 53}));
  // Not a block boundary of the device cache: no match.
  EXPECT_EQ(s.get_num_new_matched_tokens(
                 {.id = "c", .tokens = prompt, .num_prompt_tokens = prompt.size()}, 3)
                .tokens,
            0u);
  WorkerOutput ack{.rank = 0, .finished = {{meta.loads[0].job}}};
  const StepOutcome out = s.update_from_worker_output(std::span(&ack, 1));
  ASSERT_EQ(out.loads.size(), 1u);
  EXPECT_EQ(out.loads[0].num_computed, 32u);
  s.request_finished("b");
  s.request_finished("c");
  Status audit = s.audit();
  EXPECT_TRUE(audit) << audit.error().message;
}

// The scheduler side does not know how many blocks the workers hold, so any block id reaches it.
// A store reading the highest ids is recorded and fenced like any other: their +1 wrapped to 0,
// and the store was recorded past the end of a table indexed by block.
TEST(Connector, F10_AStoreReadingTheHighestBlockIdsIsFencedLikeAnyOther) {
  CacheManager cache(8, 4096, *make_eviction_policy("lru", 8));
  SchedulerConnector s({.layout = single_group_layout()}, cache);
  const auto prompt = make_tokens(8, 21);  // one chunk: 2 blocks of 4 tokens
  const GroupBlocks top{{UINT32_MAX - 1, UINT32_MAX}};
  ASSERT_EQ(
      s.get_num_new_matched_tokens({.id = "a", .tokens = prompt, .num_prompt_tokens = 8}, 0).tokens,
      0u);
  s.update_state_after_alloc("a", top, 0);
  const ScheduledRequest a{.id = "a",
                           .tokens = prompt,
                           .num_prompt_tokens = prompt.size(),
                           .num_computed_after_step = prompt.size()};
  const StepMetadata first = s.build_step_metadata({.step = 1, .requests = {a}});
  ASSERT_EQ(first.stores.size(), 1u);
  EXPECT_EQ(first.stores[0].chunks[0].blocks, top[0]);
  // The engine gives a's blocks to b while the store still reads them (F10).
  s.request_preempted("a");
  const auto other = make_tokens(8, 22);
  ASSERT_EQ(
      s.get_num_new_matched_tokens({.id = "b", .tokens = other, .num_prompt_tokens = 8}, 0).tokens,
      0u);
  s.update_state_after_alloc("b", top, 0);
  const StepMetadata second = s.build_step_metadata({});
  EXPECT_EQ(second.flush, std::vector<JobId>{first.stores[0].job});
  WorkerOutput done{.rank = 0, .finished = {{first.stores[0].job}}};
  s.update_from_worker_output(std::span(&done, 1));
  s.request_finished("b");
  Status audit = s.audit();
  EXPECT_TRUE(audit) << audit.error().message;
}

TEST(Connector, BadCallsAreErrors) {
  CacheManager cache(8, 4096, *make_eviction_policy("lru", 8));
  EXPECT_THROW(SchedulerConnector({.world_size = 0, .layout = single_group_layout()}, cache),
               std::invalid_argument);
  EXPECT_THROW(SchedulerConnector({.layout = KvLayout{}}, cache), std::invalid_argument);
  EXPECT_THROW(
      SchedulerConnector({.layout = single_group_layout(), .max_store_chunks_in_flight = 0}, cache),
      std::invalid_argument);
  SchedulerConnector s({.layout = single_group_layout()}, cache);
  EXPECT_THROW(s.update_state_after_alloc("nobody", {}, 4), std::invalid_argument);
  WorkerOutput from_rank_3{.rank = 3};
  EXPECT_THROW(s.update_from_worker_output(std::span(&from_rank_3, 1)), std::invalid_argument);
  LocalWorkerConnector w(0);
  EXPECT_THROW(w.start_load({}), std::logic_error);
}

// F1/F2: a job whose chunks the rank's caches or pool lack (the scheduler side does not know
// their size) is refused with a Failed verdict, and the call raises after its other work; nothing
// of it stays queued to raise again at later steps.
TEST(Connector, F1_AJobOutOfRangeOfTheRankIsRefusedWithAVerdictAndLeavesNothingQueued) {
  for (TransferGranularity granularity :
       {TransferGranularity::kRequest, TransferGranularity::kLayer}) {
    SCOPED_TRACE(granularity == TransferGranularity::kLayer ? "layer" : "request");
    HarnessOptions o;
    o.granularity = granularity;
    ManualClock clock;
    Rank r(0, o.layout, o, FaultPlan{}, clock);
    const uint32_t blocks = o.layout.groups[0].blocks_per_chunk;
    auto chunk = [&](uint32_t first_block, SlotId slot) {
      ChunkTransfer c{.group = 0, .slot = slot};
      for (uint32_t b = 0; b < blocks; ++b) c.blocks.push_back(first_block + b);
      return c;
    };
    StepMetadata step{.step = 1};
    step.stores.push_back({.job = 1, .request = "a", .chunks = {chunk(0, 0)}});
    step.stores.push_back({.job = 2, .request = "b", .chunks = {chunk(o.num_blocks, 1)}});
    step.loads.push_back({.job = 3, .request = "c", .chunks = {chunk(8, o.num_slots)}});
    bool raised = false;
    try {
      r.worker->start_load(step);
    } catch (const std::invalid_argument&) {
      raised = true;
    }
    try {
      r.worker->queue_stores(step);
    } catch (const std::invalid_argument&) {
      raised = true;
    }
    EXPECT_TRUE(raised);
    std::map<JobId, Outcome> verdicts;
    GroupBlocks invalid(1);
    for (int i = 0; i < 3; ++i) {  // later steps run, and the good store ends
      ASSERT_NO_THROW(r.worker->start_load(StepMetadata{.step = uint64_t(2 + i)}));
      r.host.quiesce();
      WorkerOutput out = r.worker->take_output();
      for (const JobVerdict& v : out.finished) verdicts.emplace(v.job, v.outcome);
      invalid[0].insert(invalid[0].end(), out.invalid_blocks[0].begin(),
                        out.invalid_blocks[0].end());
    }
    EXPECT_EQ(verdicts,
              (std::map<JobId, Outcome>{
                  {1, Outcome::kCompleted}, {2, Outcome::kFailed}, {3, Outcome::kFailed}}));
    EXPECT_EQ(invalid[0], (std::vector<uint32_t>{8, 9})) << "F4: the refused load's blocks";
    EXPECT_EQ(r.worker->in_flight(), 0u);
    EXPECT_TRUE(r.worker->audit());
  }
}

TEST(Connector, OptionsComeFromTheConfig) {
  Config config;
  config.transfer.transfer_deadline_s = 3;
  config.transfer.completion_margin_s = 1.5;
  config.connector.store_decode = true;
  config.connector.store_threshold = 3;
  config.connector.max_store_chunks_in_flight = 7;
  const SchedulerOptions o = scheduler_options(config, 4, single_group_layout(), "m");
  EXPECT_EQ(o.job_timeout, std::chrono::milliseconds(4500));
  EXPECT_TRUE(o.store_decode);
  EXPECT_EQ(o.store_threshold, 3u);
  EXPECT_EQ(o.max_store_chunks_in_flight, 7u);
  EXPECT_EQ(o.world_size, 4u);
}

}  // namespace
}  // namespace kvtier::testing
