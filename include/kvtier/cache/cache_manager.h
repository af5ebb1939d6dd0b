// CacheManager: the state machine over the slots of one host pool, keyed by ChunkKey.
//
// Slot states (every slot is in exactly one, F12):
//   free         no key; may be handed out by prepare_store.
//   pending      a store is writing its key's bytes; the key is never a hit and never evicted.
//   ready        the key is readable; pinned (pin count > 0) while loads read it, and only an
//                unpinned ready key can be evicted or reset.
//   quarantined  a transfer touching the slot was Unprovable (F7): retained for the life of the
//                manager, never evicted, reset or handed out again.
//
// Transitions:
//   prepare_store       free -> pending (evicting unpinned ready keys to make room)
//   complete_store      pending -> ready (kSucceeded) or pending -> free (kFailed, F3)
//   quarantine_store    pending -> quarantined; the key is gone and never readable
//   prepare_load        ready -> ready, pin count + 1
//   complete_load       ready -> ready, pin count - 1
//   quarantine_load     ready -> quarantined, taking over the load's pin; the key stays
//                       readable (a load only reads its source) but the slot is never released
//   eviction, reset     ready (unpinned) -> free
//
// Keys identify stores and loads: a caller passes the keys of its own plan. Repeating
// complete_store is harmless (idempotent) as long as no new store of the same keys was prepared
// in between.
//
// Owners (owner_quota.h): every pending or ready key is charged to the owner whose store made
// it pending (owner 0 unless prepare_store_for names one). A store evicts in the policy's order
// among the chunks it may evict: its owner's own, and another owner's only while that owner keeps
// more than its guaranteed_slots afterwards. A store that would take its owner past max_slots
// first evicts that owner's own chunks (and is refused when it cannot).
//
// Thread-safety: none. One thread owns the manager (the scheduler); calls must be serialized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/cache/cache_counters.h"
#include "kvtier/cache/cache_event.h"
#include "kvtier/cache/eviction_policy.h"
#include "kvtier/cache/owner_quota.h"
#include "kvtier/cache/slot_id.h"
#include "kvtier/core/chunk_key.h"
#include "kvtier/core/kv_event_publisher.h"
#include "kvtier/core/status.h"

namespace kvtier {

enum class LookupState { kMiss, kPending, kHit };
enum class Verdict { kSucceeded, kFailed };

struct LookupResult {
  size_t hit_chunks = 0;  // leading keys that are ready
  bool pending = false;   // the first key that is not a hit is pending: ask again later
};

// The slots one store may write. keys[i] is written to slots[i]; only keys that were absent are
// listed (keys already pending or ready need no write). `evicted` left the cache to make room.
// evicted_slots[i] is the slot evicted[i] held: it is one of `slots`, so its old bytes stay
// intact only until the caller writes the plan's slots (a tier mover copies them down first).
struct StorePlan {
  std::vector<ChunkKey> keys;
  std::vector<SlotId> slots;
  std::vector<ChunkKey> evicted;
  std::vector<SlotId> evicted_slots;
};

class CacheManager {
 public:
  // Throws std::invalid_argument when num_slots or slot_bytes is 0, num_slots does not fit a
  // SlotId, or policy is null.
  CacheManager(size_t num_slots, size_t slot_bytes, std::unique_ptr<EvictionPolicy> policy);
  ~CacheManager();

  CacheManager(const CacheManager&) = delete;
  CacheManager& operator=(const CacheManager&) = delete;

  size_t num_slots() const { return num_slots_; }
  size_t slot_bytes() const { return slot_bytes_; }

  LookupState state(const ChunkKey& key) const;
  // The slot of a pending or ready key; nullopt when absent. For checks and diagnostics.
  std::optional<SlotId> slot_of(const ChunkKey& key) const;
  // The slot of a ready key (its bytes are readable until the key is evicted or reset);
  // nullopt for a key that is not ready.
  std::optional<SlotId> ready_slot(const ChunkKey& key) const;

  // Counts the leading ready keys. A pending key is never a hit. Does not change recency; the
  // caller touches the keys it uses.
  LookupResult lookup(std::span<const ChunkKey> keys);
  // What lookup() would answer now, without counting it (hits, misses, pending_lookups).
  LookupResult peek(std::span<const ChunkKey> keys) const;

  // Gives each absent key a slot and makes it pending, evicting ready keys that are unpinned and
  // not among `keys`. All-or-nothing: when that cannot make room for every absent key, returns
  // nullopt and changes nothing.
  std::optional<StorePlan> prepare_store(std::span<const ChunkKey> keys);
  // The same for `owner`: the keys it makes pending are charged to it, and it evicts as the
  // owner rules above allow. All-or-nothing as well: a refusal changes nothing but the
  // stores_rejected counter.
  std::expected<StorePlan, StoreRefusal> prepare_store_for(OwnerId owner,
                                                           std::span<const ChunkKey> keys);

  // Sets an owner's quota (the default: none). A quota below what the owner holds now evicts
  // nothing: its next store evicts its own chunks first.
  void set_quota(OwnerId owner, OwnerQuota quota);
  // Pending and ready keys charged to `owner`.
  size_t slots_owned(OwnerId owner) const;

