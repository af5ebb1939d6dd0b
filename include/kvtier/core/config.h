// Config: kvtier's configuration, read from a YAML file, the environment and command-line
// overrides, every field validated.
//
// Sources, lowest precedence first:
//   1. defaults     the member initializers below (`Config{}` is the default configuration)
//   2. YAML file    `section:` mappings of `field: value`
//   3. environment  KVTIER_<SECTION>_<FIELD>, e.g. KVTIER_TRANSFER_TRANSFER_DEADLINE_S=20
//   4. overrides    "section.field=value" (the CLI's --set), applied in order
// A value is checked when it is read, so a bad value is an error even if a later source
// overrides it. Unknown sections, fields and KVTIER_* variables are errors (they are typos).
//
// Every field is declared once, in the field table in src/core/config_fields.cpp: its name, its
// doc, the values it accepts and its rule; its default is its member initializer here. That table
// drives parsing, overrides, validate(), to_yaml() and describe(); docs/config.md lists it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/kv_layout.h"
#include "kvtier/core/status.h"

namespace kvtier {

struct TransferConfig {
  double transfer_deadline_s = 30.0;  // F8
  double completion_margin_s = 10.0;  // F8
  uint32_t max_batch_descriptors = 8192;
  bool coalesce = true;
  uint32_t query_fault_limit = 3;  // F7

  bool operator==(const TransferConfig&) const = default;
};

// cache.mode: where offloaded chunks live. The text is the value's name ("local", "server").
enum class CacheMode {
  kLocal,   // "local": an in-process host pool
  kServer,  // "server": kvtierd, the cache server at server.endpoint
};
std::string_view to_string(CacheMode mode);
// kInvalidArgument listing the names for any other text.
Result<CacheMode> parse_cache_mode(std::string_view name);

struct CacheConfig {
  uint64_t host_bytes = uint64_t{1} << 30;
  std::string eviction = "lru";  // a name make_eviction_policy() accepts: "lru" | "arc"
  std::string shm_name;          // empty: anonymous memory
  CacheMode mode = CacheMode::kLocal;

  bool operator==(const CacheConfig&) const = default;
};

// connector.transfer_granularity: how a worker moves a request's KV. The text is the value's name.
enum class TransferGranularity {
  kLayer,    // "layer": a load is issued whole and completes layer by layer; the engine waits
             // for a layer's load before that layer's attention and saves a layer once written
  kRequest,  // "request": a request's KV moves whole; a loading request is computed only after
             // its load's verdict
};
std::string_view to_string(TransferGranularity granularity);
// kInvalidArgument listing the names for any other text.
Result<TransferGranularity> parse_transfer_granularity(std::string_view name);

// What the connector stores (its scheduler side) and how its workers move KV.
struct ConnectorConfig {
  bool enabled = true;  // offload KV to the host cache at all
  bool store_decode = false;
  uint32_t store_threshold = 1;
  uint32_t admission_window = 64;
  uint32_t max_store_chunks_in_flight = 64;
  TransferGranularity transfer_granularity = TransferGranularity::kLayer;
  bool load_in_step = true;  // compute a loading request in its load's step

  bool operator==(const ConnectorConfig&) const = default;
};

// The tiny test/demo transformer `kvtier serve` runs (engine/model_config.h checks the shape).
struct ModelSection {
  uint32_t layers = 4;
  uint32_t q_heads = 2;
  uint32_t kv_heads = 2;
  uint32_t head_dim = 16;
  uint32_t hidden = 64;
  uint32_t mlp_dim = 128;
  uint32_t max_context = 16384;
  uint32_t sliding_window = 0;
  uint32_t seed = 1;

  bool operator==(const ModelSection&) const = default;
};

// `kvtier serve`: processes, scheduling and health.
struct EngineConfig {
  std::string host = "127.0.0.1";
  uint32_t port = 8000;                   // 0: any free port (printed at start)
  uint32_t max_requests_in_flight = 256;  // HTTP completions at once; more get 429
  std::string model_name = "kvtier-tiny";
  uint32_t engine_cores = 1;
  uint32_t world_size = 1;
  uint32_t device_blocks = 2048;  // per rank and KV-cache group
  uint32_t max_batched_tokens = 2048;
  uint32_t max_running_requests = 64;
  uint32_t max_tokens = 64;  // default completion length
  double heartbeat_interval_s = 0.1;
  double stall_timeout_s = 5.0;      // H6
  double progress_timeout_s = 30.0;  // H8
  double request_timeout_s = 600.0;  // a request's whole life, from its arrival

