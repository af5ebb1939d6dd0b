#include "kvtier/cache/cache_manager.h"

#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>

namespace kvtier {

CacheManager::CacheManager(size_t num_slots, size_t slot_bytes,
                           std::unique_ptr<EvictionPolicy> policy)
    : num_slots_(num_slots), slot_bytes_(slot_bytes), policy_(std::move(policy)) {
  if (num_slots == 0) throw std::invalid_argument("CacheManager: num_slots must be > 0");
  if (num_slots > std::numeric_limits<SlotId>::max()) {
    throw std::invalid_argument("CacheManager: num_slots " + std::to_string(num_slots) +
                                " does not fit a SlotId");
  }
  if (slot_bytes == 0) throw std::invalid_argument("CacheManager: slot_bytes must be > 0");
  if (!policy_) throw std::invalid_argument("CacheManager: eviction policy is null");
  free_slots_.reserve(num_slots);
  for (size_t s = num_slots; s > 0; --s) free_slots_.push_back(static_cast<SlotId>(s - 1));
}

CacheManager::~CacheManager() = default;

LookupState CacheManager::state(const ChunkKey& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) return LookupState::kMiss;
  return it->second.state == KeyState::kReady ? LookupState::kHit : LookupState::kPending;
}

std::optional<SlotId> CacheManager::slot_of(const ChunkKey& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return it->second.slot;
}

std::optional<SlotId> CacheManager::ready_slot(const ChunkKey& key) const {
  auto it = index_.find(key);
  if (it == index_.end() || it->second.state != KeyState::kReady) return std::nullopt;
  return it->second.slot;
}

LookupResult CacheManager::peek(std::span<const ChunkKey> keys) const {
  LookupResult result;
  while (result.hit_chunks < keys.size()) {
    const LookupState s = state(keys[result.hit_chunks]);
    if (s != LookupState::kHit) {
      result.pending = s == LookupState::kPending;
      break;
    }
    ++result.hit_chunks;
  }
  return result;
}

LookupResult CacheManager::lookup(std::span<const ChunkKey> keys) {
  const LookupResult result = peek(keys);
  if (result.hit_chunks < keys.size()) ++(result.pending ? stats_.pending_lookups : stats_.misses);
  stats_.hits += result.hit_chunks;
  return result;
}

bool CacheManager::evictable(const ChunkKey& key) const {
  auto it = index_.find(key);
  return it != index_.end() && it->second.state == KeyState::kReady && it->second.pins == 0 &&
         !it->second.quarantined;
}

void CacheManager::drop_ready(const ChunkKey& key) {
  auto it = index_.find(key);
  uncharge(it->second);
  free_slots_.push_back(it->second.slot);
  index_.erase(it);
}

std::optional<StorePlan> CacheManager::prepare_store(std::span<const ChunkKey> keys) {
  auto plan = prepare_store_for(kDefaultOwner, keys);
  if (!plan) return std::nullopt;
  return std::move(*plan);
}

void CacheManager::set_quota(OwnerId owner, OwnerQuota quota) {
  quotas_[owner] = quota;
}

size_t CacheManager::slots_owned(OwnerId owner) const {
  auto it = owned_.find(owner);
  return it == owned_.end() ? 0 : it->second;
}

void CacheManager::uncharge(const Entry& entry) {
  auto it = owned_.find(entry.owner);
  if (--it->second == 0) owned_.erase(it);
}

std::vector<ChunkKey> CacheManager::choose_victims_for(OwnerId owner, size_t n,
                                                       const EvictablePredicate& keep) const {
  // How many chunks each owner may still lose to this store: all of the storing owner's,
  // another's down to its guaranteed share.
  const auto spare = [&](OwnerId o) -> size_t {
    if (o == owner) return std::numeric_limits<size_t>::max();
    auto q = quotas_.find(o);
    const size_t guaranteed = q == quotas_.end() ? 0 : q->second.guaranteed_slots;
    const size_t held = slots_owned(o);
    return held > guaranteed ? held - guaranteed : 0;
  };
  // The policy is asked for victims among the chunks of owners with a spare. When its choice
  // takes more of one owner than that owner can spare, the owner is capped: from then on only
  // the first of its chunks chosen, as many as it can spare, are candidates, and the policy is
  // asked again. Each round caps at least one more owner, so there are at most as many rounds
  // as owners, plus one. (Holding back one chunk a round instead took a round per chunk of an
  // owner with little to spare, each a scan from the policy's end: quadratic, with the cache's
  // lock held.)
  std::unordered_map<OwnerId, std::unordered_set<ChunkKey, ChunkKeyHash>> capped;
  for (;;) {
    std::vector<ChunkKey> victims = policy_->choose_victims(n, [&](const ChunkKey& k) {
      auto it = index_.find(k);
      if (it == index_.end() || it->second.state != KeyState::kReady || it->second.pins != 0 ||
          it->second.quarantined || keep(k) || spare(it->second.owner) == 0) {
        return false;
      }
      auto cap = capped.find(it->second.owner);
      return cap == capped.end() || cap->second.contains(k);
    });
    std::unordered_map<OwnerId, std::vector<ChunkKey>> chosen;
    for (const ChunkKey& k : victims) chosen[index_.at(k).owner].push_back(k);
    bool surplus = false;
    for (const auto& [o, keys] : chosen) {
      const size_t allowed = spare(o);
      if (keys.size() <= allowed) continue;
      capped[o] = {keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(allowed)};
      surplus = true;
    }
    if (!surplus) return victims;
  }
}

