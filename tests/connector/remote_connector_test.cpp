// The connector's remote sides built by ConnectorFactory (`cache.mode: server`) against a real
// kvtierd: RemoteCacheIndex on its own (pins, stores, events, reset, F12 audit), and a
// SchedulerConnector with every rank's RemoteWorkerConnector storing and loading a prefix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "connector/kvtierd_for_connector.h"
#include "kvtier/connector/connector_factory.h"
#include "kvtier/connector/remote_cache_index.h"
#include "kvtier/connector/remote_worker_connector.h"

namespace kvtier::testing {
namespace {

using std::chrono::seconds;

constexpr size_t kChunkTokens = 16;
constexpr uint32_t kDeviceBlocks = 32;

std::vector<TokenId> tokens(size_t n, TokenId seed) {
  std::vector<TokenId> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = seed * 1000 + static_cast<TokenId>(i);
  return t;
}

class RemoteConnectorTest : public ::testing::Test {
 protected:
  explicit RemoteConnectorTest(uint32_t world_size = 2)
      : layout_(remote_layout()),
        kvtierd_(start_kvtierd(layout_.groups[0], unique_endpoint(), /*test_hooks=*/true)),
        factory_(config(kvtierd_->endpoint()),
                 ConnectorShape{.world_size = world_size, .layout = layout_, .model = "m"}) {}

  // The scheduler loop waits for a LOOKUP at most min(request timeout, client heartbeat): half a
  // second here, so that a loaded test machine does not turn lookups into misses.
  static Config config(const std::string& endpoint) {
    Config c = server_mode(Config{}, endpoint);
    c.server.heartbeat_interval_s = 0.5;
    c.server.request_timeout_s = 1;
    return c;
  }

  std::vector<std::unique_ptr<WorkerConnector>> workers() const {
    std::vector<std::unique_ptr<WorkerConnector>> out;
    for (uint32_t r = 0; r < factory_.shape().world_size; ++r) {
      out.push_back(factory_.worker({.rank = r, .device_blocks = kDeviceBlocks}));
    }
    return out;
  }

  std::byte* block(const WorkerConnector& w, uint32_t b, uint32_t layer) const {
    return reinterpret_cast<std::byte*>(w.kv_caches().groups[0].bases[layer]) +
           size_t{b} * layout_.groups[0].layer_block_bytes();
  }
  void fill(const WorkerConnector& w, uint32_t b, uint8_t seed) const {
    for (uint32_t l = 0; l < 2; ++l) {
      std::memset(block(w, b, l), seed + l, layout_.groups[0].layer_block_bytes());
    }
  }
  bool same(const WorkerConnector& w, uint32_t a, uint32_t b) const {
    for (uint32_t l = 0; l < 2; ++l) {
      if (std::memcmp(block(w, a, l), block(w, b, l), layout_.groups[0].layer_block_bytes()) != 0) {
        return false;
      }
    }
    return true;
  }

  // Every rank's outputs until each has reported `job` (bounded).
  static std::vector<WorkerOutput> until_verdict(
      const std::vector<std::unique_ptr<WorkerConnector>>& ranks, JobId job) {
    std::vector<WorkerOutput> outputs;
    std::vector<bool> done(ranks.size(), false);
    const bool all = eventually([&] {
      for (size_t r = 0; r < ranks.size(); ++r) {
        if (done[r]) continue;
        outputs.push_back(ranks[r]->take_output());
        for (const JobVerdict& v : outputs.back().finished) done[r] = done[r] || v.job == job;
      }
      return std::ranges::all_of(done, [](bool d) { return d; });
    });
    EXPECT_TRUE(all) << "no verdict for job " << job << " from every rank";
    return outputs;
  }

  // A worker of rank 0 alone stores `key`'s chunk (a world of one rank).
  void store_rank0_share(const ChunkKey& key) {
    RemoteWorkerConnector w(0, layout_, kDeviceBlocks, factory_.config());
    ASSERT_TRUE(w.wait_until_ok(seconds(10)));
    w.queue_stores(StepMetadata{
        .stores = {TransferJob{.job = 1,
                               .request = "r",
                               .chunks = {ChunkTransfer{.group = 0, .blocks = {0, 1, 2, 3}}},
                               .keys = {key}}}});
    ASSERT_TRUE(eventually([&] { return !w.take_output().finished.empty(); }));
  }

