// CacheService: the thread that owns kvtierd's cache state (host pool, CacheManager, read
// locks) and every client session (mapped KV memory + TransferEngine), and runs the handlers.
//
// Contract:
// - post() and client_gone() are thread-safe (the socket loop calls them); everything else runs
//   on the service thread, which never blocks on a transfer: it submits, then polls.
// - F11: every posted request gets exactly one reply through `reply`, also when its handler
//   raises (code "internal") — except under the "no_reply" test hook. A STORE or RETRIEVE is
//   answered only once its TransferEngine reported it (copies finished or provably stopped);
//   an Unprovable one is answered with code "unprovable" and its slots and the client mapping
//   are retained for the life of the process (F7).
// - A client that goes away has its read locks released; its session (and mapping) is dropped
//   once its transfers are decided.
// - Lower tiers (tiers.disk_path / tiers.redis_url set): a TierMover, owned by the service
//   thread like the CacheManager, demotes chunks (write-behind, fed the cache's events each
//   loop, or the chunks a STORE evicts under write_policy on_evict) and, when a LOOKUP's host
//   prefix stops short and a tier holds the next keys, prefetches them: they are pending
//   (the reply says "pending", never counts them as hits) until the mover's poll publishes the
//   verified ones (F3: a corrupt or missing chunk is freed unpublished). STATS names the DOWN
//   tiers (H7); no request fails because a tier failed. Without tiers nothing of this runs.
// - LOOKUP without the thread hop: lookup_now() answers a LOOKUP on the socket loop's thread from
//   the cache state itself. The state a LOOKUP reads or changes (the CacheManager, the read locks,
//   which clients are registered, whether the service drains) is guarded by one mutex,
//   state_mu_: the service thread holds it while it reads or changes that state, never while it
//   waits (tier calls, mapping client memory), and lookup_now holds it for one whole LOOKUP. So a
//   LOOKUP answered either way sees a state between two service steps and gives the reply, and
//   takes the read lock, that handle_lookup would give in that state.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvtier/cache/cache_manager.h"
#include "kvtier/cache/host_pool.h"
#include "kvtier/cache/tier_mover.h"
#include "kvtier/core/counter_kind.h"
#include "kvtier/core/prometheus_text.h"
#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/device/host_device.h"
#include "kvtier/server/protocol.h"
#include "kvtier/server/server.h"
#include "kvtier/transfer/transfer_engine.h"
#include "pins.h"
#include "read_locks.h"
#include "shared_kv_memory.h"
#include "tenant_metrics.h"
#include "tenants.h"

namespace kvtier::server {

// Counters the socket loop keeps; STATS reports them.
struct LoopCounters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> pings{0};            // answered by the loop
  std::atomic<uint64_t> rejected_frames{0};  // malformed, truncated, oversized, unknown op
  std::atomic<uint64_t> limit_rejections{0};
  std::atomic<uint64_t> clients_reaped{0};
  std::atomic<uint64_t> batch_frames{0};  // frames holding a batch of requests
  std::atomic<uint64_t> auth_refused{0};  // CURVE handshakes the ZAP handler refused
};

template <class F>
void visit_counters(const LoopCounters& c, F&& f) {
  using enum CounterKind;
  f("requests", c.requests.load(), kCounter);
  f("pings", c.pings.load(), kCounter);
  f("rejected_frames", c.rejected_frames.load(), kCounter);
  f("limit_rejections", c.limit_rejections.load(), kCounter);
  f("clients_reaped", c.clients_reaped.load(), kCounter);
  f("batch_frames", c.batch_frames.load(), kCounter);
}

// The tiers config.tiers asks for (none when neither disk_path nor redis_url is set), each with
// its call timeout. Errors name the field (tier_factory.h). Every kvtierd shares one key
// namespace in the tiers: clients root their ChunkKeys in (model, layout, group, salt) already.
Result<std::vector<MoverTier>> make_server_tiers(const Config& config);

// Adds every field of a counter struct (one with visit_counters, counter_kind.h) to STATS
// reply fields, each as prefix + its name.
template <class Counters>
void add_stats(std::map<std::string, uint64_t>& fields, std::string_view prefix,
               const Counters& counters) {
  visit_counters(counters, [&](std::string_view name, uint64_t value, CounterKind) {
    fields[std::string(prefix) + std::string(name)] = value;
  });
}

// A client's ZeroMQ routing id as logs name it: its bytes in hex.
std::string client_label(std::string_view routing_id);

// How many requests of one client were posted and not yet dispatched by the service thread.
// The socket loop answers a LOOKUP itself only while this is 0, so that a client's requests
// take effect in the order it sent them (a LOOKUP never overtakes the REGISTER, STORE or RELEASE
// before it).
using QueuedCount = std::shared_ptr<std::atomic<uint32_t>>;

