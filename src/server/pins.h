// Pins: the chunks PIN keeps from eviction. A pin belongs to a tenant, not to a client (it
// outlives the connection that made it: an operator pins a system prompt once), names one key
// of that tenant's namespace, and holds one CacheManager load pin on it until UNPIN or until its
// expiry passes. Pinning a key the tenant pinned already moves its expiry (no second pin).
//
// Not thread-safe: the cache service owns it under its state mutex.
#pragma once

#include <cstddef>
#include <map>
#include <utility>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/clock.h"
#include "tenants.h"

namespace kvtier::server {

class Pins {
 public:
  bool contains(TenantId tenant, const ChunkKey& key) const {
    return pins_.contains({tenant, key});
  }
  // Pins `key` for `tenant` until `expires`, or moves the expiry of its pin. True when new (the
  // caller took a CacheManager load pin for it).
  bool pin(TenantId tenant, const ChunkKey& key, TimePoint expires) {
    auto [it, added] = pins_.insert_or_assign({tenant, key}, expires);
    if (added) ++held_[tenant];
    next_expiry_ = std::min(next_expiry_, expires);
    return added;
  }
  // True when `tenant` had pinned `key` (the caller releases its CacheManager load pin).
  bool unpin(TenantId tenant, const ChunkKey& key) {
    auto it = pins_.find({tenant, key});
    if (it == pins_.end()) return false;
    remove(it);
    return true;
  }
  // Removes the pins that expired by `now`; their keys, one per pin.
  std::vector<ChunkKey> take_expired(TimePoint now) {
    std::vector<ChunkKey> out;
    if (now < next_expiry_) return out;
    next_expiry_ = TimePoint::max();
    for (auto it = pins_.begin(); it != pins_.end();) {
      auto next = std::next(it);
      if (it->second <= now) {
        out.push_back(it->first.second);
        remove(it);
      } else {
        next_expiry_ = std::min(next_expiry_, it->second);
      }
      it = next;
    }
    return out;
  }
  std::vector<ChunkKey> take_everything() { return take_expired(TimePoint::max()); }
  size_t held(TenantId tenant) const {
    auto it = held_.find(tenant);
    return it == held_.end() ? 0 : it->second;
  }
  size_t size() const { return pins_.size(); }

 private:
  using Map = std::map<std::pair<TenantId, ChunkKey>, TimePoint>;
  void remove(Map::iterator it) {
    size_t& held = held_[it->first.first];
    if (--held == 0) held_.erase(it->first.first);
    pins_.erase(it);
  }

  Map pins_;
  std::map<TenantId, size_t> held_;
  TimePoint next_expiry_ = TimePoint::max();  // no pin expires before it
};

}  // namespace kvtier::server
