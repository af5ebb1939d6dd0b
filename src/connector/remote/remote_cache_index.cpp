#include "kvtier/connector/remote_cache_index.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace kvtier {
namespace {

bool ready(const std::future<Result<server::LookupReply>>& f) {
  return f.wait_for(Duration::zero()) == std::future_status::ready;
}

}  // namespace

RemoteCacheIndex::RemoteCacheIndex(const Config& config, const KvLayout& layout,
                                   uint32_t world_size)
    : endpoint_(config.server.endpoint),
      world_size_(world_size),
      lookup_wait_(std::min(seconds_to_duration(config.server.request_timeout_s),
                            seconds_to_duration(config.server.heartbeat_interval_s))),
      lock_for_(seconds_to_duration(config.transfer.transfer_deadline_s +
                                    config.transfer.completion_margin_s)),
      request_timeout_(seconds_to_duration(config.server.request_timeout_s)),
      arena_(layout, layout.max_blocks_per_chunk(), "core"),
      // rank = world_size: not a model rank (the server only records it).
      client_(std::make_unique<server::CacheClient>(server::ClientOptions::from_config(config),
                                                    arena_.registration(world_size))) {
  if (world_size == 0) throw std::invalid_argument("RemoteCacheIndex: world_size 0");
  client_->wait_until_ok(seconds_to_duration(config.server.connect_timeout_s));
}

RemoteCacheIndex::~RemoteCacheIndex() = default;

bool RemoteCacheIndex::usable() const {
  return client_->health().state == server::ClientState::kOk &&
         SteadyClock::instance().now() >= backoff_until_;
}

std::vector<RemoteCacheIndex::LookupFuture> RemoteCacheIndex::send_lookups(
    std::span<const ChunkKey> keys, Duration lock_for) {
  std::vector<LookupFuture> replies;
  for (uint32_t r = 0; r < world_size_; ++r) {
    std::vector<ChunkKey> shares;
    shares.reserve(keys.size());
    for (const ChunkKey& k : keys) shares.push_back(rank_key(k, r));
    replies.push_back(client_->lookup(std::move(shares), lock_for));
  }
  return replies;
}

std::optional<std::vector<server::LookupReply>> RemoteCacheIndex::lookup_ranks(
    std::span<const ChunkKey> keys, Duration lock_for) {
  return collect(send_lookups(keys, lock_for), lock_for);
}

std::optional<std::vector<server::LookupReply>> RemoteCacheIndex::collect(
    std::vector<LookupFuture> replies, Duration lock_for) {
  // The scheduler loop waits at most lookup_wait_ (not the client's request timeout): a server
  // that stopped answering must not stall the loop's heartbeats (H6).
  const TimePoint deadline = SteadyClock::instance().now() + lookup_wait_;
  bool timed_out = false;
  for (auto& f : replies) {
    if (f.wait_until(deadline) != std::future_status::ready) {
      timed_out = true;
      break;
    }
  }
  std::vector<server::LookupReply> answers;
  bool failed = timed_out;
  for (auto& f : replies) {
    if (!ready(f)) {
      // A lookup without a lock holds nothing; a lock that arrives late is released (reap).
      if (lock_for > Duration::zero()) late_.push_back(std::move(f));
      continue;
    }
    Result<server::LookupReply> reply = f.get();
    if (!reply) {
      failed = true;  // a miss: the engine recomputes
      continue;
    }
    answers.push_back(*reply);
  }
  if (timed_out) backoff_until_ = SteadyClock::instance().now() + lookup_wait_;
  if (!failed) return answers;
  for (const server::LookupReply& a : answers) {
    if (a.lock != 0) release(a.lock);
  }
  return std::nullopt;
}

void RemoteCacheIndex::lookup_ahead(std::span<const ChunkKey> keys) {
  if (keys.empty() || !usable()) return;
  const TimePoint now = SteadyClock::instance().now();
  std::erase_if(ahead_, [&](const Ahead& a) { return now - a.sent > kLookAheadAge; });
  const bool asked =
      std::ranges::any_of(ahead_, [&](const Ahead& a) { return std::ranges::equal(a.keys, keys); });
  if (asked) return;
  constexpr size_t kMostAhead = 64;  // requests that arrive in one step
  if (ahead_.size() >= kMostAhead) ahead_.erase(ahead_.begin());
  ahead_.push_back(Ahead{.keys = std::vector<ChunkKey>(keys.begin(), keys.end()),
                         .replies = send_lookups(keys, Duration::zero()),
                         .sent = now});
}