std::expected<StorePlan, StoreRefusal> CacheManager::prepare_store_for(
    OwnerId owner, std::span<const ChunkKey> keys) {
  const std::unordered_set<ChunkKey, ChunkKeyHash> inputs(keys.begin(), keys.end());
  StorePlan plan;
  std::unordered_set<ChunkKey, ChunkKeyHash> planned;
  for (const ChunkKey& key : keys) {
    if (!index_.contains(key) && planned.insert(key).second) plan.keys.push_back(key);
  }
  const auto refuse = [&](StoreRefusal why) {
    ++stats_.stores_rejected;
    return std::unexpected(why);
  };
  // A store never evicts its own inputs: that would make room by dropping what it writes.
  const auto input = [&](const ChunkKey& k) { return inputs.contains(k); };
  // Past the owner's max_slots: its own chunks make the room first.
  auto quota = quotas_.find(owner);
  const size_t max_slots =
      quota == quotas_.end() ? std::numeric_limits<size_t>::max() : quota->second.max_slots;
  if (plan.keys.size() > max_slots) return refuse(StoreRefusal::kOverQuota);
  const size_t held = slots_owned(owner);
  if (held > max_slots - plan.keys.size()) {
    const size_t excess = held - (max_slots - plan.keys.size());
    plan.evicted = policy_->choose_victims(excess, [&](const ChunkKey& k) {
      return evictable(k) && !input(k) && index_.at(k).owner == owner;
    });
    if (plan.evicted.size() < excess) return refuse(StoreRefusal::kOverQuota);
  }
  if (plan.keys.size() > free_slots_.size() + plan.evicted.size()) {
    const std::unordered_set<ChunkKey, ChunkKeyHash> chosen(plan.evicted.begin(),
                                                            plan.evicted.end());
    const size_t more = plan.keys.size() - free_slots_.size() - plan.evicted.size();
    std::vector<ChunkKey> victims = choose_victims_for(
        owner, more, [&](const ChunkKey& k) { return input(k) || chosen.contains(k); });
    if (victims.size() < more) return refuse(StoreRefusal::kNoRoom);
    plan.evicted.insert(plan.evicted.end(), victims.begin(), victims.end());
  }
  // Past this point nothing can fail: the plan is committed whole.
  for (const ChunkKey& key : plan.evicted) {
    plan.evicted_slots.push_back(index_.at(key).slot);
    policy_->evict(key);
    drop_ready(key);
  }
  stats_.evictions += plan.evicted.size();
  if (!plan.evicted.empty()) emit({CacheEventKind::kRemoved, plan.evicted});
  plan.slots.reserve(plan.keys.size());
  for (const ChunkKey& key : plan.keys) {
    const SlotId slot = free_slots_.back();
    free_slots_.pop_back();
    index_.emplace(key, Entry{.slot = slot, .state = KeyState::kPending, .owner = owner});
    plan.slots.push_back(slot);
  }
  if (!plan.keys.empty()) owned_[owner] += plan.keys.size();
  num_pending_ += plan.keys.size();
  return plan;
}

void CacheManager::complete_store(std::span<const ChunkKey> keys, Verdict verdict) {
  std::vector<ChunkKey> stored;
  for (const ChunkKey& key : keys) {
    auto it = index_.find(key);
    // Only this store's pending keys change; a ready key belongs to an earlier store (F3).
    if (it == index_.end() || it->second.state != KeyState::kPending) continue;
    --num_pending_;
    if (verdict == Verdict::kSucceeded) {
      it->second.state = KeyState::kReady;
      policy_->insert(key);
      stored.push_back(key);
    } else {
      // F3: a failed store is never published; its slot is free again.
      uncharge(it->second);
      free_slots_.push_back(it->second.slot);
      index_.erase(it);
      ++stats_.stores_failed;
    }
  }
  stats_.stores_succeeded += stored.size();
  if (!stored.empty()) emit({CacheEventKind::kStored, std::move(stored)});
}

