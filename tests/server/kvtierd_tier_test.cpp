// kvtierd with lower tiers (tiers.disk_path, tiers.redis_url) against real processes: a real
// `kvtier server`, a real disk directory that outlives it, a real redis-server. Chunks leave
// the host pool for the tiers (write-behind), come back on a LOOKUP (read-through: pending,
// then hits), survive a server restart, are never served corrupt (F3), and a dead Redis makes
// kvtierd name it degraded while every request is still answered (H7).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kvtier/tier/chunk_record.h"
#include "kvtier/tier/disk_tier.h"
#include "kvtier/tier/redis_tier.h"
#include "kvtierd_process.h"
#include "redis_process.h"
#include "server_test_util.h"
#include "shared_kv_region.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

using server::CacheClient;

constexpr uint32_t kRegionBlocks = 64;
// Four host slots of the small layout's 3 KiB chunk: a fifth chunk evicts one.
const std::string kFourSlots = "cache.host_bytes=12288";

class KvtierdTierTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> extra) {
    settings_ = fast_server_settings();
    settings_.insert(settings_.end(), extra.begin(), extra.end());
    server_ = std::make_unique<KvtierdProcess>(unique_endpoint(), settings_);
  }
  // A new kvtierd process with the same settings (same disk directory), after a SIGKILL.
  void restart() {
    server_->kill_now();
    server_ = std::make_unique<KvtierdProcess>(unique_endpoint(), settings_);
  }
  std::unique_ptr<CacheClient> connect() {
    auto client =
        std::make_unique<CacheClient>(fast_client(server_->endpoint()), region_.registration());
    EXPECT_TRUE(client->wait_until_ok(5s)) << client->health().reason;
    return client;
  }
  static uint64_t stat(CacheClient& client, const std::string& name) {
    auto reply = client.stats().get();
    EXPECT_TRUE(reply) << reply.error().message;
    return reply ? reply->field(name, ~0ull) : ~0ull;
  }
  // Fills the blocks of `chunks` chunks from `first_block` and stores them under `keys`.
  void store(CacheClient& client, JobId job, const std::vector<ChunkKey>& keys,
             uint32_t first_block) {
    const uint32_t per = region_.blocks_per_chunk();
    for (uint32_t b = first_block; b < first_block + keys.size() * per; ++b) {
      region_.fill_block(b, 7000 + b);
    }
    TransferResult stored =
        client.store(job, 0, keys, consecutive_blocks(first_block, keys.size(), per)).get();
    ASSERT_EQ(stored.outcome, Outcome::kCompleted) << stored.error;
  }
  // Polls LOOKUP until it reports `hits` hits and nothing pending (the read-through's end).
  static bool lookup_settles_at(CacheClient& client, const std::vector<ChunkKey>& keys,
                                size_t hits) {
    return eventually([&] {
      auto found = client.lookup(keys).get();
      return found && found->hits == hits && !found->pending;
    });
  }
  // RETRIEVEs `keys` into blocks from `dst`; whether they equal the blocks from `src`.
  ::testing::AssertionResult retrieves_exactly(CacheClient& client, JobId job,
                                               const std::vector<ChunkKey>& keys, uint32_t src,
                                               uint32_t dst) {
    const uint32_t per = region_.blocks_per_chunk();
    TransferResult loaded =
        client.retrieve(job, 0, keys, consecutive_blocks(dst, keys.size(), per)).get();
    if (loaded.outcome != Outcome::kCompleted) {
      return ::testing::AssertionFailure() << "retrieve: " << loaded.error;
    }
    for (uint32_t b = 0; b < keys.size() * per; ++b) {
      if (region_.block_bytes(dst + b) != region_.block_bytes(src + b)) {
        return ::testing::AssertionFailure() << "block " << b << " differs";
      }
    }
    return ::testing::AssertionSuccess();
  }
  // F3 after keys[1] was corrupted below the host pool: its RETRIEVE fails, keys[0] comes back
  // exact, and no slot leaked (F12).
  void expect_only_the_intact_chunk_served(CacheClient& client, const std::vector<ChunkKey>& keys) {
    TransferResult corrupt =
        client.retrieve(2, 0, {keys[1]}, consecutive_blocks(40, 1, region_.blocks_per_chunk()))
            .get();
    EXPECT_EQ(corrupt.outcome, Outcome::kFailed);
    EXPECT_TRUE(retrieves_exactly(client, 3, {keys[0]}, 0, 44));
    expect_cache_sound(client);
  }

  // Every kvtierd fault test ends here: no slot leaked or left pending (F12).
  static void expect_cache_sound(CacheClient& client) {
    EXPECT_EQ(stat(client, "cache_audit_ok"), 1u);
    EXPECT_EQ(stat(client, "slots_pinned"), 0u);
    EXPECT_EQ(stat(client, "slots_pending"), 0u);
  }

  SharedKvRegion region_{kRegionBlocks};
  TempDir disk_;
  std::vector<std::string> settings_;
  std::unique_ptr<KvtierdProcess> server_;
};

