// TierMover: moves chunks between the host pool and the tiers below it (tier/), so that the
// host cache is the top of a hierarchy: host pool (L1), then each tier in order (L2 disk,
// L3 Redis).
//
// Write-behind (demotion). Chunks go down asynchronously through one bounded queue:
//   - policy kOnStore: every key the CacheManager publishes (its kStored events, which the
//     mover receives as they happen: CacheManager::set_event_listener), whoever stored it;
//   - policy kOnEvict: every key a StorePlan evicted, passed to demote_evicted() right after
//     prepare_store, before the plan's slots are written.
// The bytes are COPIED into the queue entry at enqueue time, on the caller's thread: a slot
// may be reused as soon as the call returns, and nothing the writer thread does can read it
// after that. When the queue is full the chunk is dropped and counted (writes_dropped): the
// engine never waits for a tier. The writer thread puts each batch to every tier that is UP.
// Chunks that prefetch() brought up are not written down again (they are in the tier they
// came from).
//
// A chunk's bytes are slot s of each of the mover's pools, in order: one pool in kvtierd; in
// an engine's in-process cache one per tensor-parallel rank (each holds that rank's share), so
// a chunk in a tier is every rank's share, rank 0 first.
//
// Lookup. lower_hits(keys, from) counts the consecutive keys from `from` that some tier holds,
// asking each tier only about keys the tiers above it lack; DOWN tiers are skipped (H7). It is
// synchronous: it waits at most each UP tier's timeout (a tier that takes that long goes DOWN).
//
// Read-through (promotion). read_through(keys, host_hits), after a host lookup whose ready
// prefix stopped at host_hits, prefetches the keys after it that a tier holds; a key whose
// prefetch failed is not fetched again until the host pool stores it. prefetch(keys, owner)
// reserves host slots with prepare_store_for (charged to owner), so the keys are pending in the
// CacheManager (a lookup says "ask again later"), and a background thread fills each slot from
// the first tier that returns a verified chunk; the prefetches queued while it reads are read
// next, together (calls of up to prefetch_batch_bytes per tier), so that the requests of one step
// wait for one read. poll() then completes the store: kSucceeded for filled keys, kFailed for
// keys no tier could serve intact (missing, corrupt, tier down): F3, such a slot is freed and
// never published.
//
// Health. A tier that errors or times out is DOWN (health_checked_tier.h); a tier with parts
// down (a Redis Cluster's masters) is DEGRADED and serves the other parts' keys.
// degraded_tiers() names both for H7 (degraded_names(): "redis" while DOWN, "redis/<node>"
// for each node down). The writer thread probes DOWN tiers and down parts whose probe is due
// every health_tick, so they recover even while nothing asks for them.
//
// Thread-safety: demote_evicted, lower_hits, read_through (and its two steps), prefetch, poll and
// the destructor must be called from the thread that owns the CacheManager (the mover calls the
// CacheManager only from there, and it calls the mover back there with its events). counters(),
// tier_metrics(), degraded_tiers() and wait_idle() may be called from any thread. The CacheManager
// and the HostPool must outlive the mover.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "kvtier/cache/cache_event.h"
#include "kvtier/cache/cache_manager.h"
#include "kvtier/cache/host_pool.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/config.h"
#include "kvtier/core/counter_kind.h"
#include "kvtier/tier/health_checked_tier.h"

