// EvictionPolicy: the order in which ready chunks leave the host cache.
//
// A policy tracks the *resident* keys: those that are ready (readable) in the cache. It never
// evicts on its own. The cache manager asks choose_victims() for candidates, which changes
// nothing, and commits them with evict() only once it knows the whole request can be served;
// this is what makes CacheManager::prepare_store all-or-nothing.
//
// Thread-safety: none; the owner (CacheManager) serializes every call. Precondition violations
// (inserting a resident key, evicting one that is not) throw std::logic_error.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/status.h"

namespace kvtier {

// True when a resident key may be evicted now (not pinned, not an input of the store that
// needs the room).
using EvictablePredicate = std::function<bool(const ChunkKey&)>;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  virtual std::string_view name() const = 0;

  // `key` became ready. Precondition: not resident.
  virtual void insert(const ChunkKey& key) = 0;
  // `key` was accessed. No effect when it is not resident.
  virtual void touch(const ChunkKey& key) = 0;
  // `key` left the cache for a reason other than eviction (reset, quarantine): it is forgotten,
  // not remembered as evicted. No effect when it is not resident.
  virtual void remove(const ChunkKey& key) = 0;

  // Up to `n` distinct resident keys for which `evictable` is true, in the order the policy
  // would evict them. Fewer than `n` means no more room can be made. Changes nothing.
  virtual std::vector<ChunkKey> choose_victims(size_t n,
                                               const EvictablePredicate& evictable) const = 0;
  // Evicts a resident key, normally one returned by choose_victims (commit them in the order
  // returned). Precondition: resident.
  virtual void evict(const ChunkKey& key) = 0;

  virtual bool contains(const ChunkKey& key) const = 0;
  // Number of resident keys.
  virtual size_t size() const = 0;
};

// `name` is "lru" or "arc"; `capacity` (> 0) is the number of slots the cache has, which bounds
// ARC's target size and ghost lists. Unknown names and a zero capacity are kInvalidArgument.
Result<std::unique_ptr<EvictionPolicy>> make_eviction_policy(std::string_view name,
                                                             size_t capacity);

}  // namespace kvtier
