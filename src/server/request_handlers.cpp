// kvtierd's request handlers. Each runs on the cache service thread and sends exactly one
// reply, or (STORE, RETRIEVE) submits a transfer whose reply finish() sends (F11). A handler
// may raise only before it changes cache state; CacheService::handle() turns that into an
// "internal" error reply.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "cache_service.h"
#include "kvtier/core/log.h"

namespace kvtier::server {
namespace {

std::string_view code_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNotFound:
      return codes::kNotFound;
    case ErrorCode::kResourceExhausted:
      return codes::kResourceExhausted;
    case ErrorCode::kInvalidArgument:
      return codes::kInvalidArgument;
    case ErrorCode::kFailedPrecondition:  // only SharedKvMapping::open: unsealed memory
      return codes::kUnsealedMemory;
    case ErrorCode::kPermissionDenied:  // only SharedKvMapping::open: another user's memory
      return codes::kPermissionDenied;
    default:
      return codes::kInternal;
  }
}

}  // namespace

void CacheService::dispatch(const Envelope& e) {
  const std::string& client = e.client;
  const Request& r = e.request;
  ++counters_[std::string("op_") + std::string(to_string(r.op))];
  if (r.hook == TestHook::kThrow) throw std::runtime_error("test hook 'throw'");
  if (r.hook == TestHook::kStall) {  // a slow handler: the socket loop must keep serving meanwhile
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  if (r.hook == TestHook::kNoReply) {  // deliberately breaks F11, to test client deadlines
    ++counters_["swallowed"];
    return;
  }
  const bool new_work = r.op == Op::kRegister || r.op == Op::kLookup || r.op == Op::kStore ||
                        r.op == Op::kRetrieve || r.op == Op::kPin;
  if (draining_ && new_work) {
    error(client, r.id, codes::kShuttingDown, "kvtierd is shutting down");
    return;
  }
  switch (r.op) {
    case Op::kRegister:
      return handle_register(client, e.tenant, e.client_uid, r);
    case Op::kUnregister:
      return handle_unregister(client, r);
    case Op::kLookup:
      return handle_lookup(client, e.tenant, r);
    case Op::kStore:
    case Op::kRetrieve:
      return handle_transfer(client, r);
    case Op::kRelease:
      return handle_release(client, r);
    case Op::kPin:
      return handle_pin(client, e.tenant, r);
    case Op::kUnpin:
      return handle_unpin(client, e.tenant, r);
    case Op::kStats:
      return handle_stats(client, e.tenant, r);
    case Op::kShutdown:
      // Tenants share the server: none of them may stop it for the others (the operator's
      // SIGTERM does).
      if (tenants_.curve()) {
        error(client, r.id, codes::kPermissionDenied,
              "SHUTDOWN is refused where tenants share kvtierd (server.tenants_file): stop it "
              "with SIGTERM");
        return;
      }
      ok(client, r.id);
      draining_ = true;
      return;
    case Op::kPing:  // answered by the socket loop; kept here for completeness
      ok(client, r.id, {{"boot_id", boot_id_}});
      return;
  }
}

CacheService::Session* CacheService::session_of(const std::string& client, uint64_t id) {
  auto it = sessions_.find(client);
  if (it == sessions_.end() || it->second.gone) {
    error(client, id, codes::kNotRegistered, "REGISTER first");
    return nullptr;
  }
  return &it->second;
}

void CacheService::handle_register(const std::string& client, TenantId tenant, uid_t client_uid,
                                   const Request& r) {
  if (auto it = sessions_.find(client); it != sessions_.end() && !it->second.gone) {
    // The same registration again: the client's first REGISTER went past its deadline and it
    // asked again. It gets what the first reply said (idempotent); another one is refused.
    const Session& s = it->second;
    if (s.rank != r.rank || s.layout.fingerprint() != r.layout.fingerprint() ||
        s.memory_pid != r.memory.pid || s.memory_fd != r.memory.fd ||
        s.memory_bytes != r.memory.bytes || !r.memory.shm_name.empty()) {
      error(client, r.id, codes::kAlreadyRegistered,
            "this client is registered already, with other rank, layout or memory");
      return;
    }
    reply_registered(client, r.id);
    return;
  }
  if (sessions_.contains(client)) {
    error(client, r.id, codes::kBusy, "the previous session still has transfers in flight");
    return;
  }
  // Each session holds a mapping and copy threads here: a tenant's are bounded (a gone one
  // counts until its transfers ended and it is dropped).
  const TenantLimits& limits = tenants_[tenant].limits;
  const auto sessions = std::ranges::count_if(
      sessions_, [&](const auto& entry) { return entry.second.tenant == tenant; });
  if (static_cast<uint64_t>(sessions) >= limits.max_sessions) {
    send(client,
         quota_exceeded(r.id, "the tenant has max_sessions (" +
                                  std::to_string(limits.max_sessions) + ") clients registered"));
    return;
  }
  if (Status st = r.layout.validate(); !st) {  // byte sizes overflow-checked
    error(client, r.id, codes::kInvalidArgument, "layout: " + st.error().message);
    return;
  }
  if (r.layout.max_chunk_bytes() > pool_.slot_bytes()) {
    error(client, r.id, codes::kInvalidArgument,
          "chunk of " + std::to_string(r.layout.max_chunk_bytes()) +
              " bytes exceeds the server's slot of " + std::to_string(pool_.slot_bytes()) +
              " bytes");
    return;
  }
  auto memory = SharedKvMapping::open(host_, r.memory, r.layout, client_uid);
  if (!memory) {
    error(client, r.id, code_for(memory.error().code), "memory: " + memory.error().message);
    return;
  }
  const HostSlots slots{pool_.slot_address(0), pool_.slot_bytes(),
                        static_cast<uint32_t>(pool_.num_slots())};
  try {
    validate_addresses(r.layout, (*memory)->addresses(), slots);
  } catch (const std::invalid_argument& e) {
    error(client, r.id, codes::kInvalidArgument, e.what());
    return;
  }
  Session session;
  session.tenant = tenant;
  session.rank = r.rank;
  session.layout = r.layout;
  session.memory_pid = r.memory.pid;
  session.memory_fd = r.memory.fd;
  session.memory_bytes = r.memory.bytes;
  session.memory = std::move(*memory);
  session.compute = device_.create_stream();
  session.engine = std::make_unique<TransferEngine>(device_, r.layout, session.memory->addresses(),
                                                    slots, session.compute, transfer_options_);
  sessions_.emplace(client, std::move(session));
  {
    std::lock_guard state(state_mu_);
    registered_.insert(client);
  }
  log_info("client registered", {{"client", client_label(client)},
                                 {"tenant", tenant_of(client).name},
                                 {"rank", std::to_string(r.rank)}});
  reply_registered(client, r.id);
}

void CacheService::reply_registered(const std::string& client, uint64_t id) {
  ok(client, id,
     {{"boot_id", boot_id_},
      {"slot_bytes", pool_.slot_bytes()},
      {"max_batch", kMaxBatchRequests},
      {"max_frame_bytes", options_.config.server.max_frame_bytes}});
}

void CacheService::handle_unregister(const std::string& client, const Request& r) {
  Session* s = session_of(client, r.id);
  if (!s) return;
  if (!s->pending.empty()) {
    error(client, r.id, codes::kBusy, "transfers in flight");
    return;
  }
  {
    std::lock_guard state(state_mu_);
    release_locks(locks_.take_all_of(client));
    registered_.erase(client);
  }
  destroy_session(*s);
  sessions_.erase(client);
  log_info("client unregistered",
           {{"client", client_label(client)}, {"tenant", tenant_of(client).name}});
  ok(client, r.id);
}

Reply LookupAnswer::reply(uint64_t id) const {
  if (error) return *error;
  Reply r;
  r.id = id;
  r.fields = {{"hits", hits}, {"pending", pending ? 1u : 0u}, {"lock", lock}};
  return r;
}

void CacheService::handle_lookup(const std::string& client, TenantId tenant, const Request& r) {
  LookupAnswer answer;
  {
    std::lock_guard state(state_mu_);
    answer = lookup_locked(client, tenant, LookupQuery::of(r));
  }
  // Read-through, after the hits are locked (a prefetch's slots are never taken from them):
  // keys a lower tier holds become pending, never hits, until poll_tiers() publishes them. Their
  // slots are charged to the asking tenant, within its quotas, as its STOREs' are. The tiers are
  // asked without state_mu_ (that waits); meanwhile only LOOKUPs run on the socket loop, which
  // neither store nor evict, so their answer still holds when the prefetch starts.
  if (!answer.error && mover_ && !answer.pending && answer.hits < r.keys.size()) {
    const size_t lower = mover_->read_through_lower(r.keys, answer.hits);
    std::lock_guard state(state_mu_);
    answer.pending = mover_->read_through_start(r.keys, answer.hits, lower, tenant);
  }
  send(client, answer.reply(r.id));
}

std::optional<LookupAnswer> CacheService::lookup_now(const std::string& client, TenantId tenant,
                                                     const LookupQuery& query) {
  try {
    std::lock_guard state(state_mu_);
    if (mover_ && !draining_ && is_registered_locked(client)) {
      const LookupResult found = cache_.peek(query.keys);
      if (!found.pending && found.hit_chunks < query.keys.size()) return std::nullopt;  // tiers
    }
    ++fast_lookups_;
    LookupAnswer answer = lookup_locked(client, tenant, query);
    if (answer.error) ++fast_errors_;
    return answer;
  } catch (const std::exception& e) {
    // F11, as CacheService::handle: one "internal" reply; lookup_locked raises only before it
    // changed state.
    ++fast_raised_;
    ++fast_errors_;
    return LookupAnswer{.error = Reply::error(query.id, codes::kInternal,
                                              std::string("handler raised: ") + e.what())};
  }
}

Reply CacheService::quota_exceeded(uint64_t id, const std::string& what) {
  ++quota_rejections_;
  return Reply::error(id, codes::kQuotaExceeded, what);
}

LookupAnswer CacheService::lookup_locked(const std::string& client, TenantId tenant,
                                         const LookupQuery& query) {
  const auto fail = [&](std::string_view code, std::string_view message) {
    return LookupAnswer{.error = Reply::error(query.id, code, message)};
  };
  if (draining_) return fail(codes::kShuttingDown, "kvtierd is shutting down");
  if (!is_registered_locked(client)) return fail(codes::kNotRegistered, "REGISTER first");
  LookupResult found = cache_.lookup(query.keys);
  uint64_t lock_id = 0;
  if (query.lock_ms > 0 && found.hit_chunks > 0) {
    const size_t limit = options_.config.server.max_locks;
    if (locks_.keys_held(client) + found.hit_chunks > limit) {
      return fail(codes::kLimitExceeded,
                  "read locks would exceed server.max_locks (" + std::to_string(limit) + " keys)");
    }
    const uint64_t tenant_limit = tenants_[tenant].limits.max_locks;
    if (locks_.keys_held_by(tenant) + found.hit_chunks > tenant_limit) {
      return LookupAnswer{
          .error = quota_exceeded(query.id, "read locks would exceed the tenant's max_locks (" +
                                                std::to_string(tenant_limit) + " keys)")};
    }
    std::vector<ChunkKey> keys(query.keys.begin(), query.keys.begin() + found.hit_chunks);
    auto pinned = cache_.prepare_load(keys);
    if (!pinned) throw std::logic_error("lookup hits not loadable: " + pinned.error().message);
    // Capped in the client's uint64 milliseconds before any conversion: a huge lock_ms ends at
    // server.lock_ttl_s, never wraps to a negative (already expired) duration.
    const Duration max_ttl = seconds_to_duration(options_.config.server.lock_ttl_s);
    const auto max_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(max_ttl).count());
    const Duration ttl =
        query.lock_ms >= max_ms
            ? max_ttl
            : Duration(std::chrono::milliseconds(static_cast<int64_t>(query.lock_ms)));
    lock_id = locks_.add(ReadLock{.client = client,
                                  .keys = std::move(keys),
                                  .expires = SteadyClock::instance().now() + ttl,
                                  .tenant = tenant});
  }
  TenantCounters& counters = counters_of(tenant);
  ++counters.lookups;
  counters.hit_chunks += found.hit_chunks;
  counters.missed_chunks += query.keys.size() - found.hit_chunks;
  return LookupAnswer{.hits = found.hit_chunks, .pending = found.pending, .lock = lock_id};
}

