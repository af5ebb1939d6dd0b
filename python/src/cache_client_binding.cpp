// kvtier.CacheClient: a connection to kvtierd (server::CacheClient) over KV memory of its own in
// a sealed memfd that kvtierd maps (SharedKvArena), and kvtier.chunk_keys, the keys it takes.
// Every call that talks to kvtierd waits for its reply with the GIL released; each resolves by
// its deadline (F8: server.request_timeout_s, or the transfer deadline for STORE / RETRIEVE).
//
// Errors: a failed LOOKUP, RELEASE, STATS, ... is kvtier.Error with kvtier's code (kUnavailable
// while kvtierd is down or unreachable, kDeadlineExceeded without a reply, the server's error
// otherwise). A STORE or RETRIEVE ends in a verdict: completed or failed (its copies stopped, F11)
// come back as a JobVerdict; unprovable raises kvtier.FailStop (F7) and so does every later
// STORE or RETRIEVE: kvtierd may still write this client's memory.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "kv_memory.h"
#include "kvtier/connector/remote_cache.h"

namespace kvtier::python {
namespace {

// The client and the memory it registered, owned jointly by the CacheClient and every KvMemory
// over it. The client is destroyed first (member order): then no server copy is outstanding.
struct ClientState {
  std::unique_ptr<SharedKvArena> arena;
  std::unique_ptr<server::CacheClient> client;
};

ChunkKey parse_key(py::handle key, const char* what) {
  std::string hex;
  try {
    hex = key.cast<std::string>();
  } catch (const py::cast_error&) {
    throw KvError(ErrorCode::kInvalidArgument,
                  std::string(what) + ": a chunk key is a string of 32 hex digits");
  }
  auto half = [&](size_t from) {
    uint64_t v = 0;
    for (size_t i = from; i < from + 16; ++i) {
      const char c = hex[i];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) {
        throw KvError(ErrorCode::kInvalidArgument,
                      std::string(what) + ": '" + hex + "' is not 32 hex digits");
      }
      v = v << 4 | static_cast<uint64_t>(d);
    }
    return v;
  };
  if (hex.size() != 32) {
    throw KvError(ErrorCode::kInvalidArgument,
                  std::string(what) + ": '" + hex + "' is not 32 hex digits");
  }
  return ChunkKey{.lo = half(16), .hi = half(0)};  // ChunkKey::hex() writes hi first
}

std::vector<ChunkKey> parse_keys(py::handle keys) {
  if (py::isinstance<py::str>(keys) || !py::isinstance<py::sequence>(keys)) {
    throw KvError(ErrorCode::kInvalidArgument, "keys: a list of chunk keys (32 hex digits each)");
  }
  std::vector<ChunkKey> out;
  for (py::handle k : keys) out.push_back(parse_key(k, "keys"));
  return out;
}

std::vector<std::vector<uint32_t>> parse_blocks(py::handle blocks, size_t keys) {
  std::vector<std::vector<uint32_t>> out;
  try {
    out = blocks.cast<std::vector<std::vector<uint32_t>>>();
  } catch (const py::cast_error&) {
    throw KvError(ErrorCode::kInvalidArgument,
                  "blocks: one list of block ids (non-negative ints) per key");
  }
  if (out.size() != keys) {
    throw KvError(ErrorCode::kInvalidArgument, "blocks: " + std::to_string(out.size()) +
                                                   " lists for " + std::to_string(keys) + " keys");
  }
  return out;
}

py::dict fields_dict(const server::ReplyFields& fields) {
  py::dict d;
  for (const auto& [name, value] : fields) d[py::str(name)] = value;
  return d;
}

Duration to_duration(double seconds, const char* what) {
  if (!(seconds >= 0) || seconds > 1e9) {
    throw KvError(ErrorCode::kInvalidArgument,
                  std::string(what) + ": seconds, >= 0 (got " + std::to_string(seconds) + ")");
  }
  return seconds_to_duration(seconds);
}

class CacheClient {
 public:
  CacheClient(const Config& config, uint32_t num_blocks, uint32_t rank, bool wait)
      : layout_(config.kv_layout()),
        endpoint_(config.server.endpoint),
        rank_(rank),
        num_blocks_(num_blocks) {
    if (num_blocks == 0) throw KvError(ErrorCode::kInvalidArgument, "num_blocks: at least 1");
    state_ = std::make_shared<ClientState>();
    state_->arena = std::make_unique<SharedKvArena>(layout_, num_blocks, "py-client");
    state_->client = std::make_unique<server::CacheClient>(
        server::ClientOptions::from_config(config), state_->arena->registration(rank));
    if (wait) {
      py::gil_scoped_release release;
      state_->client->wait_until_ok(seconds_to_duration(config.server.connect_timeout_s));
    }
    const KvCacheAddresses caches = state_->arena->addresses(num_blocks);
    for (size_t g = 0; g < caches.groups.size(); ++g) {
      const size_t bytes = *layout_.tensor_bytes(g, num_blocks);
      py::list tensors;
      for (DeviceAddress base : caches.groups[g].bases) {
        tensors.append(py::cast(KvMemory{state_, reinterpret_cast<void*>(base), bytes}));
      }
      memory_.append(tensors);
    }
  }

