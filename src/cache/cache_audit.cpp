// CacheManager::audit(): the F12 conservation check, kept apart from the state machine it
// checks.
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/cache/cache_manager.h"

namespace kvtier {

namespace {

enum class Holder { kNone, kFree, kQuarantined, kKey };

std::string_view holder_text(Holder h) {
  switch (h) {
    case Holder::kNone:
      return "nothing";
    case Holder::kFree:
      return "the free list";
    case Holder::kQuarantined:
      return "the quarantine";
    case Holder::kKey:
      return "a key";
  }
  return "?";
}

Status violation(std::string message) {
  return make_error(ErrorCode::kInternal, "cache audit: " + std::move(message));
}

}  // namespace

Status CacheManager::audit() const {
  // Every slot is held by exactly one of: the free list, the quarantine, one key.
  std::vector<Holder> holder(num_slots_, Holder::kNone);
  auto claim = [&](SlotId slot, Holder by) -> Status {
    if (slot >= num_slots_) {
      return violation(std::string(holder_text(by)) + " holds slot " + std::to_string(slot) +
                       " of " + std::to_string(num_slots_));
    }
    if (holder[slot] != Holder::kNone) {
      return violation("slot " + std::to_string(slot) + " is held by both " +
                       std::string(holder_text(holder[slot])) + " and " +
                       std::string(holder_text(by)));
    }
    holder[slot] = by;
    return {};
  };
  for (SlotId s : free_slots_) {
    if (auto st = claim(s, Holder::kFree); !st) return st;
  }
  for (SlotId s : quarantined_slots_) {
    if (auto st = claim(s, Holder::kQuarantined); !st) return st;
  }
  size_t pending = 0, pinned = 0, quarantined_ready = 0, resident = 0;
  std::unordered_map<OwnerId, size_t> owned;
  for (const auto& [key, e] : index_) {
    ++owned[e.owner];
    if (auto st = claim(e.slot, Holder::kKey); !st) return st;
    const bool ready = e.state == KeyState::kReady;
    if (!ready && (e.pins > 0 || e.quarantined)) {
      return violation("pending key " + key.hex() + " is pinned or quarantined");
    }
    const bool should_be_resident = ready && !e.quarantined;
    if (policy_->contains(key) != should_be_resident) {
      return violation("key " + key.hex() + (should_be_resident ? " is ready but not" : " is") +
                       " in the eviction policy");
    }
    pending += !ready;
    resident += should_be_resident;
    quarantined_ready += e.quarantined;
    pinned += should_be_resident && e.pins > 0;
  }
  for (size_t s = 0; s < num_slots_; ++s) {
    if (holder[s] == Holder::kNone) {
      return violation("slot " + std::to_string(s) +
                       " is leaked: not free, not held by a key, not quarantined");
    }
  }
  if (policy_->size() != resident) {
    return violation("eviction policy holds " + std::to_string(policy_->size()) + " keys, but " +
                     std::to_string(resident) + " are ready");
  }
  if (pending != num_pending_ || pinned != num_pinned_ ||
      quarantined_ready != num_quarantined_ready_) {
    return violation("counts drifted: pending " + std::to_string(num_pending_) + " vs " +
                     std::to_string(pending) + ", pinned " + std::to_string(num_pinned_) + " vs " +
                     std::to_string(pinned) + ", quarantined ready " +
                     std::to_string(num_quarantined_ready_) + " vs " +
                     std::to_string(quarantined_ready));
  }
  if (owned != owned_) {
    return violation("the slots charged to owners drifted: " + std::to_string(owned.size()) +
                     " owners hold keys, " + std::to_string(owned_.size()) + " are charged");
  }
  return {};
}

}  // namespace kvtier