struct Envelope {
  std::string client;                // ZeroMQ routing id
  TenantId tenant = kDefaultTenant;  // the client's; its keys are scoped to it already
  Request request;
  QueuedCount queued;  // decremented once the request was dispatched (may be null)
  // REGISTER: the user the client runs as, whose processes' memory it may register
  // (SharedKvMapping::open): its ipc:// socket's peer credentials; over a transport that tells
  // none (tcp://), the server's own user.
  uid_t client_uid = 0;
};

// A LOOKUP's arguments, wherever its keys live (a Request, or the frame's LookupFrame).
struct LookupQuery {
  uint64_t id = 0;
  std::span<const ChunkKey> keys;
  uint64_t lock_ms = 0;

  static LookupQuery of(const Request& r) {
    return {.id = r.id, .keys = r.keys, .lock_ms = r.lock_ms};
  }
};

// A LOOKUP's answer: an error reply, or the success reply's fields.
struct LookupAnswer {
  std::optional<Reply> error;
  uint64_t hits = 0;
  bool pending = false;
  uint64_t lock = 0;

  Reply reply(uint64_t id) const;
};

class CacheService {
 public:
  using ReplyFn = std::function<void(const std::string& client, const Reply& reply)>;

  // `fault` is the device's fault injector when test hooks are on, else null. `reply` and
  // `drained` are called on the service thread.
  // `tiers` (from make_server_tiers) may be empty: then there is no TierMover.
  // `tenants` sets the CacheManager's owner quotas (a tenant is an owner) and the per-tenant
  // limits; it outlives the service.
  CacheService(const ServerOptions& options, const Tenants& tenants, HostDevice& host,
               Device& device, FaultInjectingDevice* fault, HostPool& pool, uint64_t boot_id,
               const LoopCounters& loop, ReplyFn reply, std::function<void()> drained,
               std::vector<MoverTier> tiers = {});
  ~CacheService();  // stop()s
  // Stops and joins the thread and ends the sessions; once.
  void stop();
  // After stop(): whether an Unprovable transfer's copies may still run (a session was
  // quarantined: its engine and memory are kept, F7), so the pool and devices must outlive it.
  bool copies_may_run() const { return copies_may_run_; }

  void start();
  void post(Envelope envelope);
  // Thread-safe (the socket loop calls it): a LOOKUP without a test hook, answered now from the
  // cache state as handle_lookup would answer it at this point (shutting_down, not_registered,
  // hits, pending, the read lock and server.max_locks). Returns nullopt, having changed nothing,
  // when only the service thread can answer: the ready prefix stops at an absent key and lower
  // tiers may hold it (read-through waits for them). Never throws: a failure is an "internal"
  // error.
  std::optional<LookupAnswer> lookup_now(const std::string& client, TenantId tenant,
                                         const LookupQuery& query);
  void client_gone(std::string client);
  // Graceful shutdown: refuse new work, decide transfers in flight, then call `drained`.
  void begin_shutdown();
  // The lower tiers that are DOWN (H7), for PING replies. Thread-safe.
  std::vector<std::string> degraded_tiers() const;
  // True once the service refuses new work (SHUTDOWN, a stop signal). Thread-safe.
  bool draining() const { return draining_.load() || shutdown_requested_.load(); }

  // The counters of the tenant `client` belongs to, as the socket loop bound it (bind_tenant):
  // the one place a client gets its tenant's counters; the default tenant's for a client not
  // (or no longer) bound. Thread-safe.
  TenantCounters& tenant_of(const std::string& client);
  // The counters of tenant `tenant` (an id of the Tenants this service was built with).
  TenantCounters& counters_of(TenantId tenant);
  // The socket loop binds a client to its tenant when it first hears from it, and unbinds it
  // when it reaps it. Thread-safe.
  void bind_tenant(const std::string& client, TenantId tenant);
  void unbind_tenant(const std::string& client);
  // Every reply to a client passes here (either thread): an error reply counts against the
  // client's tenant by code, and is logged naming the client, tenant and request (at error for
  // a server-side failure: internal, transfer_failed, unprovable; at debug otherwise, since a
  // client's own mistakes must not flood the log).
  void account(const std::string& client, const Reply& reply);
  // kvtierd's /metrics families from the service: per tenant, the host pool's cache counters,
  // the DOWN tiers. Thread-safe.
  void add_metrics(PrometheusText& out) const;

 private:
  struct PendingTransfer {
    uint64_t request_id = 0;
    Direction direction = Direction::kStore;
    std::vector<ChunkKey> keys;  // store: keys written; load: keys pinned
    uint64_t already_present = 0;
  };
  struct Session {
    TenantId tenant = kDefaultTenant;
    uint32_t rank = 0;
    KvLayout layout;
    std::unique_ptr<SharedKvMapping> memory;
    uint32_t memory_pid = 0;  // the REGISTER's memory, to know the same REGISTER again
    uint32_t memory_fd = 0;
    uint64_t memory_bytes = 0;
    StreamHandle compute;
    std::unique_ptr<TransferEngine> engine;
    std::map<JobId, PendingTransfer> pending;
    bool gone = false;         // the client went away: drop once nothing is pending
    bool quarantined = false;  // an Unprovable transfer touched its memory (F7)
  };