  // Ends a store. kSucceeded: its pending keys become ready and one kStored event lists them.
  // kFailed (F3): its pending keys are removed and their slots freed, no event; keys that are
  // already ready are untouched. Keys not pending are ignored, so a repeat is a no-op.
  void complete_store(std::span<const ChunkKey> keys, Verdict verdict);

  // Pins every key (a key listed twice is pinned twice). Every key must be ready; otherwise
  // returns kNotFound naming the first key that is not, and pins nothing.
  Result<std::vector<SlotId>> prepare_load(std::span<const ChunkKey> keys);

  // Unpins every key once per occurrence. A key that is not pinned that often is a programming
  // error (a doubled completion would let DMA race a reused slot): throws std::logic_error and
  // unpins nothing.
  void complete_load(std::span<const ChunkKey> keys);

  // Marks the keys used: touched in reverse order so that the first (prefix) key ends most
  // recently used. Keys that are not ready are ignored.
  void touch(std::span<const ChunkKey> keys);

  // Drops every ready key that is unpinned and not quarantined (one kRemoved event lists them).
  // Pending, pinned and quarantined slots stay. Returns the number dropped.
  size_t reset();

  // F7, an Unprovable store: each pending key is removed (never readable, no event) and its slot
  // is quarantined. Keys not pending are ignored.
  void quarantine_store(std::span<const ChunkKey> keys);

  // F7, an Unprovable load (call this instead of complete_load): each ready key's slot is
  // quarantined and takes over one pin of the load, so the lease is never released: the slot is
  // never evicted, reset or reused. The key stays readable, since a load only reads its source.
  // Keys not ready are ignored.
  void quarantine_load(std::span<const ChunkKey> keys);

  CacheCounters counters() const;

  // F12: checks that every slot is exactly one of free / pending / ready / quarantined, that the
  // key index, the eviction policy and the counters agree, and that only ready keys are pinned.
  // Returns kInternal describing the first violation found.
  Status audit() const;

  // Events since the last call, oldest first. They wait for a caller that mirrors the cache;
  // one that never asks must not make them pile up: while the waiting events list more than
  // max_waiting_event_keys() keys, the oldest are dropped (counted in events_dropped).
  std::vector<CacheEvent> take_events();
  size_t max_waiting_event_keys() const { return 4 * num_slots_; }

  // From now on every change of the ready keys (the events above) is also published as KV
  // events on `medium`, each chunk `block_size` tokens (docs/events.md); null stops it. The
  // publisher must outlive the manager.
  void publish_events(KvEventPublisher* publisher, std::string medium, uint32_t block_size);

  // From now on every event is also handed to `listener` as it happens, on the calling thread,
  // after the change it reports (the tier mover's write-behind). The listener may read the
  // manager (ready_slot) but must not change it. An empty one stops it.
  void set_event_listener(std::function<void(const CacheEvent&)> listener);

 private:
  friend class CacheManagerTestPeer;  // tests corrupt internals to prove audit() sees it

  enum class KeyState { kPending, kReady };
  struct Entry {
    SlotId slot = 0;
    KeyState state = KeyState::kPending;
    uint32_t pins = 0;
    bool quarantined = false;  // ready key whose load was Unprovable (F7)
    OwnerId owner = kDefaultOwner;
  };

  bool evictable(const ChunkKey& key) const;
  void drop_ready(const ChunkKey& key);
  // Removes an indexed key's charge to its owner (every path that erases it from index_).
  void uncharge(const Entry& entry);
  // Victims for `owner`'s store that needs `n` more slots, as the owner rules allow, none of them
  // in `keep`; fewer than n when no more may be evicted.
  std::vector<ChunkKey> choose_victims_for(OwnerId owner, size_t n,
                                           const EvictablePredicate& keep) const;
  void emit(CacheEvent event);

  const size_t num_slots_;
  const size_t slot_bytes_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::unordered_map<ChunkKey, Entry, ChunkKeyHash> index_;
  std::vector<SlotId> free_slots_;         // handed out from the back
  std::vector<SlotId> quarantined_slots_;  // by quarantine_store: no key
  size_t num_pending_ = 0;
  size_t num_pinned_ = 0;             // ready, not quarantined, pins > 0
  size_t num_quarantined_ready_ = 0;  // by quarantine_load: key still indexed
  CacheCounters stats_;               // event counts; slot counts are computed
  // Owners: their quotas (an owner without an entry has none), and the pending + ready keys
  // charged to each (only owners with some).
  std::unordered_map<OwnerId, OwnerQuota> quotas_;
  std::unordered_map<OwnerId, size_t> owned_;
  std::deque<CacheEvent> events_;  // waiting for take_events()
  size_t waiting_event_keys_ = 0;  // the keys they list
  std::function<void(const CacheEvent&)> listener_;
  KvEventPublisher* publisher_ = nullptr;
  std::string medium_;
  uint32_t block_size_ = 0;
};

}  // namespace kvtier
