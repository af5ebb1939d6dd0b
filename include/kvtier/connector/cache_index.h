// CacheIndex: the part of a host cache's index that the scheduler side of the connector uses —
// lookups, slot reservations for stores and pins for loads, and their completion. The
// connector's default is LocalCacheIndex, an in-process CacheManager; an engine whose cache
// lives elsewhere (kvtierd, `cache.mode: server`) gives it its own implementation.
//
// Contract (as CacheManager's methods of the same names, see cache_manager.h):
// - lookup: leading keys that are ready, and whether the first miss is pending (ask later).
// - prepare_store: nullopt when nothing can be stored now; else the keys to write (absent ones
//   only) with a slot each. complete_store publishes (kSucceeded) or frees them (F3).
// - prepare_load pins every key (all ready) or fails having pinned none; complete_load unpins.
// - quarantine_*: the keys' slots are never reused (F7).
// Not thread-safe: the connector's thread calls it.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "kvtier/cache/cache_manager.h"

namespace kvtier {

class CacheIndex {
 public:
  virtual ~CacheIndex() = default;

  // Bytes one slot holds: the connector checks a chunk fits.
  virtual size_t slot_bytes() const = 0;
  virtual LookupResult lookup(std::span<const ChunkKey> keys) = 0;
  virtual std::optional<StorePlan> prepare_store(std::span<const ChunkKey> keys) = 0;
  virtual void complete_store(std::span<const ChunkKey> keys, Verdict verdict) = 0;
  virtual void quarantine_store(std::span<const ChunkKey> keys) = 0;
  virtual Result<std::vector<SlotId>> prepare_load(std::span<const ChunkKey> keys) = 0;
  virtual void complete_load(std::span<const ChunkKey> keys) = 0;
  virtual void quarantine_load(std::span<const ChunkKey> keys) = 0;
  // The keys were used again (recency for eviction).
  virtual void touch(std::span<const ChunkKey> keys) = 0;
  // Drops every readable unpinned chunk.
  virtual void reset() = 0;
  virtual std::vector<CacheEvent> take_events() = 0;
  // F12 at quiescence.
  virtual Status audit() const = 0;
};

// The in-process host cache: forwards to a CacheManager the caller owns.
class LocalCacheIndex final : public CacheIndex {
 public:
  explicit LocalCacheIndex(CacheManager& cache) : cache_(cache) {}

  size_t slot_bytes() const override { return cache_.slot_bytes(); }
  LookupResult lookup(std::span<const ChunkKey> keys) override { return cache_.lookup(keys); }
  std::optional<StorePlan> prepare_store(std::span<const ChunkKey> keys) override {
    return cache_.prepare_store(keys);
  }
  void complete_store(std::span<const ChunkKey> keys, Verdict verdict) override {
    cache_.complete_store(keys, verdict);
  }
  void quarantine_store(std::span<const ChunkKey> keys) override { cache_.quarantine_store(keys); }
  Result<std::vector<SlotId>> prepare_load(std::span<const ChunkKey> keys) override {
    return cache_.prepare_load(keys);
  }
  void complete_load(std::span<const ChunkKey> keys) override { cache_.complete_load(keys); }
  void quarantine_load(std::span<const ChunkKey> keys) override { cache_.quarantine_load(keys); }
  void touch(std::span<const ChunkKey> keys) override { cache_.touch(keys); }
  void reset() override { cache_.reset(); }
  std::vector<CacheEvent> take_events() override { return cache_.take_events(); }
  Status audit() const override { return cache_.audit(); }

 private:
  CacheManager& cache_;
};

}  // namespace kvtier