Status CacheService::check_chunks(const Session& s, const Request& r) const {
  if (r.group >= s.layout.groups.size()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "group " + std::to_string(r.group) + " is not in the registered layout");
  }
  const uint32_t per_chunk = s.layout.groups[r.group].blocks_per_chunk;
  const uint32_t num_blocks = s.memory->addresses().groups[r.group].num_blocks;
  const uint64_t copies =
      uint64_t{r.blocks.size()} * s.layout.tensors_per_group(r.group) * per_chunk;
  if (copies > kMaxCopiesPerTransfer) {
    return make_error(ErrorCode::kInvalidArgument,
                      std::to_string(r.blocks.size()) + " chunks of " +
                          std::to_string(s.layout.tensors_per_group(r.group)) + " tensors x " +
                          std::to_string(per_chunk) + " blocks are " + std::to_string(copies) +
                          " copies, more than " + std::to_string(kMaxCopiesPerTransfer) +
                          " in one transfer: split it");
  }
  for (size_t i = 0; i < r.blocks.size(); ++i) {
    if (r.blocks[i].size() != per_chunk) {
      return make_error(ErrorCode::kInvalidArgument, "chunk " + std::to_string(i) + " lists " +
                                                         std::to_string(r.blocks[i].size()) +
                                                         " blocks, the layout needs " +
                                                         std::to_string(per_chunk));
    }
    for (uint32_t b : r.blocks[i]) {
      if (b >= num_blocks) {
        return make_error(ErrorCode::kInvalidArgument,
                          "block " + std::to_string(b) + " is out of range (" +
                              std::to_string(num_blocks) + " blocks registered)");
      }
    }
  }
  return {};
}