  py::dict health() const {
    const server::ClientHealth h = client().health();
    py::dict d;
    d["state"] = std::string(to_string(h.state));
    d["reason"] = h.reason;
    d["fail_stopped"] = h.fail_stopped;
    d["server_boot_id"] = h.server_boot_id;
    d["degraded_tiers"] = py::cast(h.degraded_tiers);
    return d;
  }

  bool fail_stopped() const { return client().fail_stopped(); }

  bool wait_until_ok(double timeout_s) const {
    const Duration timeout = to_duration(timeout_s, "timeout_s");
    std::shared_ptr<ClientState> s = state();
    py::gil_scoped_release release;
    return s->client->wait_until_ok(timeout);
  }

  py::object lookup(py::handle keys_in, double lock_for_s) {
    std::vector<ChunkKey> keys = parse_keys(keys_in);
    const Duration lock_for = to_duration(lock_for_s, "lock_for_s");
    std::shared_ptr<ClientState> s = state();
    Result<server::LookupReply> r;
    {
      py::gil_scoped_release release;
      r = s->client->lookup(std::move(keys), lock_for).get();
    }
    const server::LookupReply reply = value_or_raise(std::move(r));
    return types().lookup_reply(reply.hits, reply.pending, reply.lock);
  }

  py::list lookup_many(py::handle lookups_in, double lock_for_s) {
    if (py::isinstance<py::str>(lookups_in) || !py::isinstance<py::sequence>(lookups_in)) {
      throw KvError(ErrorCode::kInvalidArgument, "lookups: a list of lists of chunk keys");
    }
    server::LookupBatch batch;
    for (py::handle keys : lookups_in) batch.add(parse_keys(keys));
    const Duration lock_for = to_duration(lock_for_s, "lock_for_s");
    std::shared_ptr<ClientState> s = state();
    std::vector<Result<server::LookupReply>> found;
    {
      py::gil_scoped_release release;
      found = s->client->lookup_many(std::move(batch), lock_for).get();
    }
    py::list out;
    for (Result<server::LookupReply>& r : found) {
      const server::LookupReply reply = value_or_raise(std::move(r));
      out.append(types().lookup_reply(reply.hits, reply.pending, reply.lock));
    }
    return out;
  }

  py::object store(JobId job, py::handle keys_in, py::handle blocks_in, uint32_t group) {
    return transfer(Direction::kStore, job, keys_in, blocks_in, group, 0);
  }
  py::object retrieve(JobId job, py::handle keys_in, py::handle blocks_in, uint32_t group,
                      uint64_t lock) {
    return transfer(Direction::kLoad, job, keys_in, blocks_in, group, lock);
  }

  void release(uint64_t lock) { check(wait_for(state()->client->release(lock))); }
  void unregister() { check(wait_for(state()->client->unregister())); }
  void shutdown_server() { check(wait_for(state()->client->shutdown_server())); }

  py::dict stats() {
    return fields_dict(value_or_raise(wait_for(state()->client->stats())).fields);
  }
  py::dict ping() { return fields_dict(value_or_raise(wait_for(state()->client->ping())).fields); }

  // STATS' tiers: name -> {"state": "up" | "down", and the tier's counters}.
  py::dict tiers() {
    const server::Reply reply = value_or_raise(wait_for(state()->client->stats()));
    py::dict out;
    for (const auto& [name, fields] : server::tier_fields_of(reply)) {
      py::dict t;
      auto down = fields.find("down");
      t["state"] = down != fields.end() && down->second != 0 ? "down" : "up";
      for (const auto& [field, value] : fields) {
        if (field != "down") t[py::str(field)] = value;
      }
      out[py::str(name)] = t;
    }
    return out;
  }

  // Drops this object's share of the client: unregisters (when no transfer of it can be running)
  // and closes the connection once no KvMemory over its memory is referenced any more.
  void close() {
    if (!state_) return;
    std::shared_ptr<ClientState> s = std::move(state_);
    memory_ = py::list();
    py::gil_scoped_release release;
    if (!s->client->fail_stopped() && s->client->health().state == server::ClientState::kOk) {
      static_cast<void>(s->client->unregister().get());  // bounded by request_timeout
    }
    s.reset();
  }

