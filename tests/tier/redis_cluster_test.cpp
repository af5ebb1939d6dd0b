// RedisTier against a real three-master Redis Cluster on loopback ports, started by the test.
#include <gtest/gtest.h>

#include <algorithm>

#include "kvtier/tier/health_checked_tier.h"
#include "kvtier/tier/redis_tier.h"
#include "redis/redis_key_slot.h"
#include "redis_process.h"
#include "redis_test_util.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using bench::RedisClusterProcess;
using bench::RedisServerProcess;
using tier_test::all;
using tier_test::get_range;
using tier_test::GetOutcome;
using tier_test::key;
using tier_test::keys;
using tier_test::put_range;

constexpr Duration kClusterTimeout = 2s;

class RedisClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    Result<std::unique_ptr<RedisClusterProcess>> c = RedisClusterProcess::start(dir_->path(), 20s);
    if (!c) {
      skip_reason_ = new std::string(c.error().to_string());
      return;
    }
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete dir_;
    delete skip_reason_;
  }
  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << "Redis Cluster did not start: " << *skip_reason_;
    for (auto& node : cluster_->nodes()) ASSERT_TRUE(node->command({"FLUSHALL"}, kClusterTimeout));
    auto tier =
        RedisTier::open({.url = cluster_->url(),
                         .key_prefix = redis_key_prefix({.model = "m", .layout_fingerprint = 1})});
    ASSERT_TRUE(tier);
    tier_ = std::move(*tier);
  }

  // The node that owns `redis_key`'s slot: the one that does not answer MOVED.
  RedisServerProcess& owner_of(const std::string& redis_key) {
    for (auto& node : cluster_->nodes()) {
      if (node->command({"EXISTS", redis_key}, kClusterTimeout)) return *node;
    }
    ADD_FAILURE() << "no owner for " << redis_key;
    return *cluster_->nodes().front();
  }
  RedisServerProcess& other_than(const RedisServerProcess& node) {
    for (auto& n : cluster_->nodes()) {
      if (n.get() != &node) return *n;
    }
    return *cluster_->nodes().front();
  }
  static std::string id_of(const RedisServerProcess& node) {
    return node.command({"CLUSTER", "MYID"}, kClusterTimeout).value();
  }
  // Slot `slot` starts moving from `from` to `to` (IMPORTING on `to`, MIGRATING on `from`).
  static void start_migration(const std::string& slot, RedisServerProcess& from,
                              RedisServerProcess& to) {
    ASSERT_TRUE(
        to.command({"CLUSTER", "SETSLOT", slot, "IMPORTING", id_of(from)}, kClusterTimeout));
    ASSERT_TRUE(
        from.command({"CLUSTER", "SETSLOT", slot, "MIGRATING", id_of(to)}, kClusterTimeout));
  }
  // Every node assigns `slot` to `to`.
  void finish_migration(const std::string& slot, RedisServerProcess& to) {
    for (auto& node : cluster_->nodes()) {
      ASSERT_TRUE(node->command({"CLUSTER", "SETSLOT", slot, "NODE", id_of(to)}, kClusterTimeout));
    }
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline RedisClusterProcess* cluster_ = nullptr;
  static inline std::string* skip_reason_ = nullptr;
  std::unique_ptr<RedisTier> tier_;
};

TEST_F(RedisClusterTest, RoundTripSpreadsOverEveryMaster) {
  ASSERT_EQ(put_range(*tier_, 0, 96, kClusterTimeout).value(), all(ChunkStatus::kOk, 96));
  EXPECT_TRUE(tier_->cluster_mode());
  GetOutcome g = get_range(*tier_, 0, 96, kClusterTimeout);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, 96));
  EXPECT_TRUE(g.ok_chunks_intact);
  EXPECT_EQ(*tier_->contains(keys(95, 2), kClusterTimeout), (std::vector<bool>{true, false}));
  int total = 0;
  for (auto& node : cluster_->nodes()) {
    const int n = std::stoi(node->command({"DBSIZE"}, kClusterTimeout).value());
    EXPECT_GT(n, 0) << node->address() << " holds nothing: keys were not routed by slot";
    total += n;
  }
  EXPECT_EQ(total, 96);
  EXPECT_TRUE(tier_->ping(kClusterTimeout));
}