void CacheService::handle_transfer(const std::string& client, const Request& r) {
  Session* s = session_of(client, r.id);
  if (!s) return;
  if (Status st = check_chunks(*s, r); !st) {
    error(client, r.id, codes::kInvalidArgument, st.error().message);
    return;
  }
  if (s->quarantined) {
    error(client, r.id, codes::kTransferFailed,
          "an earlier transfer of this client was unprovable; it takes no new transfers");
    return;
  }
  const TenantLimits& limits = tenants_[s->tenant].limits;
  const auto t = tenant_transfers_.find(s->tenant);
  if ((t == tenant_transfers_.end() ? 0 : t->second) >= limits.max_transfers) {
    send(client,
         quota_exceeded(r.id, "the tenant has max_transfers (" +
                                  std::to_string(limits.max_transfers) + ") transfers in flight"));
    return;
  }
  std::vector<ChunkTransfer> chunks;
  PendingTransfer pending{.request_id = r.id};
  std::unique_lock state(state_mu_);
  if (r.op == Op::kStore) {
    auto plan = cache_.prepare_store_for(s->tenant, r.keys);
    state.unlock();
    if (!plan && plan.error() == StoreRefusal::kOverQuota) {
      send(client, quota_exceeded(r.id, "the store would exceed the tenant's max_slots (" +
                                            std::to_string(limits.max_slots) +
                                            ") and it has too few chunks it may evict"));
      return;
    }
    if (!plan) {
      error(client, r.id, codes::kResourceExhausted, "no room in the host pool");
      return;
    }
    for (size_t i = 0, p = 0; i < r.keys.size() && p < plan->keys.size(); ++i) {
      if (r.keys[i] != plan->keys[p]) continue;
      chunks.push_back(
          ChunkTransfer{.group = r.group, .blocks = r.blocks[i], .slot = plan->slots[p]});
      ++p;
    }
    // Write-behind under on_evict: the evicted chunks are copied out before this store's
    // copies rewrite their slots (a no-op without tiers or under on_store).
    if (mover_) mover_->demote_evicted(*plan);
    // A chunk smaller than a slot (a layout's smaller group) leaves the rest of its slot as the
    // slot's last chunk had it, perhaps another tenant's: zeroed, so that no RETRIEVE of a
    // larger group, and no tier the slot is written to, reads what this tenant never stored.
    const size_t chunk_bytes = s->layout.groups[r.group].chunk_bytes();
    if (chunk_bytes < pool_.slot_bytes()) {
      for (const ChunkTransfer& c : chunks) {
        std::memset(pool_.slot_ptr(c.slot) + chunk_bytes, 0, pool_.slot_bytes() - chunk_bytes);
      }
    }
    tenant_of(client).evicted_chunks += plan->evicted.size();
    pending.direction = Direction::kStore;
    pending.keys = plan->keys;
    pending.already_present = r.keys.size() - plan->keys.size();
  } else {
    auto slots = cache_.prepare_load(r.keys);
    if (!slots) {
      state.unlock();
      error(client, r.id, codes::kNotFound, slots.error().message);
      return;
    }
    for (size_t i = 0; i < r.keys.size(); ++i) {
      chunks.push_back(ChunkTransfer{.group = r.group, .blocks = r.blocks[i], .slot = (*slots)[i]});
    }
    pending.direction = Direction::kLoad;
    pending.keys = r.keys;
    if (r.lock != 0) {
      if (auto lock = locks_.take(r.lock, client)) release_locks({std::move(*lock)});
    }
    state.unlock();
  }
  if (chunks.empty()) {  // every key was present already
    ok(client, r.id, {{"chunks", 0}, {"bytes", 0}, {"already_present", pending.already_present}});
    return;
  }
  const Direction direction = pending.direction;  // read before `pending` is moved from
  submit(client, *s, r, direction, std::move(chunks), std::move(pending));
}

