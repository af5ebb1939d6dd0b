// The cache service thread: inbox, transfer polling, lock expiry, session lifetime, drain.
// The handlers themselves are in request_handlers.cpp.
#include "cache_service.h"

#include <chrono>
#include <limits>

#include "kvtier/core/keep_forever.h"
#include "kvtier/core/log.h"
#include "kvtier/tier/tier_factory.h"

namespace kvtier::server {
namespace {

// How long the service sleeps between polls while transfers are in flight, and when idle.
constexpr auto kBusyPoll = std::chrono::microseconds(200);
constexpr auto kIdlePoll = std::chrono::milliseconds(20);

std::unique_ptr<EvictionPolicy> policy_for(const Config& config, size_t num_slots) {
  auto policy = make_eviction_policy(config.cache.eviction, num_slots);
  if (!policy) throw std::invalid_argument(policy.error().message);
  return std::move(*policy);
}

}  // namespace

std::string client_label(std::string_view routing_id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string label;
  label.reserve(routing_id.size() * 2);
  for (char c : routing_id) {
    const auto byte = static_cast<unsigned char>(c);
    label += kHex[byte >> 4];
    label += kHex[byte & 0xF];
  }
  return label;
}

Result<std::vector<MoverTier>> make_server_tiers(const Config& config) {
  // One namespace for every client: a ChunkKey is rooted in (model, layout, group, salt) by the
  // client that computed it (namespace_root), so keys of different models or layouts never
  // collide, and the tiers need no namespace of their own. (Redis keys: "kvtier:kvtierd:0…:".)
  return make_mover_tiers(config.tiers, KeyNamespace{.model = "kvtierd", .layout_fingerprint = 0});
}

CacheService::CacheService(const ServerOptions& options, const Tenants& tenants, HostDevice& host,
                           Device& device, FaultInjectingDevice* fault, HostPool& pool,
                           uint64_t boot_id, const LoopCounters& loop, ReplyFn reply,
                           std::function<void()> drained, std::vector<MoverTier> tiers)
    : options_(options),
      tenants_(tenants),
      host_(host),
      device_(device),
      fault_(fault),
      pool_(pool),
      boot_id_(boot_id),
      loop_(loop),
      reply_(std::move(reply)),
      drained_(std::move(drained)),
      transfer_options_(transfer_options(options.config.transfer)),
      cache_(pool.num_slots(), pool.slot_bytes(), policy_for(options.config, pool.num_slots())) {
  // STATS sends every counter from the start, not only once it moved (docs/protocol.md).
  for (const char* name :
       {"stores_completed", "retrieves_completed", "transfers_failed", "transfers_unprovable",
        "sessions_dropped", "handler_errors", "error_replies", "swallowed"}) {
    counters_[name] = 0;
  }
  for (TenantId t = 0; t < tenants_.size(); ++t) {
    const TenantLimits& limits = tenants_[t].limits;
    if (limits.max_slots != TenantLimits::kUnlimited || limits.guaranteed_slots > 0) {
      cache_.set_quota(
          t, OwnerQuota{.max_slots = static_cast<size_t>(std::min<uint64_t>(
                            limits.max_slots, std::numeric_limits<size_t>::max())),
                        .guaranteed_slots = static_cast<size_t>(limits.guaranteed_slots)});
    }
  }
  if (const EventsConfig& e = options.config.events; !e.endpoint.empty()) {
    events_ = std::make_unique<KvEventPublisher>(KvEventPublisherOptions{
        .endpoints = {e.endpoint},
        .replay_endpoints =
            e.replay_endpoint.empty() ? std::vector<std::string>{} : std::vector{e.replay_endpoint},
        .buffer_batches = e.buffer_batches});
    // kvtierd keys chunks of any client's layout; the config's layout names their size.
    cache_.publish_events(
        events_.get(), std::string(kMediumHost),
        options.config.layout.block_size * options.config.layout.blocks_per_chunk);
  }
  if (!tiers.empty()) {
    mover_ = std::make_unique<TierMover>(cache_, pool_, std::move(tiers),
                                         tier_mover_options(options.config.tiers));
    if (events_) {
      mover_->publish_events(
          events_.get(), options.config.layout.block_size * options.config.layout.blocks_per_chunk);
    }
    counters_["tier_prefetches_completed"] = 0;
  }
}

CacheService::~CacheService() {
  stop();
}

void CacheService::stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Sessions hold engines over `device_`; an engine with work in flight waits for it in its
  // destructor. Mappings an Unprovable transfer touched stay mapped (retained_memory_ leaks
  // them deliberately at exit).
  for (auto& [client, session] : sessions_) {
    if (!session.pending.empty()) session.quarantined = true;  // copies may still run
    destroy_session(session);
  }
  for (auto& m : retained_memory_) keep_forever(std::move(m));  // F7
}