namespace kvtier {

namespace cache_internal {
class StagingBuffers;
}

enum class WritePolicy { kOnStore, kOnEvict };
// "on_store" | "on_evict" (the tiers.write_policy config values); kInvalidArgument otherwise.
Result<WritePolicy> parse_write_policy(std::string_view name);

struct MoverTier {
  std::unique_ptr<HealthCheckedTier> tier;
  Duration timeout;  // of each call to it
};

struct TierMoverOptions {
  size_t write_queue_chunks = 256;
  WritePolicy write_policy = WritePolicy::kOnStore;
  size_t write_batch_chunks = 16;  // chunks per put call, at most
  // Bytes per get call, at most (at least one chunk): a read-through of more is read in calls of
  // this many, each well inside the tier's timeout, and a chunk of several pools is read into
  // staging memory of this size, not of the whole read-through.
  size_t prefetch_batch_bytes = size_t{64} << 20;
  Duration health_tick = std::chrono::milliseconds(100);
};

// The options a (validated) tiers config section asks for. Throws std::invalid_argument for
// a write_policy that parse_write_policy rejects.
TierMoverOptions tier_mover_options(const TiersConfig& config);

// The tiers a config section asks for (make_tiers, tier_factory.h), each with its call timeout;
// none when neither tiers.disk_path nor tiers.redis_url is set. Errors name the field.
Result<std::vector<MoverTier>> make_mover_tiers(const TiersConfig& config, const KeyNamespace& ns);

struct TierMoverCounters {
  uint64_t writes_enqueued = 0;    // chunks copied into the write queue
  uint64_t writes_dropped = 0;     // chunks not enqueued: the queue was full
  uint64_t writes_missed = 0;      // stored keys no longer ready when their event arrived
  uint64_t chunks_demoted = 0;     // chunks at least one tier stored
  uint64_t demote_failures = 0;    // chunks no tier stored (every tier down or failing)
  uint64_t prefetch_rejected = 0;  // prefetch calls that found no room in the host pool
  uint64_t prefetch_keys = 0;      // keys prefetch reserved
  uint64_t prefetch_succeeded = 0;
  uint64_t prefetch_failed = 0;  // keys freed unpublished (F3)
};

// f(name, value, kind) for every field (counter_kind.h); all are counters.
template <class F>
void visit_counters(const TierMoverCounters& c, F&& f) {
  using enum CounterKind;
  f("writes_enqueued", c.writes_enqueued, kCounter);
  f("writes_dropped", c.writes_dropped, kCounter);
  f("writes_missed", c.writes_missed, kCounter);
  f("chunks_demoted", c.chunks_demoted, kCounter);
  f("demote_failures", c.demote_failures, kCounter);
  f("prefetch_rejected", c.prefetch_rejected, kCounter);
  f("prefetch_keys", c.prefetch_keys, kCounter);
  f("prefetch_succeeded", c.prefetch_succeeded, kCounter);
  f("prefetch_failed", c.prefetch_failed, kCounter);
}

class TierMover {
 public:
  // Throws std::invalid_argument when a tier is null, write_queue_chunks or write_batch_chunks
  // is 0, or the pool's slot size differs from the cache's.
  TierMover(CacheManager& cache, const HostPool& pool, std::vector<MoverTier> tiers,
            TierMoverOptions options);
  // A chunk is slot s of every pool in `pools`, in order (see above). Also
  // std::invalid_argument for no pool, a null one, or pools of different sizes.
  TierMover(CacheManager& cache, std::vector<const HostPool*> pools, std::vector<MoverTier> tiers,
            TierMoverOptions options);
  // Stops the threads (queued writes are dropped, a running prefetch finishes) and fails every
  // prefetch not yet completed (complete_store kFailed), so no slot stays pending (F12). Call
  // from the owner thread.
  ~TierMover();

  TierMover(const TierMover&) = delete;
  TierMover& operator=(const TierMover&) = delete;

  // kOnEvict: enqueues the chunks the plan evicted (copying them now, from evicted_slots).
  void demote_evicted(const StorePlan& plan);

  size_t lower_hits(std::span<const ChunkKey> keys, size_t from);

  // After a host lookup of `keys` whose ready prefix is keys[0, host_hits) and whose first miss
  // is not pending: prefetches the keys after the prefix that the tiers hold (making the host
  // hits the most recently used first, so the prefetch does not evict them). True when some
  // are now pending. Synchronous: waits at most each UP tier's timeout. The prefetched keys are
  // charged to `owner` (CacheManager's owners: its max_slots bounds them, and they evict as its
  // stores may).
  bool read_through(std::span<const ChunkKey> keys, size_t host_hits,
                    OwnerId owner = kDefaultOwner);
  // read_through in two steps, for an owner that guards its CacheManager with a lock it must not
  // hold while the tiers are asked: read_through_lower asks them (how many keys after the prefix
  // to fetch; it does not touch the CacheManager), read_through_start then starts the prefetch
  // with that answer (it does). Nothing may store or evict in between.
  size_t read_through_lower(std::span<const ChunkKey> keys, size_t host_hits);
  bool read_through_start(std::span<const ChunkKey> keys, size_t host_hits, size_t lower,
                          OwnerId owner = kDefaultOwner);