void CacheService::submit(const std::string& client, Session& s, const Request& r,
                          Direction direction, std::vector<ChunkTransfer> chunks,
                          PendingTransfer pending) {
  const JobId job = next_job_++;
  if (r.hook == TestHook::kHangCopies && fault_) {
    // The copies of this transfer hang on the client's memory until the process ends: a
    // transfer held in flight deterministically (tests kill the server meanwhile).
    fault_->set_plan(
        FaultPlan::rules({FaultRule{.call = fault_->counts().copy_calls, .hang = true}}));
  } else if (r.hook == TestHook::kFailPartway && fault_) {
    // A device fault after the first descriptor was enqueued, and that copy hangs: the engine
    // cannot show the copies stopped, so the reply must wait for its decision (Unprovable at
    // the transfer deadline), never come at once as a plain failure (F11, F5).
    fault_->set_plan(FaultPlan::rules(
        {FaultRule{.call = fault_->counts().copy_calls, .fail_at = 1, .hang = true}}));
  } else if (r.hook == TestHook::kFailCopies && fault_) {  // a device fault before any copy: Failed
    fault_->set_plan(
        FaultPlan::rules({FaultRule{.call = fault_->counts().copy_calls, .fail_at = 0}}));
  }
  s.pending.emplace(job, std::move(pending));
  ++tenant_transfers_[s.tenant];
  try {
    s.engine->submit(job, direction, chunks);
  } catch (const std::exception& e) {
    // Not a device fault (F2): the engine's state is unspecified, so nothing can be proven
    // about copies it may have enqueued. Answer "unprovable" and retain the memory (F7).
    fail_session(client, s, std::string("transfer engine raised at submit: ") + e.what());
  }
}