void CacheService::start() {
  thread_ = std::thread([this] { run(); });
}

void CacheService::post(Envelope envelope) {
  bool was_empty = false;
  {
    std::lock_guard lock(mu_);
    was_empty = inbox_.empty();
    inbox_.push_back(std::move(envelope));
  }
  // The service waits on a predicate that sees a non-empty inbox, so one wake per batch is
  // enough.
  if (was_empty) wake_.notify_one();
}

void CacheService::client_gone(std::string client) {
  {
    std::lock_guard lock(mu_);
    gone_inbox_.push_back(std::move(client));
  }
  wake_.notify_one();
}

void CacheService::begin_shutdown() {
  {
    std::lock_guard lock(mu_);
    shutdown_requested_ = true;
  }
  wake_.notify_one();
}

void CacheService::run() {
  for (;;) {
    std::deque<Envelope> batch;
    std::vector<std::string> gone;
    {
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, transfers_in_flight() > 0 ? Duration(kBusyPoll) : Duration(kIdlePoll),
                     [&] { return stop_ || !inbox_.empty() || !gone_inbox_.empty(); });
      if (stop_) return;
      batch.swap(inbox_);
      gone.swap(gone_inbox_);
      if (shutdown_requested_) draining_ = true;
    }
    // Gone first: the socket loop reaps only a client silent for client_timeout_s, so any
    // request of it in this batch came after (it came back), and finds its session gone.
    for (const std::string& client : gone) {
      {
        std::lock_guard state(state_mu_);
        release_locks(locks_.take_all_of(client));
        registered_.erase(client);
      }
      if (auto it = sessions_.find(client); it != sessions_.end()) it->second.gone = true;
    }
    for (Envelope& e : batch) handle(e);
    poll_transfers();
    {
      std::lock_guard state(state_mu_);
      const TimePoint now = SteadyClock::instance().now();
      release_locks(locks_.take_expired(now));
      release_pins(pins_.take_expired(now));
    }
    drop_gone_sessions();
    if (draining_ && !drained_sent_ && transfers_in_flight() == 0) {
      {
        std::lock_guard state(state_mu_);
        release_locks(locks_.take_everything());
        release_pins(pins_.take_everything());
      }
      drained_sent_ = true;
      drained_();
    }
  }
}

void CacheService::handle(Envelope& e) {
  const uint64_t id = e.request.id;
  held_replies_.emplace();
  try {
    dispatch(e);
  } catch (const std::exception& ex) {
    // F11: a handler that raises still yields exactly one terminal reply. Handlers raise only
    // before they submit a transfer, so no reply for this request was sent yet.
    ++counters_["handler_errors"];
    error(e.client, id, codes::kInternal, std::string("handler raised: ") + ex.what());
  }
  // The request's effects are done: the socket loop may answer this client's LOOKUPs again
  // (lookup_now's order), and only then does the client hear the reply, so that a LOOKUP it
  // sends after the reply is never held back behind this request.
  if (e.queued) e.queued->fetch_sub(1);
  std::vector<std::pair<std::string, Reply>> replies = std::move(*held_replies_);
  held_replies_.reset();
  for (const auto& [client, reply] : replies) reply_(client, reply);
}

size_t CacheService::transfers_in_flight() const {
  size_t n = 0;
  for (const auto& [client, s] : sessions_) n += s.pending.size();
  return n;
}

void CacheService::poll_transfers() {
  for (auto& [client, session] : sessions_) {
    if (session.pending.empty()) continue;
    std::vector<TransferResult> results;
    try {
      results = session.engine->poll();
    } catch (const std::exception& e) {
      // Not a device fault (F2): the engine is in an unspecified state. Nothing can be proven
      // about its copies, so every pending transfer of this client is Unprovable.
      fail_session(client, session, std::string("transfer engine raised: ") + e.what());
      continue;
    }
    for (const TransferResult& r : results) finish(client, session, r);
  }
  poll_tiers();
}

std::vector<std::string> CacheService::degraded_tiers() const {
  return mover_ ? mover_->degraded_tiers() : std::vector<std::string>{};
}