  bool operator==(const EngineConfig&) const = default;
};

// faults.direction: which copies draw injected faults ("both", "load", "store").
enum class FaultDirection {
  kBoth,
  kLoad,   // host to device
  kStore,  // device to host
};
std::string_view to_string(FaultDirection direction);
// kInvalidArgument listing the names for any other text.
Result<FaultDirection> parse_fault_direction(std::string_view name);

// Device faults the engine's workers inject into their own copies (tests and demos).
struct FaultsConfig {
  uint32_t seed = 1;
  double submit_failure_rate = 0;
  double latched_error_rate = 0;
  double delay_rate = 0;
  double record_failure_rate = 0;  // Unprovable: the engine fail-stops (F7, H4)
  double hang_rate = 0;            // copies that never complete: Unprovable at their deadline (F8)
  FaultDirection direction = FaultDirection::kBoth;
  // Test hook (H8): the scheduler stops computing a request once it has produced a token.
  bool stall_scheduler = false;
  // Test hook (H6): every forward pass of the engine's workers takes at least this long.
  double slow_forward_s = 0;
  // Test hook (H6, H7): cache.mode server, kvtierd run with test hooks: kvtierd takes 2 s over
  // every RETRIEVE of the engine's workers.
  bool stall_server_loads = false;

  bool operator==(const FaultsConfig&) const = default;
};

// Tiers below the host pool (docs/tiers.md). Each is off until its location is set.
struct TiersConfig {
  std::string disk_path;  // empty: no disk tier
  uint64_t disk_bytes = uint64_t{10} << 30;
  uint32_t disk_io_threads = 4;
  double disk_timeout_s = 5.0;
  std::string redis_url;  // empty: no Redis tier
  double redis_timeout_s = 0.5;
  uint32_t redis_pool_size = 4;
  uint32_t write_queue_chunks = 256;
  std::string write_policy = "on_store";  // "on_store" | "on_evict"
  double probe_initial_s = 1.0;           // H7
  double probe_max_s = 30.0;              // H7

  bool operator==(const TiersConfig&) const = default;
};

// kvtierd (the cache server) and its clients.
struct ServerConfig {
  std::string endpoint =
      "ipc:///tmp/kvtierd.sock";      // a ZeroMQ endpoint: tcp://host:port, ipc://path
  double heartbeat_interval_s = 1.0;  // client PING period; a dead server is seen within two
  double client_timeout_s = 10.0;     // server: a client silent this long is gone (>= 3 heartbeats)
  double request_timeout_s = 5.0;     // client: deadline of a non-transfer request
  double connect_timeout_s = 5.0;     // client: longest wait for a registration reply
  uint32_t max_requests_in_flight = 64;  // per client
  uint32_t copy_threads = 0;  // server: threads copying one transfer's bytes; 0: cores / 2, 1 to 4
  uint32_t max_locks = 4096;  // read-locked keys per client
  double lock_ttl_s = 10.0;   // longest life of a LOOKUP read lock
  uint64_t max_frame_bytes = uint64_t{1} << 20;
  uint32_t metrics_port = 0;               // HTTP /metrics and /health; 0: none
  std::string metrics_host = "127.0.0.1";  // address the metrics port listens on
  // Access control (docs/operations.md): CURVE on the server with a tenants file, or none.
  std::string curve_key_file;    // this process's CURVE key pair (kvtier keygen)
  std::string curve_server_key;  // client: kvtierd's public key (Z85); set: connect with CURVE
  std::string tenants_file;      // server: admitted public keys, tenants, quotas; set: CURVE
  bool insecure = false;         // server: allow tcp:// without CURVE
  std::string ipc_group;         // server: group that may use an ipc:// socket (else owner only)
  uint32_t max_pins = 1024;      // server: pinned keys per tenant (default of the tenants file)
  uint32_t max_sessions = 1024;  // server: registered clients per tenant (default of the file)
  double max_pin_ttl_s = 86400;  // server: longest PIN ttl