TEST_F(KvtierdTierTest, EvictedChunksComeBackFromDiskAlsoAfterARestart) {
  start({kFourSlots, "tiers.disk_path=" + disk_.path().string(), "tiers.write_policy=on_evict"});
  auto client = connect();
  const auto a = test_keys(100, 3);
  const auto b = test_keys(200, 4);
  store(*client, 1, a, 0);
  store(*client, 2, b, 12);  // four more chunks: A leaves the host pool, down to the disk
  ASSERT_TRUE(eventually([&] { return stat(*client, "tier_chunks_demoted") >= 3; }));

  // Read-through: the first LOOKUP finds nothing in the host pool and says "pending" (the
  // prefetched keys are never hits before they are verified and published).
  auto first = client->lookup(a).get();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->hits, 0u);
  EXPECT_TRUE(first->pending);
  ASSERT_TRUE(lookup_settles_at(*client, a, 3));
  EXPECT_TRUE(retrieves_exactly(*client, 3, a, 0, 40));

  // A new kvtierd on the same directory finds the chunks again.
  client.reset();
  restart();
  client = connect();
  auto cold = client->lookup(a).get();
  ASSERT_TRUE(cold) << cold.error().message;
  EXPECT_EQ(cold->hits, 0u);
  EXPECT_TRUE(cold->pending);
  ASSERT_TRUE(lookup_settles_at(*client, a, 3));
  EXPECT_TRUE(retrieves_exactly(*client, 4, a, 0, 52));
  EXPECT_GE(stat(*client, "tier.disk.hits"), 3u);
  EXPECT_EQ(stat(*client, "tier.disk.skipped_calls"), 0u);  // every TierCounters field
  EXPECT_GE(stat(*client, "tier_prefetch_keys"), 3u);       // every TierMoverCounters field
  EXPECT_EQ(stat(*client, "tiers_degraded"), 0u);
  expect_cache_sound(*client);
}

TEST_F(KvtierdTierTest, F3_CorruptDiskChunkIsNeverServed) {
  start({"tiers.disk_path=" + disk_.path().string()});  // write_policy on_store
  auto client = connect();
  const auto keys = test_keys(300, 2);
  store(*client, 1, keys, 0);
  ASSERT_TRUE(eventually([&] { return stat(*client, "tier_chunks_demoted") >= 2; }));
  client.reset();
  server_->kill_now();

  // Flip a payload byte of the second chunk's record in its segment file.
  const std::optional<DiskTier::RecordLocation> victim =
      DiskTier::find_record(disk_.path(), keys[1]);
  ASSERT_TRUE(victim) << "no record of " << keys[1].hex();
  {
    std::fstream f(victim->segment, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(victim->offset + 4096 + 10);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x5a));
  }

  restart();
  client = connect();
  auto first = client->lookup(keys).get();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->hits, 0u);
  EXPECT_TRUE(first->pending);
  // The intact chunk is published; the corrupt one is freed unpublished and not asked for
  // again (the disk tier forgot its record).
  ASSERT_TRUE(lookup_settles_at(*client, keys, 1));
  EXPECT_EQ(stat(*client, "tier.disk.corrupt"), 1u);
  EXPECT_EQ(stat(*client, "tier_prefetch_failed"), 1u);
  expect_only_the_intact_chunk_served(*client, keys);
}

TEST_F(KvtierdTierTest, F3_CorruptRedisChunkIsNeverServedAndLookupsSettle) {
  TempDir redis_dir;
  auto redis = bench::RedisServerProcess::start({.directory = redis_dir.path()}, 10s);
  ASSERT_TRUE(redis) << redis.error().message;
  start({"tiers.redis_url=" + (*redis)->url()});
  auto client = connect();
  const auto keys = test_keys(350, 2);
  store(*client, 1, keys, 0);
  ASSERT_TRUE(eventually([&] { return stat(*client, "tier_chunks_demoted") >= 2; }));

  // Flip a payload byte of the second chunk in Redis (kvtierd's tier namespace is the fixed
  // one of make_server_tiers), then start a kvtierd with an empty host pool.
  const std::string redis_key =
      redis_key_prefix(KeyNamespace{.model = "kvtierd", .layout_fingerprint = 0}) + keys[1].hex();
  const std::string offset = std::to_string(kChunkRecordHeaderBytes + 10);
  ASSERT_TRUE((*redis)->command({"SETRANGE", redis_key, offset, "\x7f"}, 2s));
  client.reset();
  restart();
  client = connect();

  auto first = client->lookup(keys).get();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->pending);
  // Redis keeps the corrupt value (EXISTS says yes), yet lookups settle: the failed key is a
  // miss, not "pending" forever.
  ASSERT_TRUE(lookup_settles_at(*client, keys, 1));
  EXPECT_GE(stat(*client, "tier.redis.corrupt"), 1u);
  EXPECT_EQ(stat(*client, "tier_prefetch_failed"), 1u);
  expect_only_the_intact_chunk_served(*client, keys);
}