  // kvtierd's STATS, through a client of its own.
  server::Reply server_stats() {
    SharedKvArena arena(layout_, layout_.groups[0].blocks_per_chunk, "probe");
    server::CacheClient probe(server::ClientOptions{.endpoint = kvtierd_->endpoint()},
                              arena.registration(9));
    EXPECT_TRUE(probe.wait_until_ok(seconds(10)));
    Result<server::Reply> stats = probe.stats().get();
    EXPECT_TRUE(stats) << stats.error().message;
    return stats ? *stats : server::Reply{};
  }

  KvLayout layout_;
  std::unique_ptr<KvtierdProcess> kvtierd_;
  ConnectorFactory factory_;
  const ChunkKey key_{.lo = 7, .hi = 11};
};

class RemoteCacheIndexTest : public RemoteConnectorTest {
 protected:
  RemoteCacheIndexTest()
      : RemoteConnectorTest(/*world_size=*/1), index_(factory_.config(), layout_, 1) {}

  RemoteCacheIndex index_;
};

TEST_F(RemoteCacheIndexTest, F12_AuditFailsWhileALoadsPinIsHeldAndPassesOnceReleased) {
  store_rank0_share(key_);
  ASSERT_EQ(index_.lookup(std::span(&key_, 1)).hit_chunks, 1u);
  Status audit = index_.audit();
  ASSERT_TRUE(audit) << audit.error().message;

  Result<std::vector<SlotId>> pinned = index_.prepare_load(std::span(&key_, 1));
  ASSERT_TRUE(pinned) << pinned.error().message;
  EXPECT_EQ(index_.pinned_keys(), 1u);
  EXPECT_EQ(server_stats().field("slots_pinned"), 1u) << "kvtierd holds the chunk for the load";
  // The load's pin leaks: it is never completed. At quiescence that is an F12 violation.
  audit = index_.audit();
  ASSERT_FALSE(audit) << "a leaked pin must fail the audit";
  EXPECT_NE(audit.error().message.find("pin 1 keys"), std::string::npos) << audit.error().message;

  index_.complete_load(std::span(&key_, 1));
  audit = index_.audit();
  EXPECT_TRUE(audit) << audit.error().message;
  EXPECT_EQ(server_stats().field("slots_pinned"), 0u);
}

TEST_F(RemoteCacheIndexTest, F12_AuditFailsWhenKvtierdStillHoldsALockTheIndexReleased) {
  store_rank0_share(key_);
  ASSERT_TRUE(index_.prepare_load(std::span(&key_, 1)));
  // kvtierd swallows the RELEASE: the index counts no pin, kvtierd still holds the lock.
  index_.set_release_hook(server::TestHook::kNoReply);
  index_.complete_load(std::span(&key_, 1));
  EXPECT_EQ(index_.pinned_keys(), 0u);
  const Status audit = index_.audit();
  ASSERT_FALSE(audit) << "kvtierd's STATS disagree with the index";
  EXPECT_NE(audit.error().message.find("kvtierd holds 1 read-locked keys"), std::string::npos)
      << audit.error().message;
}

TEST_F(RemoteCacheIndexTest, ALookupSentAheadAnswersTheLookupOfItsKeysOrOfTheirTail) {
  const ChunkKey missing{.lo = 5, .hi = 6};
  store_rank0_share(key_);
  const std::vector<ChunkKey> keys = {key_, missing};
  index_.lookup_ahead(keys);
  const LookupResult whole = index_.lookup(keys);
  EXPECT_EQ(whole.hit_chunks, 1u);
  EXPECT_EQ(index_.lookups_answered_ahead(), 1u) << "the reply of the LOOKUP sent ahead";
  EXPECT_EQ(index_.lookup(keys).hit_chunks, 1u);
  EXPECT_EQ(index_.lookups_answered_ahead(), 1u) << "a reply answers one lookup";

  // The tail from key 1 on (the device holds chunk 0), answered by the reply sent ahead.
  const ChunkKey second{.lo = 7, .hi = 8};
  store_rank0_share(second);
  const std::vector<ChunkKey> three = {key_, second, missing};
  index_.lookup_ahead(three);
  EXPECT_EQ(index_.lookup(std::span(three).subspan(1)).hit_chunks, 1u);
  EXPECT_EQ(index_.lookups_answered_ahead(), 2u);
  // Past the first miss the reply says nothing: the lookup asks kvtierd itself.
  index_.lookup_ahead(keys);
  EXPECT_EQ(index_.lookup(std::span(keys).subspan(1)).hit_chunks, 0u);
  EXPECT_EQ(index_.lookups_answered_ahead(), 2u);
  const Status audit = index_.audit();
  EXPECT_TRUE(audit) << audit.error().message;
}

TEST_F(RemoteCacheIndexTest, ALoadOfAChunkKvtierdDoesNotHoldPinsNothing) {
  const ChunkKey missing{.lo = 1, .hi = 2};
  store_rank0_share(key_);
  const std::vector<ChunkKey> keys = {key_, missing};
  Result<std::vector<SlotId>> pinned = index_.prepare_load(keys);
  ASSERT_FALSE(pinned);
  EXPECT_EQ(pinned.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(index_.pinned_keys(), 0u);
  const Status audit = index_.audit();
  EXPECT_TRUE(audit) << "the lock on the hit was released: " << audit.error().message;
  EXPECT_THROW(index_.complete_load(keys), std::logic_error) << "nothing was pinned";
}

TEST_F(RemoteCacheIndexTest, AChunkBeingStoredIsNotPreparedTwiceAndItsSuccessIsAnEvent) {
  const ChunkKey a{.lo = 1, .hi = 1}, b{.lo = 2, .hi = 2}, c{.lo = 3, .hi = 3};
  const std::vector<ChunkKey> ab = {a, b}, bc = {b, c};
  const std::optional<StorePlan> first = index_.prepare_store(ab);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->keys, ab);
  EXPECT_EQ(first->slots, (std::vector<SlotId>{0, 0}));
  const std::optional<StorePlan> second = index_.prepare_store(bc);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->keys, std::vector<ChunkKey>{c}) << "b is being stored already";
  EXPECT_FALSE(index_.audit()) << "stores in flight at quiescence";