TEST_F(RedisClusterTest, FollowsMovedAfterASlotChangesOwner) {
  ASSERT_TRUE(put_range(*tier_, 0, 1, kClusterTimeout));  // the tier now has the slot map
  const std::string name = tier_->redis_key(key(0));
  const std::string slot = std::to_string(redis_key_slot(name));
  RedisServerProcess& from = owner_of(name);
  RedisServerProcess& to = other_than(from);
  // The cluster specification's slot migration, by hand.
  start_migration(slot, from, to);
  ASSERT_TRUE(from.command(
      {"MIGRATE", "127.0.0.1", std::to_string(to.port()), "", "0", "5000", "KEYS", name},
      kClusterTimeout));
  finish_migration(slot, to);
  // The tier still routes the slot to `from`, which answers MOVED.
  GetOutcome g = get_range(*tier_, 0, 1, kClusterTimeout);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, 1));
  EXPECT_TRUE(g.ok_chunks_intact);
}

TEST_F(RedisClusterTest, FollowsAskWhileASlotMigrates) {
  ASSERT_TRUE(tier_->ping(kClusterTimeout));  // the tier has the slot map
  const std::string name = tier_->redis_key(key(5));
  const std::string slot = std::to_string(redis_key_slot(name));
  RedisServerProcess& from = owner_of(name);
  RedisServerProcess& to = other_than(from);
  start_migration(slot, from, to);
  // An absent key of a migrating slot: `from` answers ASK, the write lands on `to`.
  ASSERT_EQ(put_range(*tier_, 5, 1, kClusterTimeout).value(), all(ChunkStatus::kOk, 1));
  EXPECT_EQ(to.command({"CLUSTER", "COUNTKEYSINSLOT", slot}, kClusterTimeout).value(), "1");
  GetOutcome g = get_range(*tier_, 5, 1, kClusterTimeout);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, 1));
  EXPECT_TRUE(g.ok_chunks_intact);
  finish_migration(slot, to);  // so later tests see a clean map
}

// ---- H7: a master that fails takes down its slots, not the tier ----

// The cluster's shape again after a test that killed or stopped a node, whatever the test did.
class ClusterNodeRestorer {
 public:
  explicit ClusterNodeRestorer(RedisServerProcess& node) : node_(node) {}
  ~ClusterNodeRestorer() {
    node_.resume();
    if (!node_.running()) {
      EXPECT_TRUE(node_.restart(20s));
    }
    EXPECT_TRUE(RedisClusterProcess::wait_serving(node_, 20s));
  }

 private:
  RedisServerProcess& node_;
};

class RedisClusterHealthTest : public RedisClusterTest {
 protected:
  static constexpr uint64_t kKeys = 48;

  void SetUp() override {
    RedisClusterTest::SetUp();
    if (IsSkipped()) return;
    auto inner =
        RedisTier::open({.url = cluster_->url(),
                         .key_prefix = redis_key_prefix({.model = "m", .layout_fingerprint = 2}),
                         .node_health = health_});
    ASSERT_TRUE(inner);
    checked_ = std::make_unique<HealthCheckedTier>(std::move(*inner), health_);
    ASSERT_EQ(*put_range(*checked_, 0, kKeys, kClusterTimeout), all(ChunkStatus::kOk, kKeys));
    // The victim: key 0's master. Which ids live there, and which elsewhere.
    const std::string name = redis_tier().redis_key(key(0));
    victim_ = &owner_of(name);
    for (uint64_t id = 0; id < kKeys; ++id) {
      const std::string k = redis_tier().redis_key(key(id));
      (victim_->command({"EXISTS", k}, kClusterTimeout).value_or("") == "1" ? on_victim_
                                                                            : elsewhere_)
          .push_back(id);
    }
    ASSERT_FALSE(on_victim_.empty());
    ASSERT_FALSE(elsewhere_.empty());
  }
  RedisTier& redis_tier() { return static_cast<RedisTier&>(checked_->inner()); }