void CacheService::poll_tiers() {
  std::unique_lock state(state_mu_);
  // No one mirrors kvtierd's contents through events (STATS reports counts; the mover hears of
  // stores as they happen): they are dropped rather than left waiting.
  static_cast<void>(cache_.take_events());
  if (!mover_) return;
  const size_t completed = mover_->poll();  // publishes prefetched keys
  state.unlock();
  if (completed > 0) counters_["tier_prefetches_completed"] += completed;
}

void CacheService::add_tier_stats(std::map<std::string, uint64_t>& f) const {
  f["tiers"] = 0;
  f["tiers_degraded"] = 0;
  if (!mover_) return;
  add_stats(f, "tier_", mover_->counters());
  // Per tier "tier.<name>.<what>"; tier_down_field(name) is 1 while the tier is DOWN (H7), and
  // tier_down_field("<name>/<part>") 1 for each part down while it is DEGRADED (degraded_names),
  // so a client names the degraded tiers from the field names alone (fields are integers).
  for (const TierMetrics& m : mover_->tier_metrics()) {
    const std::string prefix = "tier." + m.name + ".";
    ++f["tiers"];
    f["tiers_degraded"] += m.state == TierState::kUp ? 0 : 1;
    f[tier_down_field(m.name)] = 0;
    for (const std::string& name : degraded_names(m)) f[tier_down_field(name)] = 1;
    add_stats(f, prefix, m.counters);
  }
}

void CacheService::finish(const std::string& client, Session& session, const TransferResult& r) {
  auto it = session.pending.find(r.job);
  if (it == session.pending.end()) return;
  PendingTransfer p = std::move(it->second);
  session.pending.erase(it);
  if (auto t = tenant_transfers_.find(session.tenant); t != tenant_transfers_.end()) {
    if (--t->second == 0) tenant_transfers_.erase(t);
  }
  const bool store = p.direction == Direction::kStore;
  std::unique_lock state(state_mu_);
  switch (r.outcome) {
    case Outcome::kCompleted:
      if (store) {
        cache_.complete_store(p.keys, Verdict::kSucceeded);
      } else {
        cache_.touch(p.keys);
        cache_.complete_load(p.keys);
      }
      state.unlock();
      ++counters_[store ? "stores_completed" : "retrieves_completed"];
      // The session's tenant: its client may have been reaped meanwhile (no tenant bound).
      (store ? counters_of(session.tenant).stored_bytes
             : counters_of(session.tenant).retrieved_bytes) += r.bytes;
      ok(client, p.request_id,
         {{"chunks", p.keys.size()}, {"bytes", r.bytes}, {"already_present", p.already_present}});
      return;
    case Outcome::kFailed:  // F5: the engine decided it, so its copies have stopped
      if (store) {
        cache_.complete_store(p.keys, Verdict::kFailed);  // F3
      } else {
        cache_.complete_load(p.keys);
      }
      state.unlock();
      ++counters_["transfers_failed"];
      error(client, p.request_id, codes::kTransferFailed, r.error);
      return;
    case Outcome::kUnprovable:  // F7: slots and the client mapping are retained forever
      if (store) {
        cache_.quarantine_store(p.keys);
      } else {
        cache_.quarantine_load(p.keys);
      }
      state.unlock();
      session.quarantined = true;
      ++counters_["transfers_unprovable"];
      counters_of(session.tenant).quarantined_slots += p.keys.size();
      error(client, p.request_id, codes::kUnprovable, r.error);
      return;
  }
}

void CacheService::fail_session(const std::string& client, Session& session,
                                const std::string& why) {
  std::vector<JobId> jobs;
  jobs.reserve(session.pending.size());
  for (const auto& [job, p] : session.pending) jobs.push_back(job);
  for (JobId job : jobs) {
    const PendingTransfer& p = session.pending.at(job);
    finish(
        client, session,
        TransferResult{
            .job = job, .direction = p.direction, .outcome = Outcome::kUnprovable, .error = why});
  }
  session.quarantined = true;
}

// Under state_mu_.
void CacheService::release_locks(const std::vector<ReadLock>& locks) {
  for (const ReadLock& lock : locks) cache_.complete_load(lock.keys);
}

void CacheService::drop_gone_sessions() {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.gone && it->second.pending.empty()) {
      log_info("client session dropped", {{"client", client_label(it->first)},
                                          {"tenant", tenant_of(it->first).name},
                                          {"quarantined", it->second.quarantined ? "1" : "0"}});
      destroy_session(it->second);
      it = sessions_.erase(it);
      ++counters_["sessions_dropped"];
    } else {
      ++it;
    }
  }
}

