// Tiers below the in-process host cache (`cache.mode: local`, the default, with tiers.disk_path
// or tiers.redis_url): the engine core's TierMover demotes the chunks its workers store and
// reads them back when the host pool no longer holds them (docs/tiers.md). Real engine-core and
// worker processes, a real disk tier and a real redis-server.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "engine/core_process_harness.h"
#include "engine/engine_runs.h"
#include "redis_process.h"
#include "support/child_namespace.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kHostChunks = 8;  // the host pool holds 8 chunks; A, B and C are 6 each

// A small device and a host pool too small for A, B and C (each 400 tokens: 6 chunks of 64
// tokens), so that A comes back from a tier or not at all.
Config tiered(uint32_t world_size) {
  Config c = small_device(true, world_size);
  const EngineShape shape = engine_shape(c);
  c.cache.host_bytes = kHostChunks * shape.layout.max_chunk_bytes() * shape.world_size;
  c.tiers.probe_initial_s = 0.1;
  c.tiers.probe_max_s = 0.2;
  return c;
}

std::vector<std::vector<TokenId>> first_round() {
  return {text(400, 1), text(400, 2), text(400, 3)};
}

std::vector<std::vector<TokenId>> second_round() {
  std::vector<std::vector<TokenId>> out = first_round();
  for (size_t i = 0; i < out.size(); ++i) {
    for (TokenId t : text(30, static_cast<char>(9 + i))) out[i].push_back(t);
  }
  return out;
}

uint64_t counter(const nlohmann::json& counters, const std::string& name) {
  return counters.value(name, uint64_t{0});
}

// Runs `prompts` (8 tokens each) on `h`, appending outputs and cached tokens to `run`.
void complete_all(CoreProcessHarness& h, const std::vector<std::vector<TokenId>>& prompts,
                  RunResult& run) {
  for (const auto& prompt : prompts) {
    const Completion c = h.complete(prompt, 8);
    EXPECT_EQ(c.error, "");
    run.outputs.push_back(c.tokens);
    run.cached.push_back(c.cached_tokens);
  }
}

// Waits until the tiers hold every chunk the first round stored (18, written behind).
bool wait_demoted(CoreProcessHarness& h, uint64_t chunks) {
  return h.wait_until(
      [&] { return counter(h.fresh_counters(), "kvtier_tier_chunks_demoted_total") >= chunks; },
      seconds(20));
}

// The first round, every chunk in the tiers, then the second round: A, B and C again.
RunResult tiered_run(
    const Config& config, const std::function<void()>& between = [] {}) {
  CoreProcessHarness h(config);
  RunResult run;
  if (!h.wait_ready()) {
    ADD_FAILURE() << h.failed().value_or("no hello");
    return run;
  }
  complete_all(h, first_round(), run);
  EXPECT_TRUE(wait_demoted(h, 18)) << h.counters().dump();
  between();
  complete_all(h, second_round(), run);
  run.counters = h.fresh_counters();
  return run;
}

RunResult reference_run() {
  std::vector<std::vector<TokenId>> prompts = first_round();
  for (const auto& p : second_round()) prompts.push_back(p);
  return run_prompts(small_device(false), prompts);
}

// Flips one bit in every written 4 KiB block of every segment file, through O_DIRECT (as the
// tier reads): every record's header or payload is damaged.
size_t corrupt_every_record(const std::filesystem::path& directory) {
  size_t flipped = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory)) {
    if (entry.path().extension() != ".kvs") continue;
    const int fd = ::open(entry.path().c_str(), O_RDWR | O_DIRECT);
    if (fd < 0) continue;
    constexpr size_t kBlock = 4096;
    void* raw = std::aligned_alloc(kBlock, kBlock);
    auto* page = static_cast<unsigned char*>(raw);
    for (off_t at = 0; ::pread(fd, page, kBlock, at) == static_cast<ssize_t>(kBlock);
         at += static_cast<off_t>(kBlock)) {
      if (std::all_of(page, page + kBlock, [](unsigned char b) { return b == 0; })) continue;
      page[kBlock / 2] ^= 0x10;
      if (::pwrite(fd, page, kBlock, at) == static_cast<ssize_t>(kBlock)) ++flipped;
    }
    std::free(raw);
    ::close(fd);
  }
  return flipped;
}

bool names_tier(const std::vector<std::string>& degraded, const std::string& tier) {
  return std::ranges::any_of(degraded, [&](const std::string& d) {
    return d.find("tiers down") != std::string::npos && d.find(tier) != std::string::npos;
  });
}

