// RedisTier against a real three-master Redis Cluster on loopback ports, started by the test.
#include <gtest/gtest.h>

#include "kvtier/tier/redis_tier.h"
#include "redis/redis_key_slot.h"
#include "redis_process.h"
#include "redis_test_util.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using namespace tier_test;
using bench::RedisClusterProcess;
using bench::RedisServerProcess;

constexpr Duration kTimeout = 2s;

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
    for (auto& node : cluster_->nodes()) ASSERT_TRUE(node->command({"FLUSHALL"}, kTimeout));
    auto tier =
        RedisTier::open({.url = cluster_->url(),
                         .key_prefix = redis_key_prefix({.model = "m", .layout_fingerprint = 1})});
    ASSERT_TRUE(tier);
    tier_ = std::move(*tier);
  }

  // The node that owns `redis_key`'s slot: the one that does not answer MOVED.
  RedisServerProcess& owner_of(const std::string& redis_key) {
    for (auto& node : cluster_->nodes()) {
      if (node->command({"EXISTS", redis_key}, kTimeout)) return *node;
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
    return node.command({"CLUSTER", "MYID"}, kTimeout).value();
  }
  // Slot `slot` starts moving from `from` to `to` (IMPORTING on `to`, MIGRATING on `from`).
  static void start_migration(const std::string& slot, RedisServerProcess& from,
                              RedisServerProcess& to) {
    ASSERT_TRUE(to.command({"CLUSTER", "SETSLOT", slot, "IMPORTING", id_of(from)}, kTimeout));
    ASSERT_TRUE(from.command({"CLUSTER", "SETSLOT", slot, "MIGRATING", id_of(to)}, kTimeout));
  }
  // Every node assigns `slot` to `to`.
  void finish_migration(const std::string& slot, RedisServerProcess& to) {
    for (auto& node : cluster_->nodes()) {
      ASSERT_TRUE(node->command({"CLUSTER", "SETSLOT", slot, "NODE", id_of(to)}, kTimeout));
    }
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline RedisClusterProcess* cluster_ = nullptr;
  static inline std::string* skip_reason_ = nullptr;
  std::unique_ptr<RedisTier> tier_;
};

TEST_F(RedisClusterTest, RoundTripSpreadsOverEveryMaster) {
  ASSERT_EQ(put_range(*tier_, 0, 96, kTimeout).value(), all(ChunkStatus::kOk, 96));
  EXPECT_TRUE(tier_->cluster_mode());
  GetOutcome g = get_range(*tier_, 0, 96, kTimeout);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, 96));
  EXPECT_TRUE(g.ok_chunks_intact);
  EXPECT_EQ(*tier_->contains(keys(95, 2), kTimeout), (std::vector<bool>{true, false}));
  int total = 0;
  for (auto& node : cluster_->nodes()) {
    const int n = std::stoi(node->command({"DBSIZE"}, kTimeout).value());
    EXPECT_GT(n, 0) << node->address() << " holds nothing: keys were not routed by slot";
    total += n;
  }
  EXPECT_EQ(total, 96);
  EXPECT_TRUE(tier_->ping(kTimeout));
}

TEST_F(RedisClusterTest, FollowsMovedAfterASlotChangesOwner) {
  ASSERT_TRUE(put_range(*tier_, 0, 1, kTimeout));  // the tier now has the slot map
  const std::string name = tier_->redis_key(key(0));
  const std::string slot = std::to_string(redis_key_slot(name));
  RedisServerProcess& from = owner_of(name);
  RedisServerProcess& to = other_than(from);
  // The cluster specification's slot migration, by hand.
  start_migration(slot, from, to);
  ASSERT_TRUE(from.command(
      {"MIGRATE", "127.0.0.1", std::to_string(to.port()), "", "0", "5000", "KEYS", name},
      kTimeout));
  finish_migration(slot, to);
  // The tier still routes the slot to `from`, which answers MOVED.
  GetOutcome g = get_range(*tier_, 0, 1, kTimeout);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, 1));
  EXPECT_TRUE(g.ok_chunks_intact);
}

TEST_F(RedisClusterTest, FollowsAskWhileASlotMigrates) {
  ASSERT_TRUE(tier_->ping(kTimeout));  // the tier has the slot map
  const std::string name = tier_->redis_key(key(5));
  const std::string slot = std::to_string(redis_key_slot(name));
  RedisServerProcess& from = owner_of(name);
  RedisServerProcess& to = other_than(from);
  start_migration(slot, from, to);
  // An absent key of a migrating slot: `from` answers ASK, the write lands on `to`.
  ASSERT_EQ(put_range(*tier_, 5, 1, kTimeout).value(), all(ChunkStatus::kOk, 1));
  EXPECT_EQ(to.command({"CLUSTER", "COUNTKEYSINSLOT", slot}, kTimeout).value(), "1");
  GetOutcome g = get_range(*tier_, 5, 1, kTimeout);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, 1));
  EXPECT_TRUE(g.ok_chunks_intact);
  finish_migration(slot, to);  // so later tests see a clean map
}

}  // namespace
}  // namespace kvtier
