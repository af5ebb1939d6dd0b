#include "kvtier/core/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <string>

namespace kvtier {
namespace {

namespace fs = std::filesystem;

// The message of `result`'s error, which must be kInvalidArgument; empty (and a failure) if
// `result` holds a value.
template <class T>
std::string ErrorOf(const Result<T>& result) {
  if (result) {
    ADD_FAILURE() << "expected an error";
    return "";
  }
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  return result.error().message;
}

// Adds a failure unless `message` contains every one of `parts`.
void ExpectMentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

// A file under the test's temporary directory, named after the running test.
fs::path WriteFile(std::string_view suffix, std::string_view text) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path path = fs::path(::testing::TempDir()) /
                  (std::string("kvtier_") + test->name() + std::string(suffix) + ".yaml");
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string ReadSourceFile(std::string_view relative) {
  std::ifstream in(fs::path(KVTIER_SOURCE_DIR) / relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Result<Config> FromEnv(std::string var, std::string value) {
  return load_config({.env = {{std::move(var), std::move(value)}}});
}

Result<Config> FromOverride(std::string override) {
  return load_config({.overrides = {std::move(override)}});
}

// Every field different from its default.
Config NonDefault() {
  Config c;
  c.transfer = {.transfer_deadline_s = 2.5,
                .completion_margin_s = 0.125,
                .max_batch_descriptors = 1 << 20,
                .coalesce = false,
                .query_fault_limit = 7};
  c.cache = {.host_bytes = 1'500'000'000, .eviction = "arc", .shm_name = "/kv tier \"x\" \\ null"};
  c.tiers = {.disk_path = "/var/cache/kv tier",
             .disk_bytes = 3'000'000'000,
             .disk_io_threads = 9,
             .disk_timeout_s = 0.75,
             .redis_url = "redis://10.0.0.7:7000",
             .redis_timeout_s = 0.25,
             .redis_pool_size = 2,
             .write_queue_chunks = 17,
             .write_policy = "on_evict",
             .probe_initial_s = 0.5,
             .probe_max_s = 4};
  c.layout = {.device_layout = DeviceLayout::kCrossLayer,
              .layers = 32,
              .kv_heads = 8,
              .head_dim = 128,
              .dtype_bytes = 1,
              .block_size = 32,
              .blocks_per_chunk = 8};
  return c;
}

TEST(Config, DefaultsAreTheDocumentedValues) {
  const Config c;
  EXPECT_EQ(c.transfer.transfer_deadline_s, 30.0);
  EXPECT_EQ(c.transfer.completion_margin_s, 10.0);
  EXPECT_EQ(c.transfer.max_batch_descriptors, 8192u);
  EXPECT_TRUE(c.transfer.coalesce);
  EXPECT_EQ(c.transfer.query_fault_limit, 3u);
  EXPECT_EQ(c.cache.host_bytes, uint64_t{1} << 30);
  EXPECT_EQ(c.cache.eviction, "lru");
  EXPECT_EQ(c.cache.shm_name, "");
  EXPECT_EQ(c.layout.device_layout, DeviceLayout::kPerLayer);
  EXPECT_EQ(c.layout, (LayoutConfig{.layers = 4,
                                    .kv_heads = 2,
                                    .head_dim = 64,
                                    .dtype_bytes = 2,
                                    .block_size = 16,
                                    .blocks_per_chunk = 16}));
  EXPECT_TRUE(c.validate());
  Result<Config> loaded = load_config({});
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(*loaded, c);
}

TEST(Config, KvLayoutIsTheLayoutSection) {
  const Config c = NonDefault();
  const KvLayout layout = c.kv_layout();
  EXPECT_EQ(layout.device_layout, DeviceLayout::kCrossLayer);
  ASSERT_EQ(layout.groups.size(), 1u);
  const KvGroup& g = layout.groups[0];
  EXPECT_EQ(g.layers, 32u);
  EXPECT_EQ(g.kv_heads, 8u);
  EXPECT_EQ(g.head_dim, 128u);
  EXPECT_EQ(g.dtype_bytes, 1u);
  EXPECT_EQ(g.block_size, 32u);
  EXPECT_EQ(g.blocks_per_chunk, 8u);
  EXPECT_TRUE(layout.validate());
  EXPECT_NE(layout.fingerprint(), Config{}.kv_layout().fingerprint());
}

TEST(Config, EmptyYamlGivesDefaults) {
  for (const char* text : {"", "# nothing\n", "transfer:\n", "cache: {}\n"}) {
    Result<Config> c = parse_config_yaml(text);
    ASSERT_TRUE(c) << text << ": " << c.error().message;
    EXPECT_EQ(*c, Config{}) << text;
  }
}

TEST(Config, YamlReadsEveryField) {
  Result<Config> c = parse_config_yaml(R"(
transfer:
  transfer_deadline_s: 2.5
  completion_margin_s: 0.125
  max_batch_descriptors: 1048576
  coalesce: false
  query_fault_limit: 7
cache:
  host_bytes: 1.5GB
  eviction: arc
  shm_name: '/kv tier "x" \ null'
tiers:
  disk_path: /var/cache/kv tier
  disk_bytes: 3GB
  disk_io_threads: 9
  disk_timeout_s: 0.75
  redis_url: redis://10.0.0.7:7000
  redis_timeout_s: 0.25
  redis_pool_size: 2
  write_queue_chunks: 17
  write_policy: on_evict
  probe_initial_s: 0.5
  probe_max_s: 4
layout:
  device_layout: cross_layer
  layers: 32
  kv_heads: 8
  head_dim: 128
  dtype_bytes: 1
  block_size: 32
  blocks_per_chunk: 8
)");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(*c, NonDefault());
}

TEST(Config, YamlRoundTrip) {
  for (const Config& c : {Config{}, NonDefault()}) {
    const std::string yaml = to_yaml(c);
    Result<Config> parsed = parse_config_yaml(yaml);
    ASSERT_TRUE(parsed) << parsed.error().message << "\n" << yaml;
    EXPECT_EQ(*parsed, c) << yaml;
  }
}

TEST(Config, PrecedenceIsDefaultsThenFileThenEnvThenCli) {
  const fs::path path = WriteFile("", R"(
transfer:
  transfer_deadline_s: 1
  completion_margin_s: 2
  max_batch_descriptors: 3
)");
  Result<Config> c = load_config({
      .yaml_path = path,
      .env = {{"KVTIER_TRANSFER_COMPLETION_MARGIN_S", "20"},
              {"KVTIER_TRANSFER_MAX_BATCH_DESCRIPTORS", "30"}},
      .overrides = {"transfer.max_batch_descriptors=300"},
  });
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->transfer.transfer_deadline_s, 1.0);     // file
  EXPECT_EQ(c->transfer.completion_margin_s, 20.0);    // env over file
  EXPECT_EQ(c->transfer.max_batch_descriptors, 300u);  // CLI over env and file
  EXPECT_EQ(c->transfer.query_fault_limit, 3u);        // default
}

TEST(Config, LastOverrideOfAFieldWins) {
  Result<Config> c = load_config(
      {.overrides = {"cache.eviction=arc", "cache.host_bytes=1MiB", "cache.eviction=lru"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cache.eviction, "lru");
  EXPECT_EQ(c->cache.host_bytes, uint64_t{1} << 20);
}

TEST(Config, OverrideValueMayContainEqualsAndBeEmpty) {
  Result<Config> c = load_config({.overrides = {"cache.shm_name=a=b"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cache.shm_name, "a=b");
  c = load_config({.env = {{"KVTIER_CACHE_SHM_NAME", "x"}}, .overrides = {"cache.shm_name="}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cache.shm_name, "");
}

// F8: a deadline that is not a finite number > 0 never fires (nan, inf) or fires at once (0,
// negative). It is rejected from every source, and the message names the field and the source.
TEST(Config, WithOverridesAppliesInOrderAndValidates) {
  Result<Config> c =
      with_overrides(Config{}, {"cache.mode=server", "layout.layers=3", "layout.layers=5"});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cache.mode, CacheMode::kServer);
  EXPECT_EQ(c->layout.layers, 5u);
  EXPECT_NE(ErrorOf(with_overrides(Config{}, {"layout.layers=0"})).find("layout.layers"),
            std::string::npos);
  EXPECT_NE(ErrorOf(with_overrides(Config{}, {"cache.no_such=1"})).find("cache.no_such"),
            std::string::npos);
  // A config that fails validation is an error even without overrides.
  Config bad;
  bad.transfer.transfer_deadline_s = 0;
  EXPECT_NE(ErrorOf(with_overrides(bad, {})).find("transfer_deadline_s"), std::string::npos);
}

TEST(Config, ConfigValueReadsBackWhatAnOverrideSets) {
  Result<Config> c = with_overrides(Config{}, {"cache.mode=server", "layout.head_dim=32"});
  ASSERT_TRUE(c);
  EXPECT_EQ(config_value(*c, "cache.mode").value_or(""), "server");
  EXPECT_EQ(config_value(*c, "layout.head_dim").value_or(""), "32");
  EXPECT_NE(ErrorOf(config_value(*c, "layout.nope")).find("layout.nope"), std::string::npos);
}

TEST(ConfigContract, F8_NonfiniteOrNonpositiveDeadlineIsRejected) {
  struct Deadline {
    std::string name;
    std::string env_var;
    double TransferConfig::*member;
  };
  const Deadline deadlines[] = {
      {"transfer_deadline_s", "KVTIER_TRANSFER_TRANSFER_DEADLINE_S",
       &TransferConfig::transfer_deadline_s},
      {"completion_margin_s", "KVTIER_TRANSFER_COMPLETION_MARGIN_S",
       &TransferConfig::completion_margin_s},
  };
  for (const Deadline& d : deadlines) {
    const std::string rule =
        "transfer." + d.name + ": must be a finite number of at least 0.000001";
    // 1e-10 s would truncate to a deadline of 0 ns, which passes at once.
    for (const std::string bad : {"nan", "inf", "-inf", "0", "-0", "-1", "-0.5", "1e-10"}) {
      SCOPED_TRACE(d.name + " = " + bad);
      const std::string yaml = "\ntransfer:\n  " + d.name + ": " + bad + "\n";
      ExpectMentions(ErrorOf(parse_config_yaml(yaml)), {rule, "<yaml>:3"});
      const fs::path path = WriteFile("", yaml);
      ExpectMentions(ErrorOf(load_config({.yaml_path = path})), {rule, path.string() + ":3"});
      ExpectMentions(ErrorOf(FromEnv(d.env_var, bad)), {rule, d.env_var});
      ExpectMentions(ErrorOf(FromOverride("transfer." + d.name + "=" + bad)), {rule, "--set"});
    }
    ExpectMentions(ErrorOf(FromOverride("transfer." + d.name + "=nan")), {"got nan"});
    ExpectMentions(ErrorOf(FromOverride("transfer." + d.name + "=-inf")), {"got -inf"});

    // A configuration built in code is held to the same rule.
    for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), 0.0, -1.0}) {
      Config c;
      c.transfer.*d.member = bad;
      Status status = c.validate();
      ASSERT_FALSE(status) << d.name << " = " << bad;
      ExpectMentions(status.error().message, {rule});
    }

    // Small positive values are accepted.
    Result<Config> c = FromOverride("transfer." + d.name + "=0.001");
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(c->transfer.*d.member, 0.001);
  }
}

// A deadline far in the future must not wrap: a clock's nanoseconds hold about 292 years, and
// a value past them overflowed to a deadline in the past (every transfer Unprovable at once).
TEST(ConfigContract, F8_DeadlineOverAYearIsRejected) {
  for (const std::string field : {"transfer_deadline_s", "completion_margin_s"}) {
    for (const std::string huge : {"31536001", "1e12", "1e300"}) {
      SCOPED_TRACE(field + " = " + huge);
      ExpectMentions(ErrorOf(FromOverride("transfer." + field + "=" + huge)),
                     {"transfer." + field + ": must be at most one year (31536000 s)", "--set"});
    }
    Result<Config> year = FromOverride("transfer." + field + "=31536000");
    ASSERT_TRUE(year) << year.error().message;
  }
  // Every other duration is held to it too (here one that may be 0).
  ExpectMentions(ErrorOf(FromOverride("faults.slow_forward_s=1e12")), {"at most one year"});
}

TEST(Config, UnknownFieldOrSectionIsAnError) {
  ExpectMentions(ErrorOf(parse_config_yaml("cache:\n  host_byte: 4GiB\n")),
                 {"unknown field 'cache.host_byte'", "<yaml>:2", "host_bytes, eviction, shm_name"});
  ExpectMentions(ErrorOf(parse_config_yaml("cach:\n  host_bytes: 4GiB\n")),
                 {"unknown section 'cach'", "<yaml>:1",
                  "transfer, cache, connector, tiers, layout, model, engine, faults"});
  ExpectMentions(ErrorOf(FromOverride("cache.host_byte=4GiB")),
                 {"unknown field 'cache.host_byte'", "--set", "host_bytes"});
  ExpectMentions(ErrorOf(FromOverride("cach.host_bytes=4GiB")),
                 {"unknown field 'cach.host_bytes'",
                  "transfer, cache, connector, tiers, layout, model, engine, faults"});
  ExpectMentions(ErrorOf(FromOverride("host_bytes=4GiB")), {"unknown section 'host_bytes'"});
  ExpectMentions(ErrorOf(FromEnv("KVTIER_CACHE_HOST_BYTE", "4GiB")),
                 {"unknown environment variable KVTIER_CACHE_HOST_BYTE"});
}

TEST(Config, EnvironmentOutsideKvtierIsIgnored) {
  Result<Config> c = load_config({.env = {{"PATH", "/bin"}, {"kvtier_cache_host_bytes", "x"}}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(*c, Config{});
}

TEST(Config, EveryFieldHasAnEnvironmentVariable) {
  Result<Config> c = load_config({.env = {
                                      {"KVTIER_TRANSFER_TRANSFER_DEADLINE_S", "2.5"},
                                      {"KVTIER_TRANSFER_COMPLETION_MARGIN_S", "0.125"},
                                      {"KVTIER_TRANSFER_MAX_BATCH_DESCRIPTORS", "1048576"},
                                      {"KVTIER_TRANSFER_COALESCE", "false"},
                                      {"KVTIER_TRANSFER_QUERY_FAULT_LIMIT", "7"},
                                      {"KVTIER_CACHE_HOST_BYTES", "1500000000"},
                                      {"KVTIER_CACHE_EVICTION", "arc"},
                                      {"KVTIER_CACHE_SHM_NAME", NonDefault().cache.shm_name},
                                      {"KVTIER_TIERS_DISK_PATH", "/var/cache/kv tier"},
                                      {"KVTIER_TIERS_DISK_BYTES", "3GB"},
                                      {"KVTIER_TIERS_DISK_IO_THREADS", "9"},
                                      {"KVTIER_TIERS_DISK_TIMEOUT_S", "0.75"},
                                      {"KVTIER_TIERS_REDIS_URL", "redis://10.0.0.7:7000"},
                                      {"KVTIER_TIERS_REDIS_TIMEOUT_S", "0.25"},
                                      {"KVTIER_TIERS_REDIS_POOL_SIZE", "2"},
                                      {"KVTIER_TIERS_WRITE_QUEUE_CHUNKS", "17"},
                                      {"KVTIER_TIERS_WRITE_POLICY", "on_evict"},
                                      {"KVTIER_TIERS_PROBE_INITIAL_S", "0.5"},
                                      {"KVTIER_TIERS_PROBE_MAX_S", "4"},
                                      {"KVTIER_LAYOUT_DEVICE_LAYOUT", "cross_layer"},
                                      {"KVTIER_LAYOUT_LAYERS", "32"},
                                      {"KVTIER_LAYOUT_KV_HEADS", "8"},
                                      {"KVTIER_LAYOUT_HEAD_DIM", "128"},
                                      {"KVTIER_LAYOUT_DTYPE_BYTES", "1"},
                                      {"KVTIER_LAYOUT_BLOCK_SIZE", "32"},
                                      {"KVTIER_LAYOUT_BLOCKS_PER_CHUNK", "8"},
                                  }});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(*c, NonDefault());
}

TEST(Config, WrongTypeIsAnError) {
  ExpectMentions(ErrorOf(parse_config_yaml("transfer:\n  transfer_deadline_s: soon\n")),
                 {"transfer.transfer_deadline_s: must be a number of seconds, got 'soon'"});
  ExpectMentions(ErrorOf(parse_config_yaml("transfer:\n  transfer_deadline_s: 30s\n")),
                 {"transfer.transfer_deadline_s", "'30s'"});
  ExpectMentions(ErrorOf(parse_config_yaml("transfer:\n  coalesce: yes\n")),
                 {"transfer.coalesce: must be true or false, got 'yes'"});
  ExpectMentions(ErrorOf(parse_config_yaml("transfer:\n  max_batch_descriptors: [1, 2]\n")),
                 {"transfer.max_batch_descriptors: expected a value, got a sequence", "<yaml>:2"});
  ExpectMentions(ErrorOf(parse_config_yaml("transfer:\n  query_fault_limit: {a: 1}\n")),
                 {"transfer.query_fault_limit: expected a value, got a mapping"});
  ExpectMentions(ErrorOf(parse_config_yaml("cache:\n  shm_name:\n")),
                 {"cache.shm_name: expected a value, got nothing"});
  ExpectMentions(ErrorOf(parse_config_yaml("transfer: 30\n")),
                 {"transfer: expected a mapping of fields, got a scalar"});
  ExpectMentions(ErrorOf(parse_config_yaml("- transfer\n")),
                 {"expected a mapping of sections, got a sequence"});
  ExpectMentions(
      ErrorOf(FromEnv("KVTIER_LAYOUT_LAYERS", "four")),
      {"layout.layers: must be an integer in [1, 4294967295], got 'four'", "KVTIER_LAYOUT_LAYERS"});
}

TEST(Config, SizesAreExactBytes) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"1", 1},
      {"4096", 4096},
      {"512B", 512},
      {"1KB", 1000},
      {"1KiB", 1024},
      {"1.5KiB", 1536},
      {"512MiB", uint64_t{512} << 20},
      {"4GiB", uint64_t{4} << 30},
      {"4 GiB", uint64_t{4} << 30},
      {"1.5GB", 1'500'000'000},
      {"1.1GB", 1'100'000'000},
      {"0.5GiB", uint64_t{1} << 29},
      {"2TB", 2'000'000'000'000},
      {"1TiB", uint64_t{1} << 40},
      {"18446744073709551615", std::numeric_limits<uint64_t>::max()},
  };
  for (const auto& [text, bytes] : cases) {
    Result<Config> c = FromOverride(std::string("cache.host_bytes=") + text);
    ASSERT_TRUE(c) << text << ": " << c.error().message;
    EXPECT_EQ(c->cache.host_bytes, bytes) << text;
  }
  Result<Config> c = parse_config_yaml("cache:\n  host_bytes: \"4GiB\"\n");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cache.host_bytes, uint64_t{4} << 30);
}

TEST(Config, BadSizeIsAnError) {
  for (const char* bad : {"", "GiB", "4gib", "4G", "4 GiBs", "4GiB ", " 4GiB", "-1GiB", "-1",
                          "4.GiB.", "1..5GB", "0x10", "1e9", "four"}) {
    ExpectMentions(ErrorOf(FromOverride(std::string("cache.host_bytes=") + bad)),
                   {"cache.host_bytes: must be a number of bytes", std::string("'") + bad + "'"});
  }
  ExpectMentions(ErrorOf(FromOverride("cache.host_bytes=0")),
                 {"cache.host_bytes: must be > 0 bytes, got 0"});
  ExpectMentions(ErrorOf(FromOverride("cache.host_bytes=0GiB")), {"must be > 0 bytes"});
  for (const char* fraction : {"0.1KiB", "1.5B", "0.5", "1.0000000001KB"}) {
    ExpectMentions(ErrorOf(FromOverride(std::string("cache.host_bytes=") + fraction)),
                   {"cache.host_bytes: must be a whole number of bytes"});
  }
}

TEST(Config, IntegersNeverWrapOrTruncate) {
  const std::string range = "must be an integer in [1, 1048576]";
  for (const char* bad : {"3.5", "-1", "0", "1048577", "4294967296", "18446744073709551617", "1e3",
                          "+5", " 5", "5 ", "0x10"}) {
    ExpectMentions(ErrorOf(FromOverride(std::string("transfer.max_batch_descriptors=") + bad)),
                   {"transfer.max_batch_descriptors: " + range});
  }
  ExpectMentions(ErrorOf(parse_config_yaml("layout:\n  layers: 4294967296\n")),
                 {"layout.layers: must be an integer in [1, 4294967295], got '4294967296'"});
  ExpectMentions(ErrorOf(FromEnv("KVTIER_TRANSFER_QUERY_FAULT_LIMIT", "-1")),
                 {"transfer.query_fault_limit", "got '-1'"});
  for (const char* bad : {"18446744073709551616", "16777216TiB", "18446744073709551616B",
                          "99999999999999999999999GB"}) {
    ExpectMentions(ErrorOf(FromOverride(std::string("cache.host_bytes=") + bad)),
                   {"cache.host_bytes: must be at most 2^64-1 bytes"});
  }
  Result<Config> c = FromOverride("transfer.max_batch_descriptors=1048576");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->transfer.max_batch_descriptors, 1u << 20);
}

TEST(Config, EnumerationsAreChecked) {
  ExpectMentions(ErrorOf(FromOverride("cache.eviction=LRU")),
                 {"cache.eviction: must be one of lru | arc, got 'LRU'"});
  ExpectMentions(ErrorOf(FromOverride("layout.device_layout=per-layer")),
                 {"layout.device_layout: must be one of per_layer | cross_layer, got 'per-layer'"});
}

TEST(Config, LayoutFieldsMustBePositive) {
  for (const char* field :
       {"layers", "kv_heads", "head_dim", "dtype_bytes", "block_size", "blocks_per_chunk"}) {
    ExpectMentions(ErrorOf(FromOverride(std::string("layout.") + field + "=0")),
                   {std::string("layout.") + field + ": must be an integer in [1, "});
  }
}

TEST(Config, TiersAreOffByDefault) {
  const Config c;
  EXPECT_TRUE(c.tiers.disk_path.empty());
  EXPECT_TRUE(c.tiers.redis_url.empty());
  EXPECT_EQ(c.tiers.write_policy, "on_store");
  ExpectMentions(ErrorOf(FromOverride("tiers.write_policy=always")),
                 {"tiers.write_policy", "'always'"});
  ExpectMentions(ErrorOf(FromOverride("tiers.redis_timeout_s=0")), {"tiers.redis_timeout_s"});
}

TEST(Config, ProbeMaxIsAtLeastProbeInitial) {
  Result<Config> c = load_config({.overrides = {"tiers.probe_initial_s=5", "tiers.probe_max_s=2"}});
  ASSERT_FALSE(c);
  ExpectMentions(c.error().message, {"tiers.probe_max_s", "tiers.probe_initial_s"});
  EXPECT_TRUE(load_config({.overrides = {"tiers.probe_initial_s=5", "tiers.probe_max_s=5"}}));
}

TEST(Config, ValidateChecksConfigsBuiltInCode) {
  EXPECT_TRUE(NonDefault().validate());
  Config c;
  c.transfer.max_batch_descriptors = 0;
  ExpectMentions(c.validate().error().message, {"transfer.max_batch_descriptors"});
  c = Config{};
  c.cache.eviction = "fifo";
  ExpectMentions(c.validate().error().message, {"cache.eviction", "'fifo'"});
  c = Config{};
  c.cache.host_bytes = 0;
  ExpectMentions(c.validate().error().message, {"cache.host_bytes"});
  c = Config{};
  c.layout.head_dim = 0;
  ExpectMentions(c.validate().error().message, {"layout.head_dim"});
}

TEST(Config, BadValueIsAnErrorEvenIfALaterSourceOverridesIt) {
  const fs::path path = WriteFile("", "cache:\n  eviction: fifo\n");
  ExpectMentions(ErrorOf(load_config({.yaml_path = path, .overrides = {"cache.eviction=lru"}})),
                 {"cache.eviction", path.string() + ":2"});
}

TEST(Config, UnreadableFileNamesThePath) {
  const fs::path missing = fs::path(::testing::TempDir()) / "kvtier_no_such_config.yaml";
  ExpectMentions(ErrorOf(load_config({.yaml_path = missing})),
                 {"cannot read config file '" + missing.string() + "'", "No such file"});
  const fs::path dir = fs::path(::testing::TempDir());
  ExpectMentions(ErrorOf(load_config({.yaml_path = dir})),
                 {"cannot read config file '" + dir.string() + "'", "directory"});
}

TEST(Config, InvalidYamlNamesThePathAndLine) {
  const fs::path path = WriteFile("", "transfer:\n  coalesce: true\n  max_batch_descriptors: [1\n");
  ExpectMentions(ErrorOf(load_config({.yaml_path = path})), {"invalid YAML", path.string() + ":"});
  const fs::path indent = WriteFile("_indent", "transfer:\n  a: 1\n b: 2\n");
  ExpectMentions(ErrorOf(load_config({.yaml_path = indent})),
                 {"invalid YAML", indent.string() + ":3"});
}

TEST(Config, ValueErrorInFileNamesThePathAndLine) {
  const fs::path path =
      WriteFile("", "# kvtier\ntransfer:\n  coalesce: true\n  query_fault_limit: 0\n");
  ExpectMentions(ErrorOf(load_config({.yaml_path = path})),
                 {"transfer.query_fault_limit: must be an integer in [1, 4294967295], got 0",
                  "(" + path.string() + ":4)"});
}

TEST(Config, FieldOrSectionGivenTwiceIsAnError) {
  ExpectMentions(ErrorOf(parse_config_yaml("cache:\n  eviction: arc\n  eviction: lru\n")),
                 {"cache.eviction: set twice", "<yaml>:3"});
  ExpectMentions(ErrorOf(parse_config_yaml("cache: {}\ntransfer: {}\ncache: {}\n")),
                 {"section 'cache' appears twice", "<yaml>:3"});
}

TEST(Config, SecondYamlDocumentIsAnError) {
  ExpectMentions(ErrorOf(parse_config_yaml("transfer: {}\n---\ncache:\n  host_bytes: 1\n")),
                 {"expected one YAML document, got 2"});
}

// Parses `text` with at most 1 GiB of memory and 10 s, prints the error and exits 0 if it is one.
// Under ASan or TSan, whose shadow memory takes terabytes of address space, only the time bound.
[[noreturn]] void ParseBoundedAndExit(const char* text) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  const rlimit memory{uint64_t{1} << 30, uint64_t{1} << 30};
  setrlimit(RLIMIT_AS, &memory);
#endif
  alarm(10);
  Result<Config> parsed = parse_config_yaml(text);
  std::fprintf(stderr, "%s\n", parsed ? "loaded" : parsed.error().message.c_str());
  std::exit(parsed ? 1 : 0);
}

TEST(Config, YamlTheParserCannotReadPastIsAnErrorNotAHang) {
  // yaml-cpp 0.7's LoadAll() loops forever on these, allocating until memory runs out. Each parse
  // runs in a child with bounded memory and time, so that a regression fails and stops.
  for (const char* text : {",", ",a", "\n,\n", "transfer: {}\n---\n,"}) {
    EXPECT_EXIT(ParseBoundedAndExit(text), testing::ExitedWithCode(0), "invalid YAML") << text;
  }
}

TEST(Config, MalformedOverrideIsAnError) {
  ExpectMentions(ErrorOf(FromOverride("transfer.coalesce")),
                 {"--set 'transfer.coalesce': expected section.field=value"});
}

TEST(Config, DescribeListsEveryFieldOnceWithItsDefault) {
  const std::vector<ConfigFieldInfo> fields = describe();
  ASSERT_GE(fields.size(), 15u);
  std::set<std::string> keys;
  std::set<std::string> vars;
  std::vector<std::string> defaults;
  for (const ConfigFieldInfo& f : fields) {
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    EXPECT_TRUE(vars.insert(f.env_var).second) << f.env_var;
    EXPECT_FALSE(f.doc.empty()) << f.key;
    EXPECT_FALSE(f.values.empty()) << f.key;
    defaults.push_back(f.key + "=" + f.default_value);
  }
  EXPECT_EQ(fields[0].key, "transfer.transfer_deadline_s");
  EXPECT_EQ(fields[0].env_var, "KVTIER_TRANSFER_TRANSFER_DEADLINE_S");
  EXPECT_EQ(fields[0].default_value, "30");
  EXPECT_EQ(fields[5].key, "cache.host_bytes");
  EXPECT_EQ(fields[5].default_value, "1GiB");

  // Setting every field to its listed default gives the defaults.
  Result<Config> c = load_config({.overrides = defaults});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(*c, Config{});
}

TEST(Config, KvtierEnvironmentCapturesOnlyKvtierVariables) {
  ASSERT_EQ(setenv("KVTIER_CACHE_EVICTION", "arc", 1), 0);
  ASSERT_EQ(setenv("NOT_KVTIER_CACHE_EVICTION", "lru", 1), 0);
  const std::map<std::string, std::string> env = kvtier_environment();
  unsetenv("KVTIER_CACHE_EVICTION");
  unsetenv("NOT_KVTIER_CACHE_EVICTION");
  ASSERT_TRUE(env.contains("KVTIER_CACHE_EVICTION"));
  EXPECT_EQ(env.at("KVTIER_CACHE_EVICTION"), "arc");
  for (const auto& [var, value] : env) EXPECT_TRUE(var.starts_with("KVTIER_")) << var;
  Result<Config> c = load_config({.env = env});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cache.eviction, "arc");
}

TEST(Config, ExampleFileIsTheDefaults) {
  const fs::path path = fs::path(KVTIER_SOURCE_DIR) / "config" / "kvtier.yaml";
  Result<Config> c = load_config({.yaml_path = path});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(*c, Config{});
  const std::string text = ReadSourceFile("config/kvtier.yaml");
  for (const ConfigFieldInfo& f : describe()) {
    const std::string name = f.key.substr(f.key.find('.') + 1);
    EXPECT_NE(text.find("\n  " + name + ": "), std::string::npos) << f.key << " not in the example";
  }
}

TEST(Config, DocsListEveryField) {
  const std::string docs = ReadSourceFile("docs/config.md");
  ASSERT_FALSE(docs.empty());
  for (const ConfigFieldInfo& f : describe()) {
    EXPECT_NE(docs.find(f.key), std::string::npos) << f.key;
    EXPECT_NE(docs.find(f.env_var), std::string::npos) << f.env_var;
  }
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

TEST(Config, ServerClientTimeoutBelowThreeHeartbeatsIsAnError) {
  Result<Config> c =
      load_config({.overrides = {"server.heartbeat_interval_s=1", "server.client_timeout_s=2"}});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("server.client_timeout_s"), std::string::npos)
      << c.error().message;
  EXPECT_TRUE(
      load_config({.overrides = {"server.heartbeat_interval_s=1", "server.client_timeout_s=3"}}));
}

// H6: a stall timeout shorter than two heartbeats reports loops that beat on time as stalled.
TEST(Config, H6_EngineStallTimeoutBelowTwoHeartbeatsIsAnError) {
  Result<Config> c =
      load_config({.overrides = {"engine.heartbeat_interval_s=10", "engine.stall_timeout_s=5"}});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("engine.stall_timeout_s"), std::string::npos)
      << c.error().message;
  EXPECT_TRUE(
      load_config({.overrides = {"engine.heartbeat_interval_s=0.5", "engine.stall_timeout_s=1"}}));
}

}  // namespace
}  // namespace kvtier