void CacheService::handle_release(const std::string& client, const Request& r) {
  std::unique_lock state(state_mu_);
  auto lock = locks_.take(r.lock, client);
  if (!lock) {
    state.unlock();
    error(client, r.id, codes::kNotFound, "no lock " + std::to_string(r.lock) + " held");
    return;
  }
  release_locks({std::move(*lock)});
  state.unlock();
  ok(client, r.id);
}

void CacheService::handle_pin(const std::string& client, TenantId tenant, const Request& r) {
  // ttl_ms is client input: checked against the configured bound before any conversion (a
  // huge one is refused, never wrapped; config.cpp bounds max_pin_ttl_s to a year).
  const double max_ms = options_.config.server.max_pin_ttl_s * 1000.0;
  if (r.ttl_ms == 0 || static_cast<double>(r.ttl_ms) > max_ms) {
    error(client, r.id, codes::kInvalidArgument,
          "ttl_ms must be 1 to " + std::to_string(static_cast<uint64_t>(max_ms)) +
              " (server.max_pin_ttl_s), got " + std::to_string(r.ttl_ms));
    return;
  }
  const TimePoint expires = SteadyClock::instance().now() +
                            Duration(std::chrono::milliseconds(static_cast<int64_t>(r.ttl_ms)));
  std::vector<ChunkKey> keys = r.keys;
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::unique_lock state(state_mu_);
  std::vector<ChunkKey> fresh;  // not pinned by this tenant yet
  for (const ChunkKey& k : keys) {
    if (!pins_.contains(tenant, k)) fresh.push_back(k);
  }
  const uint64_t limit = tenants_[tenant].limits.max_pins;
  if (pins_.held(tenant) + fresh.size() > limit) {
    state.unlock();
    send(client, quota_exceeded(r.id, "pins would exceed the tenant's max_pins (" +
                                          std::to_string(limit) + " keys)"));
    return;
  }
  // All or nothing: every key must be ready (stored and not evicted).
  if (auto pinned = cache_.prepare_load(fresh); !pinned) {
    state.unlock();
    error(client, r.id, codes::kNotFound, pinned.error().message);
    return;
  }
  for (const ChunkKey& k : keys) pins_.pin(tenant, k, expires);
  const uint64_t held = pins_.held(tenant);
  state.unlock();
  ok(client, r.id, {{"pinned", keys.size()}, {"tenant_pinned_keys", held}});
}

