#include "config_fields.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "config_value.h"

namespace kvtier::config_internal {
namespace {

// Makes the rows of one section: binds a member of S (inside Config) to its value type.
template <class S>
struct Section {
  std::string_view name;
  S Config::*member;

  template <class T>
  Field field(std::string_view field_name, T S::*field_member, const ConfigValue<T>& value,
              std::string_view doc) const {
    const auto ref = [ section_member = member, field_member ](auto& config) -> auto& {
      return config.*section_member.*field_member;
    };
    return Field{
        .section = std::string(name),
        .name = std::string(field_name),
        .doc = std::string(doc),
        .values = value.values,
        .set = [=](Config& config, std::string_view text) -> Status {
          Result<T> parsed = value.parse(text);
          if (!parsed) return std::unexpected(parsed.error());
          if (Status ok = value.check(*parsed); !ok) return ok;
          ref(config) = std::move(*parsed);
          return {};
        },
        .check = [=](const Config& config) { return value.check(ref(config)); },
        .get = [=](const Config& config) { return value.format(ref(config)); },
    };
  }
};

}  // namespace

std::string Field::env_var() const {
  std::string var = "KVTIER_" + section + "_" + name;
  for (char& c : var) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return var;
}

// A new section is a member of Config and a Section here; a new field is a member of its
// section struct (its initializer is the default) and a row here.
const std::vector<Field>& config_fields() {
  static const std::vector<Field> table = [] {
    constexpr Section<TransferConfig> transfer{"transfer", &Config::transfer};
    constexpr Section<CacheConfig> cache{"cache", &Config::cache};
    constexpr Section<ConnectorConfig> connector{"connector", &Config::connector};
    constexpr Section<TiersConfig> tiers{"tiers", &Config::tiers};
    constexpr Section<LayoutConfig> layout{"layout", &Config::layout};
    constexpr Section<ModelSection> model{"model", &Config::model};
    constexpr Section<EngineConfig> engine{"engine", &Config::engine};
    constexpr Section<FaultsConfig> faults{"faults", &Config::faults};
    constexpr Section<ServerConfig> server{"server", &Config::server};
    constexpr Section<EventsConfig> events{"events", &Config::events};
    constexpr Section<RoutingConfig> routing{"routing", &Config::routing};
    constexpr Section<LogConfig> log{"log", &Config::log};
    constexpr uint32_t kMaxU32 = std::numeric_limits<uint32_t>::max();
    return std::vector<Field>{
        transfer.field("transfer_deadline_s", &TransferConfig::transfer_deadline_s,
                       positive_seconds(),
                       "Deadline of every transfer, counted from its submission (server queue time "
                       "included) and checked while completions are polled. A timeout never "
                       "authorizes reuse of a buffer. (F8)"),
        transfer.field("completion_margin_s", &TransferConfig::completion_margin_s,
                       positive_seconds(),
                       "Time the scheduler allows past transfer_deadline_s before it declares "
                       "the job Unprovable. (F8)"),
        transfer.field("max_batch_descriptors", &TransferConfig::max_batch_descriptors,
                       integer_in(1, 1 << 20),
                       "Most copy descriptors in one batch submission; a larger transfer is "
                       "split into several batches."),
        transfer.field("coalesce", &TransferConfig::coalesce, boolean(),
                       "Merge the copies of consecutive blocks that are contiguous on both sides "
                       "into one descriptor."),
        transfer.field("query_fault_limit", &TransferConfig::query_fault_limit,
                       integer_in(1, kMaxU32),
                       "Consecutive faulted queries of a transfer's completion event after which "
                       "the transfer is Unprovable. (F7)"),
        cache.field("host_bytes", &CacheConfig::host_bytes, byte_size(),
                    "Size of the L1 host pool."),
        cache.field("eviction", &CacheConfig::eviction, one_of({"lru", "arc"}),
                    "Order in which ready chunks leave the host pool: least recently used, or "
                    "adaptive replacement (ARC)."),
        cache.field("shm_name", &CacheConfig::shm_name, text(),
                    "Name of the POSIX shared-memory object that backs the host pool; empty for "
                    "anonymous memory."),
        cache.field("mode", &CacheConfig::mode, cache_mode(),
                    "Where the worker keeps offloaded chunks: an in-process host pool (local), or "
                    "a kvtierd cache server at server.endpoint (server)."),
        connector.field("enabled", &ConnectorConfig::enabled, boolean(),
                        "Offload KV to the host cache and load it back; false serves without "
                        "kvtier (every prefix beyond the device cache is recomputed)."),
        connector.field("store_decode", &ConnectorConfig::store_decode, boolean(),
                        "Store chunks of generated tokens too, not only chunks of the prompt."),
        connector.field("store_threshold", &ConnectorConfig::store_threshold,
                        integer_in(1, kMaxU32),
                        "Lookups (by any request) that must have asked for a chunk before it is "
                        "stored; 1 stores every chunk a request computes."),
        connector.field("admission_window", &ConnectorConfig::admission_window,
                        integer_in(0, 1 << 20),
                        "Adaptive admission: once this many requests in a row began with no "
                        "prefix an earlier request had asked for (nothing is reused), a chunk is "
                        "stored only once at least 2 lookups asked for it, until a request reuses "
                        "a prefix again. 0 turns it off: store_threshold alone decides."),
        connector.field("max_store_chunks_in_flight", &ConnectorConfig::max_store_chunks_in_flight,
                        integer_in(1, kMaxU32),
                        "Chunks of store jobs in flight (issued, not yet finished by every "
                        "rank) above which the store direction is behind: a step's new stores "
                        "are then put off to a later step (counted as stores_deferred), never "
                        "waited for. A deferred chunk whose request ends first is not stored."),
        connector.field("transfer_granularity", &ConnectorConfig::transfer_granularity,
                        transfer_granularity(),
                        "How a worker of the in-process cache moves KV: layer by layer (a "
                        "request's loads complete layer by layer and the engine computes it in "
                        "the same step, waiting for each layer's load before that layer's "
                        "attention; a layer's stores start once the layer is written), or whole "
                        "requests (the forward pass waits for the whole load, see load_in_step). "
                        "cache.mode server always moves whole requests."),
        connector.field("load_in_step", &ConnectorConfig::load_in_step, boolean(),
                        "Compute a loading request in the step its load starts: the worker orders "
                        "the step's loads before the forward pass reads them (layer by layer, or "
                        "the whole load; kvtierd's worker waits for its RETRIEVEs, each by its "
                        "deadline). false: a loading request is computed in a step after its "
                        "load's verdict, so a load that hangs holds only its own request."),
        tiers.field("disk_path", &TiersConfig::disk_path, text(),
                    "Directory of the L2 disk tier; empty for no disk tier. Chunks found there "
                    "are used again after a restart. With several engine cores, each has its own "
                    "subdirectory core-<i> and an equal share of disk_bytes."),
        tiers.field("disk_bytes", &TiersConfig::disk_bytes, byte_size(),
                    "Most bytes of the disk tier's segment files; least recently used chunks "
                    "are evicted to stay within it."),
        tiers.field("disk_io_threads", &TiersConfig::disk_io_threads, integer_in(1, 256),
                    "Disk tier calls that run at once, each on its own io_uring ring (or thread, "
                    "where io_uring is unavailable) with up to 16 IOs in flight."),
        tiers.field("disk_timeout_s", &TiersConfig::disk_timeout_s, positive_seconds(),
                    "Timeout of each disk tier call; a call past it marks the tier down. (H7)"),
        tiers.field("redis_url", &TiersConfig::redis_url, text(),
                    "redis://host[:port] of the L3 Redis tier (one server, or any node of a "
                    "Redis Cluster); empty for no Redis tier."),
        tiers.field("redis_timeout_s", &TiersConfig::redis_timeout_s, positive_seconds(),
                    "Timeout of each Redis call (connect, pooled-connection wait, every socket "
                    "read and write); a call past it marks the tier down. (H7)"),
        tiers.field("redis_pool_size", &TiersConfig::redis_pool_size, integer_in(1, 1024),
                    "Connections per Redis node, at most."),
        tiers.field("write_queue_chunks", &TiersConfig::write_queue_chunks, integer_in(1, 1 << 20),
                    "Chunks waiting to be written to the tiers, at most. When the queue is full "
                    "a write is dropped and counted; the engine never waits for a tier. Their "
                    "copies live in staging buffers of this many chunks plus 16 (the batch being "
                    "written), reserved at start and faulted in as used: memory grows to the most "
                    "chunks ever queued and is kept for reuse."),
        tiers.field("write_policy", &TiersConfig::write_policy, one_of({"on_store", "on_evict"}),
                    "Which chunks go down to the tiers: every chunk stored in the host pool, or "
                    "only chunks evicted from it."),
        tiers.field("probe_initial_s", &TiersConfig::probe_initial_s, positive_seconds(),
                    "Wait before the first probe of a tier that went down; each failed probe "
                    "doubles it. (H7)"),
        tiers.field("probe_max_s", &TiersConfig::probe_max_s, positive_seconds(),
                    "Longest wait between probes of a tier that is down; at least "
                    "probe_initial_s. (H7)"),
        layout.field("device_layout", &LayoutConfig::device_layout, device_layout(),
                     "Shape of the KV tensors on the device: one tensor per layer, or one tensor "
                     "whose blocks hold every layer."),
        layout.field("layers", &LayoutConfig::layers, integer_in(1, kMaxU32),
                     "Layers of the KV-cache group."),
        layout.field("kv_heads", &LayoutConfig::kv_heads, integer_in(1, kMaxU32),
                     "KV heads this rank holds."),
        layout.field("head_dim", &LayoutConfig::head_dim, integer_in(1, kMaxU32),
                     "Elements per head."),
        layout.field("dtype_bytes", &LayoutConfig::dtype_bytes, integer_in(1, kMaxU32),
                     "Bytes per element."),
        layout.field("block_size", &LayoutConfig::block_size, integer_in(1, kMaxU32),
                     "Tokens per block, the engine's paged KV unit."),
        layout.field("blocks_per_chunk", &LayoutConfig::blocks_per_chunk, integer_in(1, kMaxU32),
                     "Blocks per chunk, the offload unit."),
        model.field("layers", &ModelSection::layers, integer_in(1, 64), "Transformer layers."),
        model.field("q_heads", &ModelSection::q_heads, integer_in(1, 64),
                    "Query heads; a multiple of kv_heads."),
        model.field("kv_heads", &ModelSection::kv_heads, integer_in(1, 64),
                    "KV heads, split over the tensor-parallel ranks (world_size must divide it)."),
        model.field("head_dim", &ModelSection::head_dim, integer_in(2, 256),
                    "Elements per head; even."),
        model.field("hidden", &ModelSection::hidden, integer_in(1, 4096),
                    "Width of the residual stream."),
        model.field("mlp_dim", &ModelSection::mlp_dim, integer_in(1, 16384),
                    "Width of the MLP (world_size must divide it)."),
        model.field("max_context", &ModelSection::max_context, integer_in(1, 1 << 20),
                    "Most tokens (prompt + output) of one request."),
        model.field("sliding_window", &ModelSection::sliding_window, integer_in(0, 1 << 20),
                    "0: every layer attends to the whole prefix. W > 0: odd layers attend to the "
                    "last W positions and form a second KV-cache group (a hybrid model)."),
        model.field("seed", &ModelSection::seed, integer_in(0, kMaxU32),
                    "Seed of the random weights."),
        engine.field("host", &EngineConfig::host, text(), "Address the HTTP server listens on."),
        engine.field("port", &EngineConfig::port, integer_in(0, 65535),
                     "Port of the HTTP server; 0 picks a free one and prints it."),
        engine.field("max_requests_in_flight", &EngineConfig::max_requests_in_flight,
                     integer_in(1, 4096),
                     "Completion requests the HTTP server serves at once; more are answered 429 "
                     "(code overloaded) at once. Its threads: this many, and 16 more that keep "
                     "/health and /metrics answered while every request thread is busy."),
        engine.field("model_name", &EngineConfig::model_name, text(),
                     "Name the API serves the model under (/v1/models)."),
        engine.field("engine_cores", &EngineConfig::engine_cores, integer_in(1, 64),
                     "Engine-core processes; requests are spread over them."),
        engine.field("world_size", &EngineConfig::world_size, integer_in(1, 64),
                     "Tensor-parallel worker processes per engine core."),
        engine.field("device_blocks", &EngineConfig::device_blocks, integer_in(1, 1 << 24),
                     "KV blocks of device memory per rank and KV-cache group (the device prefix "
                     "cache lives in them)."),
        engine.field("max_batched_tokens", &EngineConfig::max_batched_tokens,
                     integer_in(1, 1 << 20),
                     "Tokens one engine step computes at most (chunked prefill)."),
        engine.field("max_running_requests", &EngineConfig::max_running_requests,
                     integer_in(1, 1 << 16), "Requests an engine core runs at once."),
        engine.field("max_tokens", &EngineConfig::max_tokens, integer_in(1, 1 << 20),
                     "Completion length when a request does not say."),
        engine.field("heartbeat_interval_s", &EngineConfig::heartbeat_interval_s,
                     positive_seconds(), "Interval of the scheduler and worker loops' heartbeats."),
        engine.field("stall_timeout_s", &EngineConfig::stall_timeout_s, positive_seconds(),
                     "A loop silent this long is reported stalled: /health answers 503. (H6) At "
                     "least 2 heartbeat intervals, so a loop that beats on time never is."),
        engine.field("progress_timeout_s", &EngineConfig::progress_timeout_s, positive_seconds(),
                     "A running request that computes nothing this long, or an engine core with "
                     "work that completes nothing this long, fails the core: /health answers 503 "
                     "naming it. (H8)"),
        engine.field("request_timeout_s", &EngineConfig::request_timeout_s, positive_seconds(),
                     "A request not finished this long after it arrived ends with an error (504)."),
        faults.field("seed", &FaultsConfig::seed, integer_in(0, kMaxU32),
                     "Seed of the injected device faults (each rank adds its rank)."),
        faults.field("submit_failure_rate", &FaultsConfig::submit_failure_rate, fraction(),
                     "Share of the workers' copy batches that fail at submit (Failed)."),
        faults.field("latched_error_rate", &FaultsConfig::latched_error_rate, fraction(),
                     "Share of copy batches whose stream reports an error once (Failed)."),
        faults.field("delay_rate", &FaultsConfig::delay_rate, fraction(),
                     "Share of copy batches that start late."),
        faults.field("record_failure_rate", &FaultsConfig::record_failure_rate, fraction(),
                     "Share of copy batches whose end marker cannot be recorded: Unprovable, the "
                     "engine fail-stops. (F7, H4)"),
        faults.field("hang_rate", &FaultsConfig::hang_rate, fraction(),
                     "Share of copy batches that never complete: Unprovable at the transfer "
                     "deadline, the engine fail-stops. (F8)"),
        faults.field("direction", &FaultsConfig::direction, fault_direction(),
                     "Which copies draw the faults above: loads (host to device), stores "
                     "(device to host), or both."),
        faults.field("stall_scheduler", &FaultsConfig::stall_scheduler, boolean(),
                     "Test hook: the scheduler stops computing a request once it has produced a "
                     "token, as a scheduling bug would; the progress watchdog must see it. (H8)"),
        faults.field("slow_forward_s", &FaultsConfig::slow_forward_s, seconds_or_zero(),
                     "Test hook: every forward pass of the workers takes at least this long; a "
                     "worker busy in a long step is not a silent one. (H6)"),
        faults.field("stall_server_loads", &FaultsConfig::stall_server_loads, boolean(),
                     "Test hook: with cache.mode server and kvtierd run with test hooks, kvtierd "
                     "takes 2 s over every RETRIEVE of the workers; a worker waiting for its "
                     "cache server is not a silent one. (H6, H7)"),
        server.field("endpoint", &ServerConfig::endpoint, text(),
                     "ZeroMQ endpoint kvtierd binds and clients connect to, e.g. "
                     "tcp://127.0.0.1:5557 or ipc:///tmp/kvtierd.sock."),
        server.field("heartbeat_interval_s", &ServerConfig::heartbeat_interval_s,
                     positive_seconds(),
                     "Client PING period. A dead or restarted server marks the client DEGRADED "
                     "within two intervals. (H7)"),
        server.field("client_timeout_s", &ServerConfig::client_timeout_s, positive_seconds(),
                     "Server side: a client silent this long (no request, no PING) is gone and "
                     "its read locks are released. At least 3 heartbeat intervals, so a live idle "
                     "client is never reaped."),
        server.field("request_timeout_s", &ServerConfig::request_timeout_s, positive_seconds(),
                     "Client side: deadline of a request that moves no data (LOOKUP, RELEASE, "
                     "STATS, ...). A STORE or RETRIEVE waits transfer.transfer_deadline_s + "
                     "transfer.completion_margin_s. (F8)"),
        server.field("connect_timeout_s", &ServerConfig::connect_timeout_s, positive_seconds(),
                     "Client side: longest wait for the server to answer a registration."),
        server.field("max_requests_in_flight", &ServerConfig::max_requests_in_flight,
                     integer_in(1, 1 << 20),
                     "Server side: requests of one client being served at once; more get a "
                     "limit_exceeded error reply."),
        server.field("copy_threads", &ServerConfig::copy_threads, integer_in(0, 64),
                     "Server side: threads that copy the bytes of one STORE or RETRIEVE between "
                     "a client's memory and the host pool, as a DMA engine uses several "
                     "channels; 0: half the CPU cores, from 1 to 4."),
        server.field("max_locks", &ServerConfig::max_locks, integer_in(1, 1 << 24),
                     "Server side: keys one client may hold read-locked (LOOKUP locks); more get "
                     "a limit_exceeded error reply."),
        server.field("lock_ttl_s", &ServerConfig::lock_ttl_s, positive_seconds(),
                     "Server side: longest life of a LOOKUP read lock; an expired lock is "
                     "released."),
        server.field("max_frame_bytes", &ServerConfig::max_frame_bytes, byte_size(),
                     "Server side: largest request frame; a larger one gets a too_large error "
                     "reply and is not decoded."),
        server.field("curve_key_file", &ServerConfig::curve_key_file, text(),
                     "This process's CURVE key pair file (written by kvtier keygen; mode 0600). "
                     "kvtierd: its own key pair, required with server.tenants_file. A client: "
                     "its key pair, required with server.curve_server_key."),
        server.field("curve_server_key", &ServerConfig::curve_server_key, text(),
                     "Client side: kvtierd's CURVE public key (40 Z85 characters). Set, the "
                     "client connects with CURVE, authenticated by server.curve_key_file; empty, "
                     "without."),
        server.field("tenants_file", &ServerConfig::tenants_file, text(),
                     "Server side: the tenants file (docs/operations.md): the client public "
                     "keys kvtierd admits, each tenant's quotas and sharing groups. Set, kvtierd "
                     "requires CURVE from every client; empty, every client is the one default "
                     "tenant."),
        server.field("insecure", &ServerConfig::insecure, boolean(),
                     "Server side: serve a tcp:// endpoint without CURVE (anyone who reaches the "
                     "port reads and writes every chunk); kvtierd refuses to start so otherwise "
                     "and warns when it does. (kvtier server --insecure)"),
        server.field("ipc_group", &ServerConfig::ipc_group, text(),
                     "Server side: an ipc:// socket file is created with mode 0600 (its owner "
                     "only); with a group name here, 0660 and owned by that group."),
        server.field("max_pins", &ServerConfig::max_pins, integer_in(0, 1 << 24),
                     "Server side: keys one tenant may hold pinned (PIN); a tenant's max_pins in "
                     "the tenants file overrides it."),
        server.field("max_sessions", &ServerConfig::max_sessions, integer_in(1, 1 << 20),
                     "Server side: clients of one tenant registered at once (each holds a "
                     "mapping of its memory and copy threads in kvtierd); one more REGISTER gets "
                     "quota_exceeded. A tenant's max_sessions in the tenants file overrides it."),
        server.field("max_pin_ttl_s", &ServerConfig::max_pin_ttl_s, positive_seconds(),
                     "Server side: longest ttl_ms a PIN may ask for; a longer one gets "
                     "invalid_argument."),
        server.field("metrics_port", &ServerConfig::metrics_port, integer_in(0, 65535),
                     "Server side: TCP port of kvtierd's HTTP /metrics (Prometheus) and /health; "
                     "0 serves neither (docs/operations.md)."),
        server.field("metrics_host", &ServerConfig::metrics_host, text(),
                     "Server side: address the metrics port listens on; 0.0.0.0 for every "
                     "interface."),
        events.field("endpoint", &EventsConfig::endpoint, text(),
                     "ZeroMQ endpoint (tcp://host:port or ipc://path) on which kvtierd and each "
                     "engine core of kvtier serve publish KV events about their cache's contents "
                     "(docs/events.md); engine core n adds n to the tcp port (ipc: appends -n). "
                     "Empty publishes none."),
        events.field("replay_endpoint", &EventsConfig::replay_endpoint, text(),
                     "ZeroMQ endpoint of the KV events' replay socket (a ROUTER answering a "
                     "start sequence number with the batches since, or a snapshot); numbered as "
                     "events.endpoint. Empty: no replay."),
        events.field("buffer_batches", &EventsConfig::buffer_batches, integer_in(1, 1 << 20),
                     "KV event batches kept for replay; a subscriber that missed older ones "
                     "gets a snapshot of the cache's contents instead."),
        routing.field("policy", &RoutingConfig::policy, one_of({"cache", "load"}),
                      "How the frontend of kvtier serve picks an engine core: cache (the longest "
                      "prefix cached on the device, then host, then lower tiers, weighed by the "
                      "cores' load; from the cores' KV events) or load (the least loaded)."),
        log.field("level", &LogConfig::level,
                  one_of({"trace", "debug", "info", "warning", "error", "off"}),
                  "Least severe log lines written to stderr, by kvtierd and by every process of "
                  "kvtier serve (the CLI's --log-level)."),
        log.field("format", &LogConfig::format, one_of({"text", "json"}),
                  "Log lines as text (timestamp, level, role[pid], message, key=value fields) or "
                  "as one JSON object per line for log shippers (the CLI's --log-format)."),
    };
  }();
  return table;
}

const Field* find_field(std::string_view key) {
  for (const Field& field : config_fields()) {
    // field.key() == key, without building the key.
    if (key.size() == field.section.size() + 1 + field.name.size() &&
        key.starts_with(field.section) && key[field.section.size()] == '.' &&
        key.ends_with(field.name)) {
      return &field;
    }
  }
  return nullptr;
}

bool has_section(std::string_view section) {
  return std::ranges::any_of(config_fields(), [&](const Field& f) { return f.section == section; });
}

}  // namespace kvtier::config_internal