Result<std::vector<SlotId>> CacheManager::prepare_load(std::span<const ChunkKey> keys) {
  for (const ChunkKey& key : keys) {
    const LookupState s = state(key);
    if (s != LookupState::kHit) {
      return make_error(ErrorCode::kNotFound,
                        "prepare_load: key " + key.hex() + " is " +
                            (s == LookupState::kPending ? "pending" : "not cached"));
    }
  }
  std::vector<SlotId> slots;
  slots.reserve(keys.size());
  for (const ChunkKey& key : keys) {
    Entry& e = index_.at(key);
    if (e.pins++ == 0 && !e.quarantined) ++num_pinned_;
    slots.push_back(e.slot);
  }
  stats_.loads += keys.size();
  return slots;
}

void CacheManager::complete_load(std::span<const ChunkKey> keys) {
  std::unordered_map<ChunkKey, uint32_t, ChunkKeyHash> unpins;
  for (const ChunkKey& key : keys) {
    auto it = index_.find(key);
    if (it == index_.end() || it->second.state != KeyState::kReady ||
        it->second.pins < ++unpins[key]) {
      throw std::logic_error("complete_load: key " + key.hex() +
                             " is not pinned by as many loads as it is completed for");
    }
  }
  for (const auto& [key, n] : unpins) {
    Entry& e = index_.at(key);
    e.pins -= n;
    if (e.pins == 0 && !e.quarantined) --num_pinned_;
  }
}

void CacheManager::touch(std::span<const ChunkKey> keys) {
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) policy_->touch(*it);
}

size_t CacheManager::reset() {
  std::vector<ChunkKey> removed;
  for (const auto& [key, e] : index_) {
    if (evictable(key)) removed.push_back(key);
  }
  for (const ChunkKey& key : removed) {
    policy_->remove(key);
    drop_ready(key);
  }
  if (!removed.empty()) emit({CacheEventKind::kRemoved, removed});
  return removed.size();
}

void CacheManager::quarantine_store(std::span<const ChunkKey> keys) {
  for (const ChunkKey& key : keys) {
    auto it = index_.find(key);
    if (it == index_.end() || it->second.state != KeyState::kPending) continue;
    // F7: copies into the slot may still run, so the slot is never handed out again; the key is
    // gone so that its possibly torn bytes are never read.
    quarantined_slots_.push_back(it->second.slot);
    uncharge(it->second);
    index_.erase(it);
    --num_pending_;
    ++stats_.stores_quarantined;
  }
}

void CacheManager::quarantine_load(std::span<const ChunkKey> keys) {
  for (const ChunkKey& key : keys) {
    auto it = index_.find(key);
    if (it == index_.end() || it->second.state != KeyState::kReady) continue;
    Entry& e = it->second;
    if (!e.quarantined) {
      // F7: copies from the slot may still run; the quarantine holds the lease forever.
      if (e.pins > 0) --num_pinned_;
      e.quarantined = true;
      policy_->remove(key);
      ++num_quarantined_ready_;
      ++stats_.loads_quarantined;
    }
    if (e.pins > 0) --e.pins;  // the load's pin now belongs to the quarantine
  }
}

CacheCounters CacheManager::counters() const {
  CacheCounters c = stats_;
  c.slots_free = free_slots_.size();
  c.slots_pending = num_pending_;
  c.slots_quarantined = quarantined_slots_.size() + num_quarantined_ready_;
  c.slots_ready = index_.size() - num_pending_ - num_quarantined_ready_;
  c.slots_pinned = num_pinned_;
  c.quarantined_bytes = uint64_t{c.slots_quarantined} * slot_bytes_;
  return c;
}

void CacheManager::publish_events(KvEventPublisher* publisher, std::string medium,
                                  uint32_t block_size) {
  publisher_ = publisher;
  medium_ = std::move(medium);
  block_size_ = block_size;
}

void CacheManager::set_event_listener(std::function<void(const CacheEvent&)> listener) {
  listener_ = std::move(listener);
}

// The one place the ready keys' changes are reported: to the publisher, the listener and
// take_events().
void CacheManager::emit(CacheEvent event) {
  if (publisher_) {
    if (event.kind == CacheEventKind::kStored) {
      publisher_->stored(medium_, event.keys, block_size_);
    } else {
      publisher_->removed(medium_, event.keys);
    }
  }
  if (listener_) listener_(event);
  waiting_event_keys_ += event.keys.size();
  events_.push_back(std::move(event));
  while (waiting_event_keys_ > max_waiting_event_keys() && events_.size() > 1) {
    waiting_event_keys_ -= events_.front().keys.size();
    events_.pop_front();
    ++stats_.events_dropped;
  }
}

std::vector<CacheEvent> CacheManager::take_events() {
  std::vector<CacheEvent> events(std::make_move_iterator(events_.begin()),
                                 std::make_move_iterator(events_.end()));
  events_.clear();
  waiting_event_keys_ = 0;
  return events;
}

}  // namespace kvtier
