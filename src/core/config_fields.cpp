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
  Field field(std::string_view field_name, T S::*field_member, ConfigValue<T> value,
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
    constexpr Section<LayoutConfig> layout{"layout", &Config::layout};
    constexpr Section<ServerConfig> server{"server", &Config::server};
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
        cache.field("mode", &CacheConfig::mode, one_of({"local", "server"}),
                    "Where the worker keeps offloaded chunks: an in-process host pool (local), or "
                    "a kvtierd cache server at server.endpoint (server)."),
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
        server.field("max_locks", &ServerConfig::max_locks, integer_in(1, 1 << 24),
                     "Server side: keys one client may hold read-locked (LOOKUP locks); more get "
                     "a limit_exceeded error reply."),
        server.field("lock_ttl_s", &ServerConfig::lock_ttl_s, positive_seconds(),
                     "Server side: longest life of a LOOKUP read lock; an expired lock is "
                     "released."),
        server.field("max_frame_bytes", &ServerConfig::max_frame_bytes, byte_size(),
                     "Server side: largest request frame; a larger one gets a too_large error "
                     "reply and is not decoded."),
    };
  }();
  return table;
}

const Field* find_field(std::string_view key) {
  for (const Field& field : config_fields()) {
    if (field.key() == key) return &field;
  }
  return nullptr;
}

bool has_section(std::string_view section) {
  return std::ranges::any_of(config_fields(), [&](const Field& f) { return f.section == section; });
}

}  // namespace kvtier::config_internal
