// RemoteWorkerConnector (the worker side in `cache.mode: server`) against a real kvtierd started
// with --test-hooks: verdicts, bytes, loads starting inside a chunk, F4, F7 and F12.
#include "kvtier/connector/remote_worker_connector.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "connector/kvtierd_for_connector.h"

namespace kvtier::testing {
namespace {

// Loads that end in a later step (connector.load_in_step false) unless a fixture below asks for
// loads in step, where start_load waits for them.
Config loads_in_step(bool in_step) {
  Config c;
  c.connector.load_in_step = in_step;
  return c;
}

class RemoteWorkerConnectorTest : public ::testing::Test {
 protected:
  explicit RemoteWorkerConnectorTest(Config base = loads_in_step(false))
      : layout_(remote_layout()),
        kvtierd_(start_kvtierd(layout_.groups[0], unique_endpoint(), /*test_hooks=*/true)),
        connector_(0, layout_, 32, server_mode(std::move(base), kvtierd_->endpoint())) {
    EXPECT_TRUE(connector_.wait_until_ok(std::chrono::seconds(10)));
  }

  std::byte* block(uint32_t b, uint32_t layer) const {
    return reinterpret_cast<std::byte*>(connector_.kv_caches().groups[0].bases[layer]) +
           size_t{b} * layout_.groups[0].layer_block_bytes();
  }
  void fill(uint32_t b, uint8_t seed) {
    for (uint32_t l = 0; l < 2; ++l)
      std::memset(block(b, l), seed + l, layout_.groups[0].layer_block_bytes());
  }
  bool same(uint32_t a, uint32_t b) const {
    for (uint32_t l = 0; l < 2; ++l) {
      if (std::memcmp(block(a, l), block(b, l), layout_.groups[0].layer_block_bytes()) != 0)
        return false;
    }
    return true;
  }

  // Outputs until `job` has a verdict (bounded); the output that carries it is last.
  std::vector<WorkerOutput> until_verdict(JobId job) {
    std::vector<WorkerOutput> outputs;
    auto has = [&] {
      outputs.push_back(connector_.take_output());
      for (const JobVerdict& v : outputs.back().finished) {
        if (v.job == job) return true;
      }
      return false;
    };
    EXPECT_TRUE(eventually(has, std::chrono::seconds(10))) << "no verdict for job " << job;
    return outputs;
  }
  static Outcome outcome_of(const WorkerOutput& o, JobId job) {
    for (const JobVerdict& v : o.finished) {
      if (v.job == job) return v.outcome;
    }
    ADD_FAILURE() << "no verdict for job " << job;
    return Outcome::kFailed;
  }

  // kvtierd's STATS, through a client of its own.
  server::Reply server_stats() {
    SharedKvArena arena(layout_, layout_.groups[0].blocks_per_chunk, "probe");
    server::CacheClient probe(server::ClientOptions{.endpoint = kvtierd_->endpoint()},
                              arena.registration(1));
    EXPECT_TRUE(probe.wait_until_ok(std::chrono::seconds(10)));
    Result<server::Reply> stats = probe.stats().get();
    EXPECT_TRUE(stats) << stats.error().message;
    return stats ? *stats : server::Reply{};
  }
  // F12 on kvtierd's side: its cache audits clean, nothing pinned or in flight.
  void expect_server_quiescent() {
    const server::Reply stats = server_stats();
    EXPECT_EQ(stats.field("cache_audit_ok"), 1u);
    EXPECT_EQ(stats.field("slots_pinned"), 0u);
    EXPECT_EQ(stats.field("transfers_in_flight"), 0u);
  }

  static TransferJob job(JobId id, std::vector<uint32_t> blocks, ChunkKey key,
                         uint32_t first_block = 0) {
    return TransferJob{.job = id,
                       .request = "r",
                       .chunks = {ChunkTransfer{
                           .group = 0, .blocks = std::move(blocks), .first_block = first_block}},
                       .keys = {key}};
  }
  void store(JobId id, std::vector<uint32_t> blocks, ChunkKey key) {
    connector_.queue_stores(StepMetadata{.stores = {job(id, std::move(blocks), key)}});
  }
  void load(JobId id, std::vector<uint32_t> blocks, ChunkKey key, uint32_t first_block = 0) {
    connector_.start_load(StepMetadata{.loads = {job(id, std::move(blocks), key, first_block)}});
  }