TEST(EngineCoreLocalTiers, ChunksEvictedFromTheHostPoolComeBackFromDiskWithTheSameOutput) {
  const RunResult off = reference_run();
  TempDir disk;
  Config config = tiered(2);  // two ranks: a chunk in the tier is both ranks' shares
  config.tiers.disk_path = disk.path().string();
  const RunResult on = tiered_run(config);
  EXPECT_EQ(on.outputs, off.outputs);
  ASSERT_EQ(on.cached.size(), 6u);
  for (size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(off.cached[i], 0u) << "the device no longer holds prompt " << i - 3;
    EXPECT_GE(on.cached[i], 384u) << "prompt " << i - 3 << "'s prefix comes back from disk";
  }
  EXPECT_GE(counter(on.counters, "kvtier_tier_prefetch_succeeded_total"), 12u) << on.counters;
  EXPECT_EQ(counter(on.counters, "kvtier_tier_prefetch_failed_total"), 0u);
  EXPECT_EQ(counter(on.counters, "kvtier_loads_failed_total"), 0u);
  EXPECT_GE(counter(on.counters, "kvtier_tier_disk_hits_total"), 12u) << on.counters;
  EXPECT_EQ(on.counters.value("kvtier_tier_disk_down", -1), 0);
}

TEST(EngineCoreLocalTiers, ChunksEvictedFromTheHostPoolComeBackFromRedisWithTheSameOutput) {
  const RunResult off = reference_run();
  TempDir dir;
  auto redis = bench::RedisServerProcess::start({.directory = dir.path() / "redis"}, seconds(10));
  ASSERT_TRUE(redis) << redis.error().message;
  Config config = tiered(1);
  config.tiers.redis_url = (*redis)->url();
  const RunResult on = tiered_run(config);
  EXPECT_EQ(on.outputs, off.outputs);
  ASSERT_EQ(on.cached.size(), 6u);
  for (size_t i = 3; i < 6; ++i) {
    EXPECT_GE(on.cached[i], 384u) << "prompt " << i - 3 << "'s prefix comes back from Redis";
  }
  EXPECT_GE(counter(on.counters, "kvtier_tier_redis_hits_total"), 12u) << on.counters;
  EXPECT_EQ(counter(on.counters, "kvtier_tier_prefetch_failed_total"), 0u);
}

TEST(EngineCoreLocalTiers, F3_CorruptSegmentRecordsAreNeverServed) {
  const RunResult off = reference_run();
  TempDir disk;
  Config config = tiered(1);
  config.tiers.disk_path = disk.path().string();
  const RunResult on =
      tiered_run(config, [&] { EXPECT_GE(corrupt_every_record(disk.path()), 18u); });
  EXPECT_EQ(on.outputs, off.outputs) << "corrupt KV was served";
  ASSERT_EQ(on.cached.size(), 6u);
  EXPECT_GE(counter(on.counters, "kvtier_tier_prefetch_failed_total"), 1u) << on.counters;
  EXPECT_EQ(counter(on.counters, "kvtier_tier_prefetch_succeeded_total"), 0u) << on.counters;
  EXPECT_GE(counter(on.counters, "kvtier_tier_disk_corrupt_total"), 1u) << on.counters;
  for (size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(on.cached[i], 0u) << "prompt " << i - 3 << " recomputes: nothing verified";
  }
}

TEST(EngineCoreLocalTiers, RestartedEngineFindsTheDiskTiersChunks) {
  const RunResult off = reference_run();
  TempDir disk;
  Config config = tiered(1);
  config.tiers.disk_path = disk.path().string();
  {
    CoreProcessHarness first(config);
    ASSERT_TRUE(first.wait_ready()) << first.failed().value_or("no hello");
    RunResult run;
    complete_all(first, first_round(), run);
    ASSERT_TRUE(wait_demoted(first, 18)) << first.counters().dump();
  }
  CoreProcessHarness second(config);
  ASSERT_TRUE(second.wait_ready()) << second.failed().value_or("no hello");
  RunResult run;
  complete_all(second, second_round(), run);
  ASSERT_EQ(run.cached.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(run.outputs[i], off.outputs[3 + i]) << i;
    EXPECT_GE(run.cached[i], 384u) << "prompt " << i << " comes from the disk tier written before";
  }
}

