#include "kvtier/connector/tiered_cache_index.h"

namespace kvtier {

LookupResult TieredCacheIndex::find(std::span<const ChunkKey> keys, bool counted) {
  mover_.poll();  // a finished prefetch is ready for this lookup
  LookupResult found = counted ? cache_.lookup(keys) : cache_.peek(keys);
  if (!found.pending && found.hit_chunks < keys.size()) {
    found.pending = mover_.read_through(keys, found.hit_chunks);
  }
  return found;
}

std::optional<StorePlan> TieredCacheIndex::prepare_store(std::span<const ChunkKey> keys) {
  std::optional<StorePlan> plan = cache_.prepare_store(keys);
  if (plan) mover_.demote_evicted(*plan);  // before the plan's slots are written
  return plan;
}

Result<std::vector<SlotId>> TieredCacheIndex::prepare_load(std::span<const ChunkKey> keys) {
  Result<std::vector<SlotId>> slots = cache_.prepare_load(keys);
  if (slots) cache_.touch(keys);  // the most recently used keep their slots longest
  return slots;
}

std::vector<CacheEvent> TieredCacheIndex::take_events() {
  mover_.poll();  // the engine's step: finished prefetches are published
  return cache_.take_events();
}

std::optional<std::string> TieredCacheIndex::degraded() const {
  const std::vector<std::string> down = mover_.degraded_tiers();
  if (down.empty()) return std::nullopt;
  std::string names;  // H7: the host cache serves, a tier below it is DOWN
  for (const std::string& t : down) names += (names.empty() ? "" : ", ") + t;
  return "host cache: tiers down: " + names;
}

}  // namespace kvtier
