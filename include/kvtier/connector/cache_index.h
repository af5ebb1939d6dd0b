// CacheIndex: the part of a host cache's index that the scheduler side of the connector uses —
// lookups, slot reservations for stores and pins for loads, and their completion. The
// connector's default is LocalCacheIndex, an in-process CacheManager; RemoteCacheIndex
// (remote_cache_index.h) is kvtierd's, for a cache in another process (`cache.mode: server`).
// ConnectorFactory (connector_factory.h) builds the one the config asks for.
//
// Contract (as CacheManager's methods of the same names, see cache_manager.h):
// - lookup: leading keys that are ready, and whether the first miss is pending (ask later).
// - prepare_store: nullopt when nothing can be stored now; else the keys to write (absent ones
//   only, in the order given) with a slot each. complete_store publishes (kSucceeded) or frees
//   them (F3).
// - prepare_load pins every key (all ready) and marks them used (recency), or fails having
//   pinned none; complete_load unpins.
// - quarantine_*: the keys' slots are never reused (F7).
// - Slots address a chunk in a cache whose worker side copies by slot (LocalCacheIndex). An
//   index whose worker side addresses chunks by key (TransferJob::keys) gives slot 0 for each.
// - The index holds chunks of the connector's layout: a CacheManager's slots must hold
//   layout.max_chunk_bytes() (the SchedulerConnector constructor that takes a CacheManager
//   checks it; ConnectorFactory sizes them so); kvtierd checks it when a rank registers.
// Not thread-safe: the connector's thread calls it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/cache/cache_manager.h"

namespace kvtier {

class CacheIndex {
 public:
  virtual ~CacheIndex() = default;

  virtual LookupResult lookup(std::span<const ChunkKey> keys) = 0;
  // A hint: `keys`, or their tail from some key on, will probably be looked up soon. An index
  // with slower tiers below may start bringing them up now, so that the lookup finds them ready;
  // one whose lookups cost a round trip may send it now and answer that lookup from its reply.
  virtual void lookup_ahead(std::span<const ChunkKey> keys) { static_cast<void>(keys); }
  virtual std::optional<StorePlan> prepare_store(std::span<const ChunkKey> keys) = 0;
  virtual void complete_store(std::span<const ChunkKey> keys, Verdict verdict) = 0;
  virtual void quarantine_store(std::span<const ChunkKey> keys) = 0;
  virtual Result<std::vector<SlotId>> prepare_load(std::span<const ChunkKey> keys) = 0;
  virtual void complete_load(std::span<const ChunkKey> keys) = 0;
  virtual void quarantine_load(std::span<const ChunkKey> keys) = 0;
  // Drops every readable unpinned chunk; or changes nothing and says why it cannot
  // (kUnimplemented: a cache shared with other engines).
  virtual Status reset() = 0;
  // Stored and removed keys since the last call, for an engine that mirrors the cache.
  virtual std::vector<CacheEvent> take_events() = 0;
  // F12 at quiescence (no job in flight): the index and the cache behind it agree and are
  // consistent; an error describes the first violation found.
  virtual Status audit() const = 0;
  // H7: why the cache is degraded (unreachable, a tier down); nullopt while it is well.
  virtual std::optional<std::string> degraded() const = 0;
};

// The in-process host cache: forwards to a CacheManager the caller owns. It is never degraded.
class LocalCacheIndex final : public CacheIndex {
 public:
  explicit LocalCacheIndex(CacheManager& cache) : cache_(cache) {}

  LookupResult lookup(std::span<const ChunkKey> keys) override { return cache_.lookup(keys); }
  std::optional<StorePlan> prepare_store(std::span<const ChunkKey> keys) override {
    return cache_.prepare_store(keys);
  }
  void complete_store(std::span<const ChunkKey> keys, Verdict verdict) override {
    cache_.complete_store(keys, verdict);
  }
  void quarantine_store(std::span<const ChunkKey> keys) override { cache_.quarantine_store(keys); }
  Result<std::vector<SlotId>> prepare_load(std::span<const ChunkKey> keys) override {
    Result<std::vector<SlotId>> slots = cache_.prepare_load(keys);
    if (slots) cache_.touch(keys);  // the most recently used keep their slots longest
    return slots;
  }
  void complete_load(std::span<const ChunkKey> keys) override { cache_.complete_load(keys); }
  void quarantine_load(std::span<const ChunkKey> keys) override { cache_.quarantine_load(keys); }
  Status reset() override {
    cache_.reset();
    return {};
  }
  std::vector<CacheEvent> take_events() override { return cache_.take_events(); }
  Status audit() const override { return cache_.audit(); }
  std::optional<std::string> degraded() const override { return std::nullopt; }

 private:
  CacheManager& cache_;
};

}  // namespace kvtier