// H7 with a tier in the default mode: the engine stays healthy but names the tier DOWN,
// requests complete (recomputing), and the tier comes back by itself.
TEST(EngineCoreLocalTiersHealth, H7_DeletedSegmentFilesAreNamedDegradedAndTheTierRecovers) {
  const RunResult off = reference_run();
  TempDir disk;
  Config config = tiered(1);
  config.tiers.disk_path = disk.path().string();
  config.tiers.probe_initial_s = 0.5;  // DOWN for half a second: many heartbeats name it
  config.tiers.probe_max_s = 0.5;
  CoreProcessHarness h(config);
  ASSERT_TRUE(h.wait_ready()) << h.failed().value_or("no hello");
  RunResult run;
  complete_all(h, first_round(), run);
  ASSERT_TRUE(wait_demoted(h, 18)) << h.counters().dump();
  EXPECT_EQ(h.degraded_seen(), std::set<std::string>{});
  for (const auto& entry : std::filesystem::directory_iterator(disk.path())) {
    if (entry.path().extension() == ".kvs") std::filesystem::remove(entry.path());
  }
  // A's lookup asks the tier, which finds its segment gone: DOWN, and A recomputes.
  const Completion a = h.complete(second_round()[0], 8);
  EXPECT_EQ(a.error, "");
  EXPECT_EQ(a.tokens, off.outputs[3]);
  EXPECT_EQ(a.cached_tokens, 0u);
  // DOWN lasts until the first probe (probe_initial_s), which succeeds: the heartbeats of that
  // while name it, even if it ended before A's completion came back (a loaded machine).
  EXPECT_TRUE(h.wait_until(
      [&] {
        return names_tier({h.degraded_seen().begin(), h.degraded_seen().end()}, "disk");
      },
      seconds(5)))
      << "a heartbeat names the disk tier DOWN";
  EXPECT_EQ(h.counters_while_degraded().value("kvtier_tier_disk_down", 0), 1);
  ASSERT_TRUE(h.wait_until([&] { return h.degraded().empty(); }, seconds(10)))
      << "recovered by its probes";
  EXPECT_FALSE(h.failed().has_value());
  // Written again and served again.
  const uint64_t demoted = counter(h.fresh_counters(), "kvtier_tier_chunks_demoted_total");
  run = {};
  complete_all(h, {text(400, 4), text(400, 5), text(400, 6)}, run);
  EXPECT_TRUE(wait_demoted(h, demoted + 18));
  const Completion d = h.complete(text(400, 4), 8);
  EXPECT_GE(d.cached_tokens, 384u) << "the recovered tier serves again";
}

TEST(EngineCoreLocalTiersHealth, H7_AFullDiskIsNamedDegradedAndTheTierRecovers) {
  // A real full file system: a 4 MiB tmpfs in a child's own user and mount namespaces, where
  // the engine core and its workers run too. The disk tier's segments are 2 MiB (a quarter of
  // disk_bytes); a 3 MiB filler leaves no room for one.
  const RunResult off = reference_run();
  TempDir mount_point;
  const int status = run_with_small_tmpfs(mount_point.path(), "4m", [&] {
    const std::filesystem::path filler = mount_point.path() / "filler";
    {
      std::ofstream f(filler, std::ios::binary);
      const std::vector<char> bytes(3 << 20, 'x');
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      ASSERT_TRUE(f.flush());
    }
    Config config = tiered(1);
    config.tiers.disk_path = (mount_point.path() / "disk").string();
    config.tiers.disk_bytes = 8 << 20;
    CoreProcessHarness h(config);
    ASSERT_TRUE(h.wait_ready()) << h.failed().value_or("no hello");
    RunResult run;
    complete_all(h, first_round(), run);
    EXPECT_EQ(run.outputs, std::vector(off.outputs.begin(), off.outputs.begin() + 3));
    ASSERT_TRUE(h.wait_until([&] { return names_tier(h.degraded(), "disk"); }, seconds(5)))
        << "the heartbeat names the full disk tier DOWN: " << h.counters().dump();
    EXPECT_EQ(h.counters().value("kvtier_tier_disk_down", 0), 1);
    EXPECT_FALSE(h.failed().has_value());
    std::filesystem::remove(filler);
    ASSERT_TRUE(h.wait_until([&] { return h.degraded().empty(); }, seconds(10)))
        << "recovered by its probes once there is room";
    const uint64_t demoted = counter(h.fresh_counters(), "kvtier_tier_chunks_demoted_total");
    complete_all(h, {text(400, 4)}, run);
    EXPECT_TRUE(wait_demoted(h, demoted + 6)) << "written again: " << h.counters().dump();
  });
  if (status == kNoUserNamespaces) GTEST_SKIP() << "no user namespaces here to mount a tmpfs in";
  EXPECT_EQ(status, 0);
}

TEST(EngineCoreLocalTiersHealth, H7_KilledRedisIsNamedDegradedAndTheTierRecovers) {
  const RunResult off = reference_run();
  TempDir dir;
  auto redis = bench::RedisServerProcess::start({.directory = dir.path() / "redis"}, seconds(10));
  ASSERT_TRUE(redis) << redis.error().message;
  Config config = tiered(1);
  config.tiers.redis_url = (*redis)->url();
  CoreProcessHarness h(config);
  ASSERT_TRUE(h.wait_ready()) << h.failed().value_or("no hello");
  RunResult run;
  complete_all(h, first_round(), run);
  ASSERT_TRUE(wait_demoted(h, 18)) << h.counters().dump();
  (*redis)->kill();
  const Completion a = h.complete(second_round()[0], 8);
  EXPECT_EQ(a.error, "") << "a tier down makes requests recompute, not fail";
  EXPECT_EQ(a.tokens, off.outputs[3]);
  EXPECT_TRUE(h.wait_until([&] { return names_tier(h.degraded(), "redis"); }, seconds(5)))
      << "the heartbeat names the Redis tier DOWN";
  ASSERT_TRUE((*redis)->restart(seconds(10)));
  ASSERT_TRUE(h.wait_until([&] { return h.degraded().empty(); }, seconds(10)))
      << "recovered by its probes once Redis is back";
  EXPECT_FALSE(h.failed().has_value());
}

}  // namespace
}  // namespace kvtier::testing