  const ChunkKey key_{.lo = 7, .hi = 11};
  KvLayout layout_;
  std::unique_ptr<KvtierdProcess> kvtierd_;
  RemoteWorkerConnector connector_;
};

TEST_F(RemoteWorkerConnectorTest, StoredChunkLoadsBackWholeOrFromInsideTheChunk) {
  for (uint32_t b = 0; b < 4; ++b) fill(b, static_cast<uint8_t>(10 * (b + 1)));
  store(1, {0, 1, 2, 3}, key_);
  EXPECT_EQ(outcome_of(until_verdict(1).back(), 1), Outcome::kCompleted);

  load(2, {4, 5, 6, 7}, key_);
  EXPECT_EQ(outcome_of(until_verdict(2).back(), 2), Outcome::kCompleted);
  for (uint32_t b = 0; b < 4; ++b) EXPECT_TRUE(same(b, 4 + b)) << "block " << b;

  // The device holds the chunk's first two blocks (8, 9): only blocks 2 and 3 go to 10, 11.
  fill(8, 1);
  fill(9, 2);
  load(3, {10, 11}, key_, /*first_block=*/2);
  EXPECT_EQ(outcome_of(until_verdict(3).back(), 3), Outcome::kCompleted);
  EXPECT_TRUE(same(2, 10));
  EXPECT_TRUE(same(3, 11));
  std::vector<std::byte> untouched(layout_.groups[0].layer_block_bytes(), std::byte{1});
  EXPECT_EQ(std::memcmp(block(8, 0), untouched.data(), untouched.size()), 0)
      << "block 8 not written";
  EXPECT_EQ(connector_.in_flight(), 0u);
  expect_server_quiescent();
  const Status audit = connector_.audit();
  EXPECT_TRUE(audit) << audit.error().message;
}

TEST_F(RemoteWorkerConnectorTest, F4_FailedLoadReportsItsBlocksInvalidWithItsVerdict) {
  load(1, {4, 5, 6, 7}, ChunkKey{.lo = 99, .hi = 99});  // never stored: not_found
  const WorkerOutput missing = until_verdict(1).back();
  EXPECT_EQ(outcome_of(missing, 1), Outcome::kFailed);
  EXPECT_EQ(missing.invalid_blocks, (GroupBlocks{{4, 5, 6, 7}}));

  fill(0, 3);
  store(2, {0, 1, 2, 3}, key_);
  until_verdict(2);
  connector_.set_test_hook(Direction::kLoad,
                           server::TestHook::kFailCopies);  // a device fault in kvtierd
  load(3, {12, 13}, key_, /*first_block=*/2);
  const WorkerOutput faulted = until_verdict(3).back();
  EXPECT_EQ(outcome_of(faulted, 3), Outcome::kFailed);
  EXPECT_EQ(faulted.invalid_blocks, (GroupBlocks{{12, 13}}));
  EXPECT_FALSE(faulted.fail_stop);
  EXPECT_EQ(connector_.in_flight(), 0u);
  expect_server_quiescent();
}

// F1/F2, as for the local worker: a job naming a block past this rank's (the arena holds
// scratch chunks right after them, and another layer's tensor after those) is refused with a
// Failed verdict, and the call raises once it sent the rest; a job id given twice raises before
// anything is sent.
TEST_F(RemoteWorkerConnectorTest, F1_AJobOutOfRangeOfTheRankIsRefusedWithAVerdict) {
  for (uint32_t b = 0; b < 4; ++b) fill(b, static_cast<uint8_t>(b + 1));
  const ChunkKey scratch_key{.lo = 8, .hi = 11};
  EXPECT_THROW(connector_.queue_stores(StepMetadata{
                   .stores = {job(1, {0, 1, 2, 3}, key_), job(2, {30, 31, 32, 33}, scratch_key)}}),
               std::invalid_argument);
  std::map<JobId, Outcome> verdicts;
  ASSERT_TRUE(eventually(
      [&] {
        for (const JobVerdict& v : connector_.take_output().finished) verdicts[v.job] = v.outcome;
        return verdicts.size() == 2;
      },
      std::chrono::seconds(10)));
  EXPECT_EQ(verdicts[1], Outcome::kCompleted);
  EXPECT_EQ(verdicts[2], Outcome::kFailed) << "published the scratch chunks' bytes";
  EXPECT_THROW(load(3, {4, 5, 6, 1u << 30}, key_), std::invalid_argument);
  const WorkerOutput refused = until_verdict(3).back();
  EXPECT_EQ(outcome_of(refused, 3), Outcome::kFailed);
  EXPECT_EQ(refused.invalid_blocks, (GroupBlocks{{4, 5, 6, 1u << 30}}));
  EXPECT_THROW(connector_.start_load(StepMetadata{
                   .loads = {job(4, {4, 5, 6, 7}, key_), job(4, {8, 9, 10, 11}, key_)}}),
               std::invalid_argument);
  EXPECT_EQ(connector_.in_flight(), 0u) << "nothing of a step with a job twice was sent";
  load(5, {4, 5, 6, 7}, key_);
  EXPECT_EQ(outcome_of(until_verdict(5).back(), 5), Outcome::kCompleted);
  for (uint32_t b = 0; b < 4; ++b) EXPECT_TRUE(same(b, 4 + b)) << "block " << b;
  expect_server_quiescent();
  const Status audit = connector_.audit();
  EXPECT_TRUE(audit) << audit.error().message;
}

TEST_F(RemoteWorkerConnectorTest, F7_LoadLostWithTheServerIsUnprovableAndFailStopsTheRank) {
  fill(0, 5);
  store(1, {0, 1, 2, 3}, key_);
  until_verdict(1);
  connector_.set_test_hook(Direction::kLoad, server::TestHook::kHangCopies);
  load(2, {4, 5, 6, 7}, key_);
  // The RETRIEVE reached kvtierd and its copies hang (one never sent would just fail).
  ASSERT_TRUE(eventually([&] { return server_stats().field("transfers_in_flight") == 1; }));
  EXPECT_EQ(connector_.take_output().finished.size(), 0u) << "the copies hang";
  kvtierd_->kill_now();
  const WorkerOutput lost = until_verdict(2).back();
  EXPECT_EQ(outcome_of(lost, 2), Outcome::kUnprovable);
  EXPECT_TRUE(lost.fail_stop);
  EXPECT_TRUE(connector_.take_output().fail_stop) << "for good";
  EXPECT_TRUE(connector_.fail_stopped());
}

TEST_F(RemoteWorkerConnectorTest, F12_AuditFailsWhileAJobIsInFlightAndWhenKvtierdIsGone) {
  fill(0, 6);
  store(1, {0, 1, 2, 3}, key_);
  until_verdict(1);
  Status audit = connector_.audit();
  EXPECT_TRUE(audit) << audit.error().message;
  connector_.set_test_hook(Direction::kLoad, server::TestHook::kHangCopies);
  load(2, {4, 5, 6, 7}, key_);
  audit = connector_.audit();
  ASSERT_FALSE(audit);
  EXPECT_NE(audit.error().message.find("1 jobs in flight"), std::string::npos)
      << audit.error().message;
  kvtierd_->kill_now();
  until_verdict(2);
  audit = connector_.audit();
  ASSERT_FALSE(audit) << "nothing shows kvtierd's side is clean";
  EXPECT_EQ(audit.error().code, ErrorCode::kUnavailable) << audit.error().message;
}

// connector.load_in_step: the engine computes a loading request in the step its load starts,
// so start_load returns only once its loads ended.
class RemoteWorkerConnectorInStepTest : public RemoteWorkerConnectorTest {
 protected:
  static Config in_step() {
    Config c = loads_in_step(true);
    c.transfer.transfer_deadline_s = 1.0;  // a RETRIEVE waits 1.5 s at most
    c.transfer.completion_margin_s = 0.5;
    return c;
  }
  RemoteWorkerConnectorInStepTest() : RemoteWorkerConnectorTest(in_step()) {}
};

TEST_F(RemoteWorkerConnectorInStepTest, F4_LoadsEndInStartLoadWithTheirBytesOrTheirInvalidBlocks) {
  for (uint32_t b = 0; b < 4; ++b) fill(b, static_cast<uint8_t>(20 * (b + 1)));
  store(1, {0, 1, 2, 3}, key_);
  until_verdict(1);

  // Whole chunks, and a load from inside the chunk through scratch: the bytes are in place when
  // start_load returns, before any output was taken.
  connector_.start_load(StepMetadata{.loads = {job(2, {4, 5, 6, 7}, key_)}});
  EXPECT_EQ(connector_.in_flight(), 0u);
  for (uint32_t b = 0; b < 4; ++b) EXPECT_TRUE(same(b, 4 + b)) << "block " << b;
  EXPECT_EQ(outcome_of(connector_.take_output(), 2), Outcome::kCompleted);
  load(3, {10, 11}, key_, /*first_block=*/2);
  EXPECT_TRUE(same(2, 10));
  EXPECT_TRUE(same(3, 11));
  EXPECT_EQ(outcome_of(connector_.take_output(), 3), Outcome::kCompleted);

  // F4: a failed load's verdict and invalid blocks are in the step's output.
  load(4, {12, 13, 14, 15}, ChunkKey{.lo = 98, .hi = 98});  // never stored
  const WorkerOutput missing = connector_.take_output();
  EXPECT_EQ(outcome_of(missing, 4), Outcome::kFailed);
  EXPECT_EQ(missing.invalid_blocks, (GroupBlocks{{12, 13, 14, 15}}));
  EXPECT_EQ(connector_.in_flight(), 0u);
  expect_server_quiescent();
}

TEST_F(RemoteWorkerConnectorInStepTest, F8_AHungLoadHoldsStartLoadNoLongerThanItsDeadline) {
  fill(0, 9);
  store(1, {0, 1, 2, 3}, key_);
  until_verdict(1);
  connector_.set_test_hook(Direction::kLoad, server::TestHook::kHangCopies);
  const auto start = std::chrono::steady_clock::now();
  load(2, {4, 5, 6, 7}, key_);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_LT(waited, std::chrono::seconds(5)) << "deadline 1 s + margin 0.5 s";
  const WorkerOutput out = connector_.take_output();
  EXPECT_NE(outcome_of(out, 2), Outcome::kCompleted);
  EXPECT_EQ(out.invalid_blocks, (GroupBlocks{{4, 5, 6, 7}})) << "F4";
  EXPECT_EQ(connector_.in_flight(), 0u);
}

// F7 with F10: a STORE whose reply never came (kvtierd may still be copying from its blocks)
// keeps them unwritten. A step that gives those blocks to a loading request waits for the STORE
// (the flush), sees it Unprovable, and sends no RETRIEVE into them: the load fails unsent.
TEST_F(RemoteWorkerConnectorInStepTest, F7_NoRetrieveWritesTheBlocksOfAFlushedUnprovableStore) {
  fill(4, 30);
  store(1, {4, 5, 6, 7}, key_);
  ASSERT_EQ(outcome_of(until_verdict(1).back(), 1), Outcome::kCompleted);
  fill(0, 70);
  std::vector<std::byte> before(layout_.groups[0].layer_block_bytes());
  std::memcpy(before.data(), block(0, 0), before.size());
  connector_.set_test_hook(Direction::kStore, server::TestHook::kHangCopies);
  store(2, {0, 1, 2, 3}, ChunkKey{.lo = 8, .hi = 12});
  connector_.set_test_hook(Direction::kStore, server::TestHook::kNone);
  ASSERT_TRUE(eventually([&] { return server_stats().field("transfers_in_flight") == 1; }));

  // The blocks of store 2 go to a request that loads key_ into them.
  connector_.start_load(StepMetadata{.loads = {job(3, {0, 1, 2, 3}, key_)}, .flush = {2}});
  EXPECT_TRUE(connector_.fail_stopped()) << "the flushed store is Unprovable";
  const WorkerOutput out = connector_.take_output();
  EXPECT_EQ(outcome_of(out, 2), Outcome::kUnprovable);
  EXPECT_EQ(outcome_of(out, 3), Outcome::kFailed) << "never sent";
  EXPECT_EQ(out.invalid_blocks, (GroupBlocks{{0, 1, 2, 3}})) << "F4";
  EXPECT_EQ(std::memcmp(block(0, 0), before.data(), before.size()), 0)
      << "a RETRIEVE wrote a block that kvtierd's STORE may still read";
  EXPECT_EQ(server_stats().field("retrieves_completed"), 0u);
  kvtierd_->kill_now();  // its STORE copies hang until it ends
}

}  // namespace
}  // namespace kvtier::testing