LookupResult RemoteCacheIndex::lookup(std::span<const ChunkKey> keys) {
  reap(false);
  if (keys.empty() || !usable()) return {};
  // A LOOKUP sent ahead for these keys, or for keys these are the tail of: `skip` keys before.
  size_t skip = 0;
  auto ahead = std::ranges::find_if(ahead_, [&](const Ahead& a) {
    auto at = std::ranges::find(a.keys, keys.front());
    skip = static_cast<size_t>(at - a.keys.begin());
    return at != a.keys.end() && a.keys.size() - skip == keys.size() &&
           std::ranges::equal(std::span(a.keys).subspan(skip), keys);
  });
  std::optional<std::vector<server::LookupReply>> answers;
  if (ahead != ahead_.end() && SteadyClock::instance().now() - ahead->sent <= kLookAheadAge) {
    std::vector<LookupFuture> replies = std::move(ahead->replies);
    ahead_.erase(ahead);
    answers = collect(std::move(replies), Duration::zero());
    // Its hits count from the first key it asked for; past its first miss it says nothing.
    if (answers && (skip == 0 ||
                    std::ranges::all_of(*answers, [&](const auto& a) { return a.hits > skip; }))) {
      ++answered_ahead_;
      for (auto& a : *answers) a.hits = std::min<uint64_t>(a.hits - skip, keys.size());
    } else if (answers) {
      answers = lookup_ranks(keys, Duration::zero());
    }
  } else {
    if (ahead != ahead_.end()) ahead_.erase(ahead);
    answers = lookup_ranks(keys, Duration::zero());
  }
  if (!answers) return {};
  LookupResult out{.hit_chunks = keys.size()};
  for (const auto& a : *answers) out.hit_chunks = std::min(out.hit_chunks, a.hits);
  for (const auto& a : *answers) {
    out.pending = out.pending || (a.hits == out.hit_chunks && a.pending);
  }
  return out;
}

std::optional<StorePlan> RemoteCacheIndex::prepare_store(std::span<const ChunkKey> keys) {
  if (client_->health().state != server::ClientState::kOk) return std::nullopt;  // H7
  StorePlan plan;
  for (const ChunkKey& k : keys) {
    if (storing_.contains(k)) continue;  // being stored (by this call too, for a repeated key)
    storing_.emplace(k, 1);
    plan.keys.push_back(k);
  }
  plan.slots.assign(plan.keys.size(), SlotId{0});  // kvtierd picks the slots
  return plan;
}

void RemoteCacheIndex::complete_store(std::span<const ChunkKey> keys, Verdict verdict) {
  std::vector<ChunkKey> ended;
  for (const ChunkKey& k : keys) {
    if (storing_.erase(k) != 0) ended.push_back(k);  // keys not being stored: a repeat
  }
  if (verdict == Verdict::kSucceeded && !ended.empty()) {
    events_.push_back(CacheEvent{.kind = CacheEventKind::kStored, .keys = std::move(ended)});
  }
}

void RemoteCacheIndex::quarantine_store(std::span<const ChunkKey> keys) {
  for (const ChunkKey& k : keys) quarantined_stores_ += storing_.erase(k);
}

Result<std::vector<SlotId>> RemoteCacheIndex::prepare_load(std::span<const ChunkKey> keys) {
  reap(false);
  if (!usable()) {
    return make_error(ErrorCode::kUnavailable, "cache server " + endpoint_ + " is not usable now");
  }
  Pin pin{.keys = std::vector<ChunkKey>(keys.begin(), keys.end())};
  if (!keys.empty()) {
    const auto answers = lookup_ranks(keys, lock_for_);
    if (!answers) {
      return make_error(ErrorCode::kUnavailable, "cache server " + endpoint_ + ": LOOKUP failed");
    }
    const bool all_ready = std::ranges::all_of(*answers, [&](const server::LookupReply& a) {
      return a.hits == keys.size() && a.lock != 0;
    });
    if (!all_ready) {
      for (const server::LookupReply& a : *answers) {
        if (a.lock != 0) release(a.lock);
      }
      return make_error(ErrorCode::kNotFound, "a chunk left kvtierd since the lookup");
    }
    for (const server::LookupReply& a : *answers) pin.locks.push_back(a.lock);
  }
  pinned_keys_ += keys.size() * world_size_;
  pins_.push_back(std::move(pin));
  return std::vector<SlotId>(keys.size(), SlotId{0});  // the ranks RETRIEVE by key
}