  index_.complete_store(first->keys, Verdict::kSucceeded);
  index_.complete_store(second->keys, Verdict::kFailed);
  EXPECT_EQ(index_.take_events(),
            (std::vector<CacheEvent>{{.kind = CacheEventKind::kStored, .keys = ab}}));
  EXPECT_TRUE(index_.take_events().empty());
  const Status audit = index_.audit();
  EXPECT_TRUE(audit) << audit.error().message;
}

TEST_F(RemoteCacheIndexTest, ResetIsNotPartOfKvtierdsIndexAndChangesNothing) {
  const Status reset = index_.reset();
  ASSERT_FALSE(reset);
  EXPECT_EQ(reset.error().code, ErrorCode::kUnimplemented);
  SchedulerConnector connector(scheduler_options(factory_.config(), 1, layout_, "m"), index_);
  EXPECT_FALSE(connector.reset_cache());
}

TEST_F(RemoteCacheIndexTest, H7_KvtierdGoneMeansMissesNoLoadsNoStoresAndANamedReason) {
  store_rank0_share(key_);
  EXPECT_EQ(index_.degraded(), std::nullopt);
  kvtierd_->kill_now();
  ASSERT_TRUE(eventually([&] { return index_.degraded().has_value(); }));
  EXPECT_NE(index_.degraded()->find("cache server " + kvtierd_->endpoint()), std::string::npos);
  EXPECT_EQ(index_.lookup(std::span(&key_, 1)).hit_chunks, 0u);
  EXPECT_FALSE(index_.prepare_load(std::span(&key_, 1)));
  EXPECT_EQ(index_.prepare_store(std::span(&key_, 1)), std::nullopt);
  EXPECT_EQ(index_.audit().error().code, ErrorCode::kUnavailable);
}

TEST_F(RemoteConnectorTest, PrefixStoredByEveryRankLoadsBackIntoNewBlocksAndEverythingAudits) {
  SchedulerSide side = factory_.scheduler_side();
  ASSERT_TRUE(side.connector);
  EXPECT_EQ(side.cache, nullptr) << "no in-process host cache";
  auto ranks = workers();
  SchedulerConnector& s = *side.connector;

  // Request a: 2 chunks and a token. Its forward pass "writes" blocks 0-8 on every rank.
  const std::vector<TokenId> a = tokens(2 * kChunkTokens + 1, 1);
  ASSERT_EQ(s.get_num_new_matched_tokens({.id = "a", .tokens = a, .num_prompt_tokens = a.size()}, 0)
                .tokens,
            0u);
  const std::vector<uint32_t> a_blocks = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  s.update_state_after_alloc("a", {a_blocks}, 0);
  const StepMetadata store =
      s.build_step_metadata({.step = 0,
                             .requests = {{.id = "a",
                                           .tokens = a,
                                           .num_prompt_tokens = a.size(),
                                           .new_blocks = {{}},
                                           .num_computed_after_step = a.size()}}});
  ASSERT_EQ(store.stores.size(), 1u);
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (uint32_t b : a_blocks) fill(*ranks[r], b, static_cast<uint8_t>(10 * r + b + 1));
    ranks[r]->start_load(store);
    ranks[r]->queue_stores(store);
  }
  StepOutcome out = s.update_from_worker_output(until_verdict(ranks, store.stores[0].job));
  EXPECT_FALSE(out.fail_stop);
  EXPECT_EQ(s.counters().stores_completed, 1u);
  EXPECT_FALSE(s.request_finished("a"));
  const std::vector<CacheEvent> events = s.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].keys.size(), 2u);

  // Request b shares a's two chunks: they load into blocks 16-23 of every rank.
  std::vector<TokenId> b(a.begin(), a.begin() + 2 * kChunkTokens);
  for (TokenId t : tokens(5, 2)) b.push_back(t);
  const Match match =
      s.get_num_new_matched_tokens({.id = "b", .tokens = b, .num_prompt_tokens = b.size()}, 0);
  ASSERT_EQ(match.tokens, 2 * kChunkTokens);
  s.update_state_after_alloc("b", {{16, 17, 18, 19, 20, 21, 22, 23, 24, 25}}, match.tokens);
  const StepMetadata load = s.build_step_metadata({.step = 1});
  ASSERT_EQ(load.loads.size(), 1u);
  for (auto& rank : ranks) rank->start_load(load);
  out = s.update_from_worker_output(until_verdict(ranks, load.loads[0].job));
  ASSERT_EQ(out.loads.size(), 1u);
  EXPECT_EQ(out.loads[0].outcome, Outcome::kCompleted);
  EXPECT_EQ(out.loads[0].num_computed, 2 * kChunkTokens);
  for (const auto& rank : ranks) {
    for (uint32_t i = 0; i < 8; ++i) EXPECT_TRUE(same(*rank, i, 16 + i)) << "block " << i;
  }
  EXPECT_FALSE(s.request_finished("b"));

  // F12 at quiescence, on the scheduler side (kvtierd's STATS included) and on every rank.
  Status audit = s.audit();
  EXPECT_TRUE(audit) << audit.error().message;
  for (const auto& rank : ranks) {
    audit = rank->audit();
    EXPECT_TRUE(audit) << "rank " << rank->rank() << ": " << audit.error().message;
  }
  const server::Reply stats = server_stats();
  EXPECT_EQ(stats.field("slots_pinned"), 0u);
  EXPECT_EQ(stats.field("locks"), 0u);
}