  void run();
  void handle(Envelope& envelope);
  void dispatch(const Envelope& envelope);
  void handle_register(const std::string& client, TenantId tenant, uid_t client_uid,
                       const Request& request);
  // REGISTER's ok: the session's boot id and what this server takes.
  void reply_registered(const std::string& client, uint64_t id);
  void handle_unregister(const std::string& client, const Request& request);
  void handle_lookup(const std::string& client, TenantId tenant, const Request& request);
  // The LOOKUP answer (both paths), under state_mu_; may raise only before it changed state.
  LookupAnswer lookup_locked(const std::string& client, TenantId tenant, const LookupQuery& query);
  void handle_transfer(const std::string& client, const Request& request);
  void handle_release(const std::string& client, const Request& request);
  // PIN / UNPIN (pins_): no registration needed, the tenant is the client's.
  void handle_pin(const std::string& client, TenantId tenant, const Request& request);
  void handle_unpin(const std::string& client, TenantId tenant, const Request& request);
  void handle_stats(const std::string& client, TenantId tenant, const Request& request);
  // A quota_exceeded error (counted in quota_rejections).
  Reply quota_exceeded(uint64_t id, const std::string& what);

  Session* session_of(const std::string& client, uint64_t request_id);
  Status check_chunks(const Session& session, const Request& request) const;
  void submit(const std::string& client, Session& session, const Request& request,
              Direction direction, std::vector<ChunkTransfer> chunks, PendingTransfer pending);
  void poll_transfers();
  void poll_tiers();
  void add_tier_stats(std::map<std::string, uint64_t>& fields) const;
  void finish(const std::string& client, Session& session, const TransferResult& result);
  void fail_session(const std::string& client, Session& session, const std::string& why);
  void release_locks(const std::vector<ReadLock>& locks);
  void release_pins(const std::vector<ChunkKey>& keys) { cache_.complete_load(keys); }
  void drop_gone_sessions();
  void destroy_session(Session& session);
  size_t transfers_in_flight() const;
  void ok(const std::string& client, uint64_t id,
          const std::map<std::string, uint64_t>& fields = {});
  void error(const std::string& client, uint64_t id, std::string_view code, std::string_view msg);
  void send(const std::string& client, const Reply& reply);
  bool is_registered_locked(const std::string& client) const {
    return registered_.contains(client);
  }

  const ServerOptions& options_;
  const Tenants& tenants_;
  HostDevice& host_;
  Device& device_;
  FaultInjectingDevice* fault_;
  HostPool& pool_;
  const uint64_t boot_id_;
  const LoopCounters& loop_;
  ReplyFn reply_;
  std::function<void()> drained_;
  TransferOptions transfer_options_;

  // Guards cache_ (also where mover_ uses it), locks_, pins_ and registered_ (see the contract
  // above).
  // Never held together with mu_.
  mutable std::mutex state_mu_;
  // KV events of the host cache (events.endpoint); null when off. Outlives cache_.
  std::unique_ptr<KvEventPublisher> events_;
  CacheManager cache_;
  std::unique_ptr<TierMover> mover_;  // null without tiers; destroyed before cache_
  ReadLocks locks_;
  Pins pins_;
  std::unordered_set<std::string> registered_;   // sessions_ that are not gone
  std::map<TenantId, size_t> tenant_transfers_;  // transfers in flight per tenant (> 0)
  std::map<std::string, Session> sessions_;
  std::vector<std::unique_ptr<SharedKvMapping>> retained_memory_;  // F7
  JobId next_job_ = 1;
  std::atomic<bool> draining_ = false;
  bool drained_sent_ = false;
  std::map<std::string, uint64_t> counters_;
  // While handle() dispatches a request: the replies it gave, sent once it is done.
  std::optional<std::vector<std::pair<std::string, Reply>>> held_replies_;
  // What lookup_now answered (STATS adds them to op_LOOKUP, error_replies, handler_errors).
  std::atomic<uint64_t> fast_lookups_{0};
  std::atomic<uint64_t> fast_errors_{0};
  std::atomic<uint64_t> fast_raised_{0};
  std::atomic<uint64_t> quota_rejections_{0};  // both threads
  TenantMetrics tenant_metrics_;
  std::mutex client_tenants_mu_;  // guards client_tenants_
  std::unordered_map<std::string, TenantId> client_tenants_;
  TenantCounters& default_tenant_ = tenant_metrics_.tenant(TenantMetrics::kDefaultTenant);

  std::mutex mu_;  // guards the inbox
  std::condition_variable wake_;
  std::deque<Envelope> inbox_;
  std::vector<std::string> gone_inbox_;
  std::atomic<bool> shutdown_requested_ = false;  // written under mu_
  bool stop_ = false;
  std::thread thread_;
  bool stopped_ = false;
  bool copies_may_run_ = false;  // a quarantined session was ended (destroy_session)
};

}  // namespace kvtier::server