  py::list kv_caches() const { return memory_; }
  uint32_t rank() const { return rank_; }
  uint32_t num_blocks() const { return num_blocks_; }
  const KvLayout& layout() const { return layout_; }
  const std::string& endpoint() const { return endpoint_; }
  bool closed() const { return !state_; }

 private:
  std::shared_ptr<ClientState> state() const {
    if (!state_) throw KvError(ErrorCode::kFailedPrecondition, "the CacheClient is closed");
    return state_;
  }
  const server::CacheClient& client() const { return *state()->client; }

  // A future's value, waited for without the GIL.
  template <class T>
  static T wait_for(std::future<T> future) {
    py::gil_scoped_release release;
    return future.get();
  }

  py::object transfer(Direction direction, JobId job, py::handle keys_in, py::handle blocks_in,
                      uint32_t group, uint64_t lock) {
    std::vector<ChunkKey> keys = parse_keys(keys_in);
    std::vector<std::vector<uint32_t>> blocks = parse_blocks(blocks_in, keys.size());
    if (group >= layout_.groups.size()) {
      throw KvError(ErrorCode::kInvalidArgument, "group " + std::to_string(group) +
                                                     ": the layout has " +
                                                     std::to_string(layout_.groups.size()));
    }
    std::shared_ptr<ClientState> s = state();
    if (s->client->fail_stopped()) {
      throw FailStopError(
          "the cache client fail-stopped: a transfer was unprovable (F7); "
          "kvtierd may still write its memory");
    }
    TransferResult r;
    {
      py::gil_scoped_release release;
      r = (direction == Direction::kStore
               ? s->client->store(job, group, std::move(keys), std::move(blocks))
               : s->client->retrieve(job, group, std::move(keys), std::move(blocks), lock))
              .get();
    }
    if (r.outcome == Outcome::kUnprovable) {
      throw FailStopError("job " + std::to_string(job) + " is unprovable: " + r.error);
    }
    return types().job_verdict(job, std::string(to_string(r.outcome)), r.error);
  }

  KvLayout layout_;
  std::string endpoint_;
  uint32_t rank_;
  uint32_t num_blocks_;
  std::shared_ptr<ClientState> state_;  // null once closed
  py::list memory_;                     // per group, a KvMemory per tensor
};

py::list chunk_keys(const KvLayout& layout, py::handle tokens_in, const std::string& model,
                    uint32_t group, const std::string& salt, std::optional<uint32_t> rank) {
  if (group >= layout.groups.size()) {
    throw KvError(ErrorCode::kInvalidArgument, "group " + std::to_string(group) +
                                                   ": the layout has " +
                                                   std::to_string(layout.groups.size()));
  }
  const std::vector<TokenId> tokens = to_tokens(tokens_in, "tokens");
  const KeyNamespace ns{.model = model,
                        .layout_fingerprint = layout.fingerprint(),
                        .group = group,
                        .cache_salt = salt};
  py::list out;
  for (const ChunkKey& k : kvtier::chunk_keys(ns, tokens, layout.groups[group].chunk_tokens())) {
    out.append(rank ? rank_key(k, *rank).hex() : k.hex());
  }
  return out;
}

}  // namespace