  bool operator==(const ServerConfig&) const = default;
};

// KV events (docs/events.md): what a cache publishes about its contents, for routers.
struct EventsConfig {
  std::string endpoint;         // ZeroMQ PUB endpoint bound; empty: no events
  std::string replay_endpoint;  // ZeroMQ ROUTER endpoint bound for replay; empty: none
  uint32_t buffer_batches = 1024;

  bool operator==(const EventsConfig&) const = default;
};

// How the frontend of `kvtier serve` picks an engine core for a request.
struct RoutingConfig {
  std::string policy = "cache";  // cache (longest cached prefix, weighed by load) | load

  bool operator==(const RoutingConfig&) const = default;
};

// What every kvtier process logs (kvtierd and each process of `kvtier serve`), see log.h.
struct LogConfig {
  std::string level = "info";   // trace, debug, info, warning, error, off
  std::string format = "text";  // text, or json (one object per line)

  bool operator==(const LogConfig&) const = default;
};

// The single KV-cache group the foundation uses.
struct LayoutConfig {
  DeviceLayout device_layout = DeviceLayout::kPerLayer;
  uint32_t layers = 4;
  uint32_t kv_heads = 2;
  uint32_t head_dim = 64;
  uint32_t dtype_bytes = 2;
  uint32_t block_size = 16;
  uint32_t blocks_per_chunk = 16;

  bool operator==(const LayoutConfig&) const = default;
};

struct Config {
  TransferConfig transfer;
  CacheConfig cache;
  ConnectorConfig connector;
  TiersConfig tiers;
  LayoutConfig layout;
  ModelSection model;
  EngineConfig engine;
  FaultsConfig faults;
  ServerConfig server;
  EventsConfig events;
  RoutingConfig routing;
  LogConfig log;

  // Every field within its rule and the layout valid; for configurations built in code (a
  // loaded one has passed already). The message names the field.
  Status validate() const;
  // The layout section as a one-group KvLayout.
  KvLayout kv_layout() const;

  bool operator==(const Config&) const = default;
};

struct ConfigSources {
  std::optional<std::filesystem::path> yaml_path;
  // Only KVTIER_* names are read, and each must name a field; others are ignored, so the
  // whole environment may be passed.
  std::map<std::string, std::string> env;
  // "section.field=value", applied in order: the last one for a field wins.
  std::vector<std::string> overrides;
};

// This process's KVTIER_* environment variables, for ConfigSources::env. Reads `environ`: not
// safe while another thread calls setenv().
std::map<std::string, std::string> kvtier_environment();

// Defaults, then each source in order of precedence. Every error is kInvalidArgument and its
// message names the field (or the unknown name) and the source: "path:line", the environment
// variable, or "--set".
Result<Config> load_config(const ConfigSources& sources);

// Defaults overlaid with one YAML document; errors are located as "<yaml>:line".
Result<Config> parse_config_yaml(std::string_view text);

// `config` with "section.field=value" overrides applied in order (as --set), then validated.
Result<Config> with_overrides(Config config, const std::vector<std::string>& overrides);

// One field's value as text that its override reads back ("cache.mode" -> "local");
// kInvalidArgument for an unknown key.
Result<std::string> config_value(const Config& config, std::string_view key);

// A YAML document of every field, each after its doc as a comment, that parse_config_yaml()
// reads back as `config`. to_yaml(Config{}) is the example file config/kvtier.yaml.
std::string to_yaml(const Config& config);

// One field, as --help and docs/config.md show it.
struct ConfigFieldInfo {
  std::string key;            // "section.field", as in --set
  std::string env_var;        // KVTIER_SECTION_FIELD
  std::string values;         // what it accepts, e.g. "integer in [1, 1048576]"
  std::string default_value;  // as text that the field accepts
  std::string doc;
};

// Every field, in table order (sections in order, fields in order within each).
std::vector<ConfigFieldInfo> describe();

}  // namespace kvtier
