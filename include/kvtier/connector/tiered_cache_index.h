// TieredCacheIndex: the in-process host cache with the tiers below it (cache.mode local with
// tiers.disk_path or tiers.redis_url set): a CacheManager and a TierMover over the host pool's
// memory, as kvtierd runs them (docs/tiers.md).
//
// In addition to CacheIndex's contract:
// - lookup: where the ready prefix stops short and the first miss is not pending, the keys
//   after it that a tier holds are prefetched and the answer says pending (ask again later),
//   never counting them as hits; a later lookup finds the verified ones ready. A chunk no tier
//   could serve intact is freed unpublished (F3) and is a miss from then on. lookup_ahead
//   starts the same prefetches, for a request that has not asked yet.
// - prepare_store: under write_policy on_evict, the chunks the plan evicts are copied out for
//   the tiers before the plan's slots are written.
// - complete_store: under write_policy on_store, the published chunks are copied out for the
//   tiers (the mover hears of them from the CacheManager; take_events is not needed for it).
// - take_events: finished prefetches are published (their events come with the others); lookup
//   publishes them too, so a request waiting for its prefetch is served without a step.
// - degraded: names the tiers that are DOWN (H7); requests never fail because a tier failed.
// Not thread-safe: the connector's thread calls it (the mover's own threads do the tier IO).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/cache/cache_manager.h"
#include "kvtier/cache/tier_mover.h"
#include "kvtier/connector/cache_index.h"

namespace kvtier {

class TieredCacheIndex final : public CacheIndex {
 public:
  // `cache` and `mover` (built over `cache`) outlive the index.
  TieredCacheIndex(CacheManager& cache, TierMover& mover) : cache_(cache), mover_(mover) {}

  LookupResult lookup(std::span<const ChunkKey> keys) override { return find(keys, true); }
  // A hint, not a lookup: the cache's hit and miss counters do not count it.
  void lookup_ahead(std::span<const ChunkKey> keys) override {
    static_cast<void>(find(keys, false));
  }
  std::optional<StorePlan> prepare_store(std::span<const ChunkKey> keys) override;
  void complete_store(std::span<const ChunkKey> keys, Verdict verdict) override {
    cache_.complete_store(keys, verdict);
  }
  void quarantine_store(std::span<const ChunkKey> keys) override { cache_.quarantine_store(keys); }
  Result<std::vector<SlotId>> prepare_load(std::span<const ChunkKey> keys) override;
  void complete_load(std::span<const ChunkKey> keys) override { cache_.complete_load(keys); }
  void quarantine_load(std::span<const ChunkKey> keys) override { cache_.quarantine_load(keys); }
  Status reset() override {
    cache_.reset();
    return {};
  }
  std::vector<CacheEvent> take_events() override;
  Status audit() const override { return cache_.audit(); }
  std::optional<std::string> degraded() const override;

 private:
  // lookup's answer, counted in the cache's counters or not (a hint).
  LookupResult find(std::span<const ChunkKey> keys, bool counted);

  CacheManager& cache_;
  TierMover& mover_;
};

}  // namespace kvtier