void bind_cache_client(py::module_& m) {
  m.def("chunk_keys", &chunk_keys, py::arg("layout"), py::arg("tokens"), py::kw_only(),
        py::arg("model"), py::arg("group") = 0, py::arg("cache_salt") = "",
        py::arg("rank") = py::none(),
        "The chunk keys of every full chunk of `tokens` (32 hex digits each), as the connector "
        "computes them for `model` (Scheduler(model=...)), `cache_salt` and KV-cache `group` of "
        "`layout`. With `rank`: that rank's share of each chunk, the key under which the "
        "connector's worker side of `rank` stores it in kvtierd.");

  py::class_<CacheClient>(
      m, "CacheClient",
      "A connection to kvtierd (server.endpoint) over KV memory of its own, which kvtierd "
      "maps: lookup, store, retrieve, release, stats, and the tiers' status.\n\n"
      "Every call that talks to kvtierd releases the GIL and returns by its deadline (F8). "
      "While kvtierd is down or unreachable the client is degraded (health()): lookups raise "
      "kvtier.Error('unavailable'), stores and retrievals fail without being sent (H7), and it "
      "reconnects on its own. Thread-safe.")
      .def(py::init<const Config&, uint32_t, uint32_t, bool>(), py::arg("config"), py::kw_only(),
           py::arg("num_blocks"), py::arg("rank") = 0, py::arg("wait") = true,
           "Allocates `num_blocks` blocks of KV memory per group in `config.layout` (sealed "
           "shared memory, zero-filled; kv_caches holds it), and registers it with kvtierd at "
           "server.endpoint as `rank`. With `wait`, waits at most server.connect_timeout_s for "
           "the registration; a kvtierd that is not up leaves the client degraded, not an "
           "error.")
      .def("health", &CacheClient::health,
           "{'state': 'ok' | 'degraded' | 'shutdown', 'reason': why not ok, 'fail_stopped': "
           "bool (F7), 'server_boot_id': int, 'degraded_tiers': names of kvtierd's lower tiers "
           "that are DOWN (H7)}.")
      .def_property_readonly("fail_stopped", &CacheClient::fail_stopped,
                             "F7: a STORE or RETRIEVE was unprovable; stays True.")
      .def("wait_until_ok", &CacheClient::wait_until_ok, py::arg("timeout_s"),
           "Waits at most `timeout_s` until the client is registered with a live kvtierd; "
           "returns whether it is.")
      .def("lookup", &CacheClient::lookup, py::arg("keys"), py::arg("lock_for_s") = 0.0,
           "kvtier.LookupReply(hits, pending, lock): `hits` leading keys are ready; `pending`: "
           "the next one is being stored or fetched from a lower tier (ask again). With "
           "`lock_for_s` > 0 the hits are read-locked that long (capped by server.lock_ttl_s) "
           "under `lock` (0: none): release() it or pass it to retrieve().")
      .def("lookup_many", &CacheClient::lookup_many, py::arg("lookups"),
           py::arg("lock_for_s") = 0.0,
           "Many LOOKUPs at once: lookups[i] (a list of keys) is answered as lookup(lookups[i]) "
           "would be, in one round trip for all (sent in batch frames). Returns one "
           "kvtier.LookupReply per lookup; raises the first error if any lookup failed (locks "
           "the others took then expire after lock_for_s).")
      .def("store", &CacheClient::store, py::arg("job"), py::arg("keys"), py::arg("blocks"),
           py::arg("group") = 0,
           "Copies blocks[i] (block ids of this client's memory, one list per key) of `group` "
           "into kvtierd under keys[i]; keys it holds already are skipped. Returns "
           "kvtier.JobVerdict(job, 'completed' | 'failed', error): a failed store's copies "
           "stopped and it is never served (F3). Raises kvtier.FailStop when unprovable (F7).")
      .def("retrieve", &CacheClient::retrieve, py::arg("job"), py::arg("keys"), py::arg("blocks"),
           py::kw_only(), py::arg("group") = 0, py::arg("lock") = 0,
           "Copies the chunks under `keys` (every one ready) into blocks[i] of `group`; `lock` "
           "(from lookup) is released once they are pinned. Returns kvtier.JobVerdict: a "
           "failed retrieve's copies stopped; its blocks hold no valid KV (F4). Raises "
           "kvtier.FailStop when unprovable (F7).")
      .def("release", &CacheClient::release, py::arg("lock"),
           "Releases a lookup's read lock (kvtier.Error('not_found') for one not held).")
      .def("stats", &CacheClient::stats,
           "kvtierd's counters (STATS), name -> int: its host cache's slots and totals, "
           "requests, transfers, this client's locked keys and transfers, and per lower tier "
           "'tier.<name>.<counter>' (docs/protocol.md).")
      .def("tiers", &CacheClient::tiers,
           "kvtierd's lower tiers (STATS): name -> {'state': 'up' | 'down', and the tier's "
           "counters: hits, misses, corrupt, errors, ...}. Empty without lower tiers.")
      .def("ping", &CacheClient::ping,
           "PING's fields: boot_id, and tier.<name>.down = 1 for each DOWN tier.")
      .def("unregister", &CacheClient::unregister,
           "Ends the registration (kvtierd drops this client's locks); the client stays "
           "degraded. kvtier.Error while transfers are in flight.")
      .def("shutdown_server", &CacheClient::shutdown_server,
           "Asks kvtierd to shut down gracefully (SHUTDOWN).")
      .def_property_readonly("kv_caches", &CacheClient::kv_caches,
                             "Per group, one kvtier.KvMemory per tensor (per_layer: one per "
                             "layer, [num_blocks, 2, block_size, kv_heads, head_dim]; "
                             "cross_layer: one). Empty once closed.")
      .def_property_readonly("rank", &CacheClient::rank)
      .def_property_readonly("num_blocks", &CacheClient::num_blocks)
      .def_property_readonly("layout", &CacheClient::layout)
      .def_property_readonly("endpoint", &CacheClient::endpoint)
      .def_property_readonly("closed", &CacheClient::closed)
      .def("close", &CacheClient::close,
           "Unregisters and drops the connection (once no KvMemory over its memory is "
           "referenced). Later calls raise kvtier.Error('failed_precondition').")
      .def("__enter__", [](CacheClient& c) -> CacheClient& { return c; })
      .def("__exit__", [](CacheClient& c, py::args) { c.close(); });
}

}  // namespace kvtier::python