void CacheService::destroy_session(Session& session) {
  if (session.quarantined) {
    // F7: copies may still touch the engine's streams and the client's memory. Keep both.
    copies_may_run_ = true;
    keep_forever(std::move(session.engine));
    retained_memory_.push_back(std::move(session.memory));
    retained_memory_.back()->retain_forever();
    return;
  }
  session.engine.reset();
  device_.destroy_stream(session.compute);
  session.memory.reset();
}

void CacheService::ok(const std::string& client, uint64_t id,
                      const std::map<std::string, uint64_t>& fields) {
  Reply r;
  r.id = id;
  r.fields = ReplyFields(fields);
  send(client, r);
}

void CacheService::error(const std::string& client, uint64_t id, std::string_view code,
                         std::string_view msg) {
  send(client, Reply::error(id, code, msg));
}

TenantCounters& CacheService::tenant_of(const std::string& client) {
  TenantId tenant = kDefaultTenant;
  {
    std::lock_guard lock(client_tenants_mu_);
    if (auto it = client_tenants_.find(client); it != client_tenants_.end()) tenant = it->second;
  }
  return counters_of(tenant);
}

TenantCounters& CacheService::counters_of(TenantId tenant) {
  if (tenant == kDefaultTenant) return default_tenant_;
  return tenant_metrics_.tenant(tenants_[tenant].name);
}

void CacheService::bind_tenant(const std::string& client, TenantId tenant) {
  std::lock_guard lock(client_tenants_mu_);
  client_tenants_[client] = tenant;
}

void CacheService::unbind_tenant(const std::string& client) {
  std::lock_guard lock(client_tenants_mu_);
  client_tenants_.erase(client);
}

void CacheService::account(const std::string& client, const Reply& reply) {
  if (reply.ok || !reply.event.empty()) return;
  TenantCounters& tenant = tenant_of(client);
  tenant.reject(reply.code);
  const bool server_side = reply.code == codes::kInternal || reply.code == codes::kTransferFailed ||
                           reply.code == codes::kUnprovable;
  const LogLevel level = server_side ? LogLevel::kError : LogLevel::kDebug;
  if (!log_enabled(level)) return;
  log(level, "request failed: " + reply.code + ": " + reply.message,
      {{"client", client_label(client)},
       {"tenant", tenant.name},
       {"request", std::to_string(reply.id)},
       {"code", reply.code}});
}

void CacheService::add_metrics(PrometheusText& out) const {
  const std::vector<const TenantCounters*> tenants = tenant_metrics_.tenants();
  visit_counters(*tenants.front(), [&](std::string_view name, uint64_t, CounterKind kind) {
    const std::string family = "kvtier_tenant_" + std::string(name) + "_total";
    out.family(family, kind, "Per tenant: " + std::string(name) + " (docs/operations.md).");
    for (const TenantCounters* t : tenants) {
      visit_counters(*t, [&](std::string_view n, uint64_t value, CounterKind) {
        if (n == name) out.sample(family, {{"tenant", t->name}}, value);
      });
    }
  });
  out.family("kvtier_tenant_rejected_requests_total", "counter",
             "Per tenant: error replies, by their code (docs/protocol.md).");
  for (const TenantCounters* t : tenants) {
    for (const auto& [code, n] : t->rejections()) {
      out.sample("kvtier_tenant_rejected_requests_total", {{"tenant", t->name}, {"code", code}}, n);
    }
  }
  CacheCounters cache;
  {
    std::lock_guard state(state_mu_);
    cache = cache_.counters();
  }
  visit_counters(cache, [&](std::string_view name, uint64_t value, CounterKind kind) {
    const std::string family =
        "kvtier_cache_" + std::string(name) + (kind == CounterKind::kCounter ? "_total" : "");
    out.family(family, kind, "The host pool's " + std::string(name) + ".");
    out.sample(family, value);
  });
  const std::vector<std::string> down = degraded_tiers();
  out.family("kvtier_tier_down", "gauge",
             "1 for each lower tier (or part of one) that is DOWN (H7); none while all are UP.");
  for (const std::string& tier : down)
    out.sample("kvtier_tier_down", {{"tier", tier}}, uint64_t{1});
}

void CacheService::send(const std::string& client, const Reply& reply) {
  if (!reply.ok) ++counters_["error_replies"];
  account(client, reply);
  if (held_replies_) {
    held_replies_->emplace_back(client, reply);
  } else {
    reply_(client, reply);
  }
}

}  // namespace kvtier::server