TEST(ConnectorFactory, LocalCacheGivesTheInProcessSidesAndBadShapesAreRefused) {
  const KvLayout layout = remote_layout();
  ConnectorFactory local(
      Config{}, ConnectorShape{.world_size = 1, .layout = layout, .model = "m", .host_slots = 8});
  const SchedulerSide side = local.scheduler_side();
  ASSERT_TRUE(side.cache);
  EXPECT_EQ(side.cache->num_slots(), 8u);
  EXPECT_EQ(side.cache->slot_bytes(), layout.max_chunk_bytes());
  ASSERT_TRUE(side.connector);
  EXPECT_EQ(side.connector->degraded(), std::nullopt);
  EXPECT_THROW(local.worker({.rank = 0, .device_blocks = 8}), std::invalid_argument)
      << "a local cache's worker needs a device";
  EXPECT_THROW(local.worker({.rank = 1, .device_blocks = 8}), std::invalid_argument);

  Config disabled;
  disabled.connector.enabled = false;
  const SchedulerSide none = ConnectorFactory(disabled, local.shape()).scheduler_side();
  EXPECT_EQ(none.connector, nullptr);
  EXPECT_EQ(none.index, nullptr);

  EXPECT_THROW(ConnectorFactory(Config{}, ConnectorShape{.layout = layout, .host_slots = 0}),
               std::invalid_argument);
  Config bad;
  bad.transfer.transfer_deadline_s = 0;
  EXPECT_THROW(ConnectorFactory(bad, local.shape()), std::invalid_argument);
}

}  // namespace
}  // namespace kvtier::testing