  // Reserves slots for the keys absent from the host cache, charged to `owner`
  // (prepare_store_for), and starts filling them. Returns how many keys are now pending; 0 also
  // when the store was refused (no room, or the owner's quota).
  size_t prefetch(std::span<const ChunkKey> keys, OwnerId owner = kDefaultOwner);
  // Completes finished prefetches (complete_store). Returns the number of keys completed.
  size_t poll();

  // KV events: every tier publishes what it stores (and the disk tier what it drops) on
  // `publisher`, each chunk `block_size` tokens (Tier::publish_events); null stops it.
  void publish_events(KvEventPublisher* publisher, uint32_t block_size);

  std::vector<std::string> degraded_tiers() const;
  std::vector<TierMetrics> tier_metrics() const;
  TierMoverCounters counters() const;
  // For tests and shutdown: true once the write queue is empty, no write is running and every
  // prefetch has finished (and awaits poll), within `timeout`.
  bool wait_idle(Duration timeout);

 private:
  struct WriteEntry {
    ChunkKey key;
    uint32_t staging;  // the buffer in staging_ holding its bytes
  };
  struct PrefetchJob {
    std::vector<ChunkKey> keys;
    std::vector<SlotId> slots;
    std::vector<bool> filled;
  };

  size_t chunk_bytes() const { return cache_.slot_bytes() * pools_.size(); }
  // The CacheManager's events as they happen: under kOnStore, enqueues each stored key's chunk
  // (copying it now). Other events are ignored.
  void on_cache_event(const CacheEvent& event);
  bool enqueue_write(const ChunkKey& key, SlotId slot);
  // prefetch(), returning the keys it reserved and now fetches (those absent from the host cache).
  std::vector<ChunkKey> start_prefetch(std::span<const ChunkKey> keys, OwnerId owner);
  void writer_loop();
  void write_batch(std::vector<WriteEntry>& batch);
  void prefetch_loop();
  struct PrefetchChunk {
    PrefetchJob* job;
    size_t index;  // in job->keys
  };
  void fill(std::vector<PrefetchJob>& jobs);
  void fill_batch(std::span<const PrefetchChunk> chunks, std::span<std::byte> staging);
  void complete(PrefetchJob& job);
  bool idle_locked() const;

  CacheManager& cache_;
  const std::vector<const HostPool*> pools_;
  std::vector<MoverTier> tiers_;
  const TierMoverOptions options_;

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  bool stopping_ = false;
  std::deque<WriteEntry> write_queue_;
  // The write queue's copies: write_queue_chunks + write_batch_chunks buffers (the queue and the
  // batch being written); none without tiers.
  std::unique_ptr<cache_internal::StagingBuffers> staging_;
  bool writing_ = false;
  std::deque<PrefetchJob> prefetch_queue_;
  bool prefetching_ = false;
  std::vector<PrefetchJob> prefetched_;  // filled, awaiting poll()
  TierMoverCounters counters_;

  // Owner thread only: keys poll() published, skipped by on_cache_event (at most num_slots).
  std::unordered_set<ChunkKey, ChunkKeyHash> promoted_;
  // Owner thread only: keys read_through() prefetched that the host pool has not stored since
  // (at most 4 * num_slots). One whose prefetch failed (missing, corrupt, tier down) is a miss
  // until then: a tier that still says it holds it (Redis keeps a corrupt value) would otherwise
  // make every lookup pending forever.
  std::unordered_set<ChunkKey, ChunkKeyHash> prefetch_tried_;

  std::thread writer_;
  std::thread prefetcher_;
};

}  // namespace kvtier