void RemoteCacheIndex::complete_load(std::span<const ChunkKey> keys) {
  auto it =
      std::ranges::find_if(pins_, [&](const Pin& p) { return std::ranges::equal(p.keys, keys); });
  if (it == pins_.end()) {
    // As CacheManager: a completion without its pin would let kvtierd evict a chunk in use.
    throw std::logic_error("RemoteCacheIndex::complete_load: keys not pinned");
  }
  for (uint64_t lock : it->locks) release(lock);
  pinned_keys_ -= it->keys.size() * world_size_;
  pins_.erase(it);
}

void RemoteCacheIndex::quarantine_load(std::span<const ChunkKey> keys) {
  auto it =
      std::ranges::find_if(pins_, [&](const Pin& p) { return std::ranges::equal(p.keys, keys); });
  if (it == pins_.end()) return;  // as CacheManager: keys not pinned are ignored
  const size_t n = it->keys.size() * world_size_;
  pinned_keys_ -= n;
  quarantined_keys_ += n;  // never released here (F7)
  pins_.erase(it);
}

Status RemoteCacheIndex::reset() {
  return make_error(ErrorCode::kUnimplemented,
                    "kvtierd's chunks are shared by every engine using it; the protocol has no "
                    "operation that drops them");
}

std::vector<CacheEvent> RemoteCacheIndex::take_events() {
  return std::exchange(events_, {});
}

void RemoteCacheIndex::release(uint64_t lock) const {
  releases_.push_back(client_->release(lock, release_hook_));
}

void RemoteCacheIndex::reap(bool wait) const {
  for (auto it = late_.begin(); it != late_.end();) {
    if (!wait && !ready(*it)) {
      ++it;
      continue;
    }
    Result<server::LookupReply> reply = it->get();  // resolves by its deadline (F8)
    if (reply && reply->lock != 0) release(reply->lock);
    it = late_.erase(it);
  }
  std::erase_if(releases_, [&](std::future<Status>& f) {
    if (wait) f.wait();
    return f.wait_for(Duration::zero()) == std::future_status::ready;
  });
}

Status RemoteCacheIndex::audit() const {
  auto fail = [](ErrorCode code, const std::string& what) {
    return make_error(code, "remote cache audit: " + what);
  };
  if (!pins_.empty() || !storing_.empty()) {
    return fail(ErrorCode::kFailedPrecondition,
                std::to_string(pins_.size()) + " loads still pin " + std::to_string(pinned_keys_) +
                    " keys, " + std::to_string(storing_.size()) + " keys still being stored");
  }
  // kvtierd's side, once every RELEASE sent was answered.
  reap(true);
  std::future<Result<server::Reply>> reply = client_->stats();
  if (reply.wait_for(request_timeout_) != std::future_status::ready) {
    return fail(ErrorCode::kUnavailable, "kvtierd sent no STATS");
  }
  const Result<server::Reply> stats = reply.get();
  if (!stats) return fail(ErrorCode::kUnavailable, "kvtierd STATS: " + stats.error().message);
  if (stats->field("cache_audit_ok") != 1) {
    return fail(ErrorCode::kInternal, "kvtierd's cache audit failed");
  }
  // No pin is held now; locks of quarantined loads may still be held until they expire.
  const uint64_t locked = stats->field("client_locked_keys");
  if (locked > quarantined_keys_) {
    return fail(ErrorCode::kInternal,
                "kvtierd holds " + std::to_string(locked) +
                    " read-locked keys for this client, the index pins none (" +
                    std::to_string(quarantined_keys_) + " quarantined)");
  }
  return {};
}

std::optional<std::string> RemoteCacheIndex::degraded() const {
  const server::ClientHealth h = client_->health();
  if (h.state == server::ClientState::kOk) {
    if (h.degraded_tiers.empty()) return std::nullopt;
    std::string names;  // H7: the server answers, a tier below it is DOWN
    for (const std::string& t : h.degraded_tiers) names += (names.empty() ? "" : ", ") + t;
    return "cache server " + endpoint_ + ": tiers down: " + names;
  }
  return "cache server " + endpoint_ + ": " +
         (h.reason.empty() ? std::string(to_string(h.state)) : h.reason);
}

}  // namespace kvtier
