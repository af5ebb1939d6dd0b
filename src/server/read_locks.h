// ReadLocks: LOOKUP read locks. A lock pins the hit keys in the CacheManager (prepare_load) so
// they cannot be evicted before the client retrieves them, and is released by RELEASE, by a
// RETRIEVE naming it, by its expiry, or when its client goes away.
//
// Not thread-safe: the cache service thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/clock.h"
#include "tenants.h"

namespace kvtier::server {

struct ReadLock {
  std::string client;
  std::vector<ChunkKey> keys;  // pinned once each
  TimePoint expires;
  TenantId tenant = kDefaultTenant;  // the client's
};

class ReadLocks {
 public:
  uint64_t add(ReadLock lock) {
    held_[lock.client] += lock.keys.size();
    tenant_held_[lock.tenant] += lock.keys.size();
    locks_.emplace(next_id_, std::move(lock));
    return next_id_++;
  }
  // Removes and returns the lock if `client` holds it.
  std::optional<ReadLock> take(uint64_t id, const std::string& client) {
    auto it = locks_.find(id);
    if (it == locks_.end() || it->second.client != client) return std::nullopt;
    return remove(it);
  }
  // Removes and returns every lock that expired by `now`, or that `client` holds.
  std::vector<ReadLock> take_expired(TimePoint now) {
    return take_if([&](const ReadLock& l) { return l.expires <= now; });
  }
  std::vector<ReadLock> take_all_of(const std::string& client) {
    return take_if([&](const ReadLock& l) { return l.client == client; });
  }
  std::vector<ReadLock> take_everything() {
    return take_if([](const ReadLock&) { return true; });
  }
  size_t keys_held(const std::string& client) const {
    auto it = held_.find(client);
    return it == held_.end() ? 0 : it->second;
  }
  // Keys read-locked by every client of `tenant`.
  size_t keys_held_by(TenantId tenant) const {
    auto it = tenant_held_.find(tenant);
    return it == tenant_held_.end() ? 0 : it->second;
  }
  size_t size() const { return locks_.size(); }

 private:
  using Map = std::map<uint64_t, ReadLock>;
  ReadLock remove(Map::iterator it) {
    ReadLock lock = std::move(it->second);
    locks_.erase(it);
    size_t& held = held_[lock.client];
    held -= lock.keys.size();
    if (held == 0) held_.erase(lock.client);
    size_t& by_tenant = tenant_held_[lock.tenant];
    by_tenant -= lock.keys.size();
    if (by_tenant == 0) tenant_held_.erase(lock.tenant);
    return lock;
  }
  template <class Pred>
  std::vector<ReadLock> take_if(Pred pred) {
    std::vector<ReadLock> out;
    for (auto it = locks_.begin(); it != locks_.end();) {
      auto next = std::next(it);
      if (pred(it->second)) out.push_back(remove(it));
      it = next;
    }
    return out;
  }

  Map locks_;
  std::map<std::string, size_t> held_;
  std::map<TenantId, size_t> tenant_held_;
  uint64_t next_id_ = 1;
};

}  // namespace kvtier::server
