// `cache.mode: server`: the engine core and its workers use a real kvtierd (`kvtier server`)
// instead of the in-process host cache, through the connector's remote sides
// (ConnectorFactory: RemoteCacheIndex, RemoteWorkerConnector).
#include <gtest/gtest.h>

#include <memory>

#include "connector/kvtierd_for_connector.h"
#include "engine/core_process_harness.h"
#include "engine/engine_runs.h"
#include "server/curve_key_dir.h"

namespace kvtier::testing {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<KvtierdProcess> kvtierd_for(const Config& engine, const std::string& endpoint) {
  return start_kvtierd(engine_shape(engine).layout.groups.at(0), endpoint);
}

TEST(EngineCoreServerMode, SharedPrefixEvictedFromTheDeviceIsServedByKvtierdWithTheSameOutput) {
  const RunResult off = shared_prefix_run(small_device(false, 2));
  const Config config = server_mode(small_device(true, 2), unique_endpoint());
  const auto kvtierd = kvtierd_for(config, config.server.endpoint);
  const RunResult on = shared_prefix_run(config);
  EXPECT_EQ(on.outputs, off.outputs);
  ASSERT_EQ(on.cached.size(), 6u);
  EXPECT_EQ(off.cached[3], 0u) << "the device no longer holds A's prefix";
  EXPECT_GE(on.cached[3], 384u) << "A's prefix (24 blocks) comes back from kvtierd";
  EXPECT_GE(on.counters.value("kvtier_hit_tokens_total", 0), 384) << on.counters.dump();
  EXPECT_EQ(on.counters.value("kvtier_loads_failed_total", -1), 0) << on.counters.dump();
  EXPECT_FALSE(on.counters.contains("kvtier_host_slots_ready")) << "no in-process host cache";
}

// The same over CURVE: kvtierd admits the engine's key (its tenants file), and the engine's
// workers and core connect with the fields server.curve_server_key / server.curve_key_file,
// which `kvtier serve` passes to every process in its config file.
TEST(EngineCoreServerMode, OverCurveTheEnginesKeyIsAdmittedAndServedTheSamePrefix) {
  if (!server::curve_available()) GTEST_SKIP() << "libzmq without CURVE";
  CurveKeyDir keys;
  const server::CurveKeyPair server_keys = keys.make("server");
  const server::CurveKeyPair engine_keys = keys.make("engine");
  const auto tenants = keys.write(
      "tenants.yaml", "tenants:\n  engine: {keys: [\"" + engine_keys.public_key + "\"]}\n");
  const RunResult off = shared_prefix_run(small_device(false, 2));
  Config config = server_mode(small_device(true, 2), unique_endpoint());
  config.server.curve_server_key = server_keys.public_key;
  config.server.curve_key_file = keys.file("engine.key").string();
  const auto kvtierd =
      start_kvtierd(engine_shape(config).layout.groups.at(0), config.server.endpoint, false,
                    {"server.tenants_file=" + tenants.string(),
                     "server.curve_key_file=" + keys.file("server.key").string()});
  const RunResult on = shared_prefix_run(config);
  EXPECT_EQ(on.outputs, off.outputs);
  ASSERT_EQ(on.cached.size(), 6u);
  EXPECT_GE(on.cached[3], 384u) << "A's prefix (24 blocks) comes back from kvtierd";
  EXPECT_EQ(on.counters.value("kvtier_loads_failed_total", -1), 0) << on.counters.dump();
}

// Outputs and cached tokens of `prompts`, one after the other.
TEST(EngineCoreServerMode, LoadStartingInsideAChunkGoesThroughScratchWithTheSameOutput) {
  // A is stored, B and C evict it from the device, X brings back A's first 5 blocks (80
  // tokens: a chunk and a quarter) into the device prefix cache; then A's prompt again: the
  // device holds 80 tokens, so kvtierd's second chunk is needed from its second block on.
  const auto a = text(400, 1);
  std::vector<TokenId> x(a.begin(), a.begin() + 80);
  for (TokenId t : text(100, 5)) x.push_back(t);
  auto a2 = a;
  for (TokenId t : text(30, 9)) a2.push_back(t);
  const std::vector<std::vector<TokenId>> prompts = {a, text(400, 2), text(400, 3), x, a2};
  const RunResult off = run_prompts(small_device(false), prompts);
  const Config config = server_mode(small_device(true), unique_endpoint());
  const auto kvtierd = kvtierd_for(config, config.server.endpoint);
  const RunResult on = run_prompts(config, prompts);
  EXPECT_EQ(on.outputs, off.outputs);
  ASSERT_EQ(on.cached.size(), 5u);
  EXPECT_EQ(off.cached[4], 80u) << "the device holds A's first 5 blocks only";
  EXPECT_GE(on.cached[4], 384u) << "the rest of A's prefix comes from kvtierd";
  EXPECT_EQ(on.counters.value("kvtier_loads_failed_total", -1), 0) << on.counters.dump();
}

bool names_cache_server(const std::vector<std::string>& degraded, const std::string& endpoint) {
  for (const std::string& d : degraded) {
    if (d.find("cache server " + endpoint) != std::string::npos) return true;
  }
  return false;
}

TEST(EngineCoreServerModeHealth, H7_KvtierdDownIsNamedDegradedRequestsCompleteAndItRecovers) {
  const auto first = text(300, 4);
  auto second = first;
  for (TokenId t : text(40, 8)) second.push_back(t);
  const auto third = text(300, 6);
  std::vector<std::vector<TokenId>> expected;
  {
    CoreProcessHarness reference(small_engine(1));
    ASSERT_TRUE(reference.wait_ready());
    for (const auto& prompt : {first, second, third})
      expected.push_back(reference.complete(prompt, 6).tokens);
  }

  const Config config = server_mode(small_device(true, 1), unique_endpoint());
  const std::string& endpoint = config.server.endpoint;
  auto kvtierd = kvtierd_for(config, endpoint);
  CoreProcessHarness h(config);
  ASSERT_TRUE(h.wait_ready()) << h.failed().value_or("no hello");
  h.fresh_counters();
  EXPECT_EQ(h.degraded(), std::vector<std::string>{});

  const Completion a = h.complete(first, 6);
  EXPECT_EQ(a.error, "");
  EXPECT_EQ(a.tokens, expected[0]);
  // Idle: no transfer is outstanding when kvtierd goes (one would be Unprovable, F7).
  ASSERT_TRUE(
      h.wait_until([&] { return h.fresh_counters().value("kvtier_jobs_in_flight", 1) == 0; },
                   std::chrono::seconds(5)));
  const uint64_t stores_before = h.counters().value("kvtier_stores_completed_total", 0);
  EXPECT_GT(stores_before, 0u);

  kvtierd->kill_now();
  ASSERT_TRUE(
      h.wait_until([&] { return names_cache_server(h.degraded(), endpoint); }, milliseconds(2000)))
      << "the heartbeat names the cache server degraded";
  const Completion b = h.complete(second, 6);
  EXPECT_EQ(b.error, "") << "a degraded cache makes requests recompute, not fail";
  EXPECT_EQ(b.tokens, expected[1]);
  h.fresh_counters();
  EXPECT_TRUE(names_cache_server(h.degraded(), endpoint)) << "still down";
  EXPECT_FALSE(h.failed().has_value()) << *h.failed();

  kvtierd->start();
  ASSERT_TRUE(h.wait_until([&] { return h.degraded().empty(); }, std::chrono::seconds(10)))
      << "recovered once kvtierd is back";
  const Completion c = h.complete(third, 6);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.tokens, expected[2]);
  // The workers' clients register again on their own heartbeat: until then a store fails
  // without being sent. New prompts until one's stores reach the restarted kvtierd (bounded).
  bool stored = false;
  for (char seed = 10; seed < 30 && !stored; ++seed) {
    EXPECT_EQ(h.complete(text(128, seed), 1).error, "");
    h.wait_until([&] { return h.fresh_counters().value("kvtier_jobs_in_flight", 1) == 0; },
                 std::chrono::seconds(5));
    stored = h.counters().value("kvtier_stores_completed_total", uint64_t{0}) > stores_before;
  }
  EXPECT_TRUE(stored) << "stores reach the restarted kvtierd";
  EXPECT_FALSE(h.failed().has_value()) << *h.failed();
}