  // The statuses the victim's keys should have (`victim`) while the others have kOk.
  std::vector<ChunkStatus> expect(ChunkStatus victim) const {
    std::vector<ChunkStatus> s(kKeys, ChunkStatus::kOk);
    for (uint64_t id : on_victim_) s[id] = victim;
    return s;
  }
  void expect_victim_named() {
    const TierMetrics m = checked_->metrics();
    EXPECT_EQ(m.state, TierState::kDegraded);
    ASSERT_EQ(m.down_parts.size(), 1u);
    EXPECT_EQ(m.down_parts[0].name, victim_->address());
    EXPECT_FALSE(m.down_parts[0].error.empty());
    EXPECT_EQ(degraded_names(m), std::vector<std::string>{"redis/" + victim_->address()});
  }

  ManualClock clock_;
  const HealthOptions health_{
      .probe_initial = 1s, .probe_max = 8s, .probe_timeout = 2s, .clock = &clock_};
  std::unique_ptr<HealthCheckedTier> checked_;
  RedisServerProcess* victim_ = nullptr;
  std::vector<uint64_t> on_victim_, elsewhere_;
};

TEST_F(RedisClusterHealthTest, H7_AKilledMasterTakesDownOnlyItsSlotsAndRecoversByProbes) {
  ClusterNodeRestorer restore(*victim_);
  victim_->kill();

  GetOutcome g = get_range(*checked_, 0, kKeys, kClusterTimeout);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, expect(ChunkStatus::kSkipped));  // the others' keys still served
  EXPECT_TRUE(g.ok_chunks_intact);
  EXPECT_EQ(checked_->state(), TierState::kDegraded);
  expect_victim_named();
  // Writes and lookups go on for the other masters; the victim's keys are skipped and counted.
  EXPECT_EQ(*put_range(*checked_, 0, kKeys, kClusterTimeout), expect(ChunkStatus::kSkipped));
  const std::vector<bool> held = *checked_->contains(keys(0, kKeys), kClusterTimeout);
  for (uint64_t id = 0; id < kKeys; ++id) {
    EXPECT_EQ(held[id], std::ranges::find(on_victim_, id) == on_victim_.end()) << id;
  }
  EXPECT_EQ(checked_->counters().skipped_keys, 2 * on_victim_.size());
  EXPECT_EQ(checked_->counters().errors, 0u);

  clock_.advance(1s);
  EXPECT_EQ(checked_->probe_if_due(), TierState::kDegraded);  // still dead: backoff doubles
  ASSERT_TRUE(victim_->restart(20s));
  ASSERT_TRUE(RedisClusterProcess::wait_serving(*victim_, 20s));
  clock_.advance(1s);
  EXPECT_EQ(checked_->probe_if_due(), TierState::kDegraded);  // next probe not due yet
  clock_.advance(1s);
  EXPECT_EQ(checked_->probe_if_due(), TierState::kUp);
  EXPECT_TRUE(checked_->metrics().down_parts.empty());
  // The restarted master lost its data (no persistence): misses there, then a fresh round trip.
  EXPECT_EQ(*get_range(*checked_, 0, kKeys, kClusterTimeout).statuses, expect(ChunkStatus::kMiss));
  ASSERT_EQ(*put_range(*checked_, 0, kKeys, kClusterTimeout), all(ChunkStatus::kOk, kKeys));
  g = get_range(*checked_, 0, kKeys, kClusterTimeout);
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, kKeys));
  EXPECT_TRUE(g.ok_chunks_intact);
}