void CacheService::handle_unpin(const std::string& client, TenantId tenant, const Request& r) {
  std::vector<ChunkKey> keys = r.keys;
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::unique_lock state(state_mu_);
  std::vector<ChunkKey> unpinned;
  for (const ChunkKey& k : keys) {
    if (pins_.unpin(tenant, k)) unpinned.push_back(k);
  }
  release_pins(unpinned);
  const uint64_t held = pins_.held(tenant);
  state.unlock();
  ok(client, r.id, {{"unpinned", unpinned.size()}, {"tenant_pinned_keys", held}});
}

void CacheService::handle_stats(const std::string& client, TenantId tenant, const Request& r) {
  std::map<std::string, uint64_t> f = counters_;
  f["boot_id"] = boot_id_;
  f["clients"] = sessions_.size();
  f["transfers_in_flight"] = transfers_in_flight();
  std::unique_lock state(state_mu_);
  // LOOKUPs the socket loop answered itself (lookup_now) count like the service's own.
  f["lookups_fast"] = fast_lookups_.load();
  if (f["lookups_fast"] > 0) f["op_LOOKUP"] += f["lookups_fast"];
  f["error_replies"] += fast_errors_.load();
  f["handler_errors"] += fast_raised_.load();
  f["locks"] = locks_.size();
  add_stats(f, "", cache_.counters());
  f["requests"] = loop_.requests.load();
  f["pings"] = loop_.pings.load();
  f["rejected_frames"] = loop_.rejected_frames.load();
  f["limit_rejections"] = loop_.limit_rejections.load();
  f["clients_reaped"] = loop_.clients_reaped.load();
  f["batch_frames"] = loop_.batch_frames.load();
  f["injected_hangs"] = fault_ ? fault_->counts().hangs : 0;
  f["cache_audit_ok"] = cache_.audit().has_value() ? 1 : 0;
  // The asking client's own share, for a client that audits its bookkeeping against kvtierd's.
  f["client_locked_keys"] = locks_.keys_held(client);
  // Tenants: the asking client's tenant's share (docs/protocol.md, "Tenants").
  f["pins"] = pins_.size();
  f["tenant_pinned_keys"] = pins_.held(tenant);
  f["tenant_locked_keys"] = locks_.keys_held_by(tenant);
  f["tenant_slots"] = cache_.slots_owned(tenant);
  state.unlock();
  const auto transfers = tenant_transfers_.find(tenant);
  f["tenant_transfers_in_flight"] = transfers == tenant_transfers_.end() ? 0 : transfers->second;
  f["quota_rejections"] = quota_rejections_.load();
  f["auth_refused"] = loop_.auth_refused.load();
  const auto session = sessions_.find(client);
  f["client_transfers_in_flight"] = session == sessions_.end() ? 0 : session->second.pending.size();
  add_tier_stats(f);
  // Per tenant "tenant.<name>.<counter>" and "tenant.<name>.rejected.<code>" (error replies).
  for (const TenantCounters* t : tenant_metrics_.tenants()) {
    add_stats(f, "tenant." + t->name + ".", *t);
    for (const auto& [code, n] : t->rejections()) f["tenant." + t->name + ".rejected." + code] = n;
  }
  ok(client, r.id, f);
}

}  // namespace kvtier::server