TEST(EngineCoreServerModeHealth, H7_HungKvtierdIsNamedDegradedWithoutStallingTheEngine) {
  const auto prompt = text(300, 7);
  std::vector<TokenId> expected;
  {
    CoreProcessHarness reference(small_engine(1));
    ASSERT_TRUE(reference.wait_ready());
    expected = reference.complete(prompt, 6).tokens;
  }
  const Config config = server_mode(small_device(true, 1), unique_endpoint());
  auto kvtierd = kvtierd_for(config, config.server.endpoint);
  CoreProcessHarness h(config);
  ASSERT_TRUE(h.wait_ready()) << h.failed().value_or("no hello");
  h.fresh_counters();
  ASSERT_EQ(h.degraded(), std::vector<std::string>{});

  kvtierd->pause();  // alive and connected, answers nothing
  h.reset_heartbeat_gap();
  const Completion c = h.complete(prompt, 6);  // its lookups get no answer
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.tokens, expected);
  EXPECT_TRUE(h.wait_until([&] { return names_cache_server(h.degraded(), config.server.endpoint); },
                           milliseconds(2000)));
  // The scheduler loop kept its heartbeats (0.05 s) going: a lookup waits at most one client
  // heartbeat interval (0.1 s), not server.request_timeout_s (5 s).
  EXPECT_LT(h.max_heartbeat_gap(), milliseconds(1000));
  kvtierd->resume();
  EXPECT_TRUE(h.wait_until([&] { return h.degraded().empty(); }, std::chrono::seconds(10)));
  EXPECT_FALSE(h.failed().has_value()) << *h.failed();
}

// A worker whose start_load waits for kvtierd (each RETRIEVE held 2 s, four stall timeouts) keeps
// heartbeating: a slow cache server holds the step but does not fail the engine as stalled.
TEST(EngineCoreServerModeHealth, H6_H7_WorkerWaitingForASlowKvtierdIsNotStalled) {
  const RunResult off = shared_prefix_run(small_device(false));
  Config config = server_mode(small_device(true), unique_endpoint());
  config.engine.stall_timeout_s = 0.5;
  config.faults.stall_server_loads = true;
  const auto kvtierd = start_kvtierd(engine_shape(config).layout.groups.at(0),
                                     config.server.endpoint, /*test_hooks=*/true);
  const RunResult on = shared_prefix_run(config);
  EXPECT_EQ(on.outputs, off.outputs);
  ASSERT_EQ(on.cached.size(), 6u);
  EXPECT_GE(on.cached[3], 384u) << "A's prefix comes back from kvtierd, 2 s late";
  EXPECT_EQ(on.counters.value("kvtier_loads_failed_total", -1), 0) << on.counters.dump();
}

}  // namespace
}  // namespace kvtier::testing