TEST_F(KvtierdTierTest, H7_DeadRedisIsNamedDegradedAndRequestsAreStillAnswered) {
  TempDir redis_dir;
  auto redis = bench::RedisServerProcess::start({.directory = redis_dir.path()}, 10s);
  ASSERT_TRUE(redis) << redis.error().message;
  start({"tiers.redis_url=" + (*redis)->url(), "tiers.redis_timeout_s=0.2",
         "tiers.probe_initial_s=0.05", "tiers.probe_max_s=0.2"});
  auto client = connect();
  const auto before = test_keys(400, 2);
  store(*client, 1, before, 0);
  ASSERT_TRUE(eventually([&] { return stat(*client, "tier_chunks_demoted") >= 2; }));
  EXPECT_EQ(stat(*client, "tiers"), 1u);
  EXPECT_EQ(stat(*client, "tier.redis.down"), 0u);
  EXPECT_TRUE(client->health().degraded_tiers.empty());

  (*redis)->kill();
  const auto during = test_keys(500, 2);
  store(*client, 2, during, 8);  // answered; its write-behind finds Redis gone
  ASSERT_TRUE(eventually([&] { return stat(*client, "tier.redis.down") == 1; }));
  EXPECT_EQ(stat(*client, "tiers_degraded"), 1u);
  ASSERT_TRUE(eventually(
      [&] { return client->health().degraded_tiers == std::vector<std::string>{"redis"}; }));
  EXPECT_EQ(client->health().state, server::ClientState::kOk);  // kvtierd itself is fine
  // Requests are answered meanwhile: host hits, a miss that skips the DOWN tier, a retrieve.
  auto hits = client->lookup(before).get();
  ASSERT_TRUE(hits) << hits.error().message;
  EXPECT_EQ(hits->hits, 2u);
  auto miss = client->lookup(test_keys(600, 1)).get();
  ASSERT_TRUE(miss) << miss.error().message;
  EXPECT_EQ(miss->hits, 0u);
  EXPECT_FALSE(miss->pending);
  EXPECT_TRUE(retrieves_exactly(*client, 3, during, 8, 40));

  ASSERT_TRUE((*redis)->restart(10s));
  ASSERT_TRUE(eventually([&] { return stat(*client, "tier.redis.down") == 0; }));
  ASSERT_TRUE(eventually([&] { return client->health().degraded_tiers.empty(); }));
  expect_cache_sound(*client);
}

TEST_F(KvtierdTierTest, H7_ADeadClusterMasterIsNamedAndTheOthersKeepServing) {
  TempDir cluster_dir;
  auto cluster = bench::RedisClusterProcess::start(cluster_dir.path(), 20s);
  if (!cluster) GTEST_SKIP() << "Redis Cluster did not start: " << cluster.error().message;
  start({"tiers.redis_url=" + (*cluster)->url(), "tiers.redis_timeout_s=0.5",
         "tiers.probe_initial_s=0.05", "tiers.probe_max_s=0.2"});
  auto client = connect();
  // The tier learns the cluster's slot map on its first write.
  store(*client, 1, test_keys(800, 2), 20);
  ASSERT_TRUE(eventually([&] { return stat(*client, "tier_chunks_demoted") >= 2; }));
  // The master that holds the first key kvtierd will write next (its namespace is fixed).
  const auto keys = test_keys(700, 2);
  const std::string name =
      redis_key_prefix({.model = "kvtierd", .layout_fingerprint = 0}) + keys[0].hex();
  bench::RedisServerProcess* victim = nullptr;
  for (auto& node : (*cluster)->nodes()) {
    if (node->command({"EXISTS", name}, 2s)) victim = node.get();  // the others answer MOVED
  }
  ASSERT_NE(victim, nullptr);
  victim->kill();

  store(*client, 2, keys, 0);  // its write-behind meets the dead master
  const std::string part = "redis/" + victim->address();
  ASSERT_TRUE(eventually([&] { return stat(*client, server::tier_down_field(part)) == 1; }));
  EXPECT_EQ(stat(*client, "tier.redis.down"), 0u);  // the tier serves the other masters
  EXPECT_EQ(stat(*client, "tiers_degraded"), 1u);
  EXPECT_GE(stat(*client, "tier.redis.skipped_keys"), 1u);
  ASSERT_TRUE(eventually(
      [&] { return client->health().degraded_tiers == std::vector<std::string>{part}; }));
  EXPECT_TRUE(retrieves_exactly(*client, 3, keys, 0, 40));  // requests are answered

  ASSERT_TRUE(victim->restart(20s));
  ASSERT_TRUE(bench::RedisClusterProcess::wait_serving(*victim, 20s));
  ASSERT_TRUE(
      eventually([&] { return stat(*client, server::tier_down_field(part)) != 1; }));  // gone
  ASSERT_TRUE(eventually([&] { return client->health().degraded_tiers.empty(); }));
  expect_cache_sound(*client);
}

}  // namespace
}  // namespace kvtier::testing