TEST_F(RedisClusterHealthTest, H7_AHungMasterCostsOneTimeoutThenItsKeysFailFast) {
  ClusterNodeRestorer restore(*victim_);
  victim_->pause();  // accepts connections, never answers

  // The first call waits for the hung master until its timeout; the others answer meanwhile.
  GetOutcome g = get_range(*checked_, 0, kKeys, 1s);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, expect(ChunkStatus::kSkipped));
  EXPECT_TRUE(g.ok_chunks_intact);
  expect_victim_named();
  // Later calls skip it at once: one that waited on it would take its whole 20 s timeout.
  const auto t0 = std::chrono::steady_clock::now();
  g = get_range(*checked_, 0, kKeys, 20s);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, expect(ChunkStatus::kSkipped));
  EXPECT_LT(took, 10s);
  // Its probe falls due while it still hangs: a call does not probe it. The probe would wait
  // its 2 s timeout, past this call's 1 s deadline, and the other masters' keys would fail with
  // it (and the tier with them, every master then marked DOWN).
  clock_.advance(1s);
  g = get_range(*checked_, 0, kKeys, 1s);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, expect(ChunkStatus::kSkipped));
  EXPECT_TRUE(g.ok_chunks_intact);
  expect_victim_named();

  victim_->resume();
  ASSERT_TRUE(RedisClusterProcess::wait_serving(*victim_, 20s));
  clock_.advance(1s);
  EXPECT_EQ(checked_->probe_if_due(), TierState::kUp);
  g = get_range(*checked_, 0, kKeys, kClusterTimeout);  // it kept its data
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, kKeys));
  EXPECT_TRUE(g.ok_chunks_intact);
}

// A master past its maxmemory (Redis's default noeviction policy) answers every write with
// -OOM: that master's slots go down, not the tier (before, its keys were errors, and an error
// takes the whole tier down).
TEST_F(RedisClusterHealthTest, H7_AMasterOutOfMemoryTakesDownOnlyItsSlots) {
  ASSERT_TRUE(victim_->command({"CONFIG", "SET", "maxmemory", "1"}, kClusterTimeout));
  const Result<std::vector<ChunkStatus>> put = put_range(*checked_, 0, kKeys, kClusterTimeout);
  EXPECT_TRUE(victim_->command({"CONFIG", "SET", "maxmemory", "0"}, kClusterTimeout));
  ASSERT_TRUE(put) << put.error().to_string();
  EXPECT_EQ(*put, expect(ChunkStatus::kSkipped));
  EXPECT_EQ(checked_->state(), TierState::kDegraded);
  expect_victim_named();
  clock_.advance(1s);
  EXPECT_EQ(checked_->probe_if_due(), TierState::kUp);
  EXPECT_EQ(*put_range(*checked_, 0, kKeys, kClusterTimeout), all(ChunkStatus::kOk, kKeys));
}

TEST_F(RedisClusterHealthTest, H7_EveryMasterDownIsTheTierDown) {
  std::vector<std::unique_ptr<ClusterNodeRestorer>> restore;
  for (auto& node : cluster_->nodes()) {
    restore.push_back(std::make_unique<ClusterNodeRestorer>(*node));
    node->kill();
  }
  EXPECT_FALSE(get_range(*checked_, 0, kKeys, kClusterTimeout).statuses);
  EXPECT_EQ(checked_->state(), TierState::kDown);
  EXPECT_EQ(degraded_names(checked_->metrics()), std::vector<std::string>{"redis"});
  for (auto& node : cluster_->nodes()) ASSERT_TRUE(node->restart(20s));
  for (auto& node : cluster_->nodes()) {
    ASSERT_TRUE(RedisClusterProcess::wait_serving(*node, 20s));
  }
  clock_.advance(1s);
  EXPECT_EQ(checked_->probe_if_due(), TierState::kUp);  // the tier's probe probes every master
  EXPECT_EQ(*put_range(*checked_, 0, kKeys, kClusterTimeout), all(ChunkStatus::kOk, kKeys));
}

}  // namespace
}  // namespace kvtier
