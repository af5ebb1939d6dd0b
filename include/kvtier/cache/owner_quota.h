// Owners of cache slots: who a chunk is charged to (kvtierd: the tenant whose STORE filled the
// slot). A CacheManager that is never told of an owner charges everything to owner 0, which has
// no quota: eviction is then exactly the policy's order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace kvtier {

using OwnerId = uint32_t;
inline constexpr OwnerId kDefaultOwner = 0;

struct OwnerQuota {
  // The most slots (pending + ready keys) charged to the owner at once. A store past it evicts
  // the owner's own chunks first, or is refused (StoreRefusal::kOverQuota).
  size_t max_slots = std::numeric_limits<size_t>::max();
  // Another owner's store never evicts this owner's chunks while it holds this many or fewer.
  size_t guaranteed_slots = 0;

  bool operator==(const OwnerQuota&) const = default;
};

// Why prepare_store made no plan.
enum class StoreRefusal {
  kNoRoom,     // no free slot, and no chunk that may be evicted, for every absent key
  kOverQuota,  // the owner's max_slots, even after evicting its own evictable chunks
};

}  // namespace kvtier
