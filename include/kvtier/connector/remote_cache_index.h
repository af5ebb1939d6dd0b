// RemoteCacheIndex: the scheduler side's CacheIndex (cache_index.h) over kvtierd, the cache
// server (`cache.mode: server`), through a CacheClient of its own (registered as rank
// world_size with a one-chunk KV arena that is never copied to). Each rank stores and retrieves
// its share of a chunk under rank_key(key, rank) (remote_cache.h); the connector's job
// bookkeeping (F3, F4, F7–F10) is unchanged.
//
// - lookup: a LOOKUP of every rank's shares; a chunk is a hit when every rank's share is ready,
//   pending when the first chunk that is not is pending on a rank.
// - prepare_load pins the chunks in kvtierd until complete_load: a LOOKUP of every rank's shares
//   with a read lock (it lasts server.lock_ttl_s at most; a rank's RETRIEVE pins its share
//   itself). When any share is not ready, the locks taken are released and it fails
//   (kNotFound), having pinned nothing: the request recomputes. complete_load releases them
//   (RELEASE). quarantine_load (F7) never releases them: kvtierd expires them, and retains the
//   slots of an Unprovable RETRIEVE itself.
// - prepare_store: the keys this index is not storing already (a store of the same chunk by
//   another request is in flight), in order. kvtierd picks the slots at STORE and skips chunks it
//   holds. complete_store and quarantine_store end them; a successful store is a kStored event.
// - Slots are 0: the ranks address kvtierd's chunks by key (TransferJob::keys).
// - take_events: kStored events of this index's stores. kvtierd does not report its evictions,
//   so there are no kRemoved events.
// - reset: kUnimplemented. kvtierd's chunks are shared with every engine that uses it, and the
//   protocol has no operation that drops them.
// - audit (F12 at quiescence) fails when a load's pins or a store are still held, when kvtierd's
//   cache does not audit clean, or when the read-locked keys kvtierd holds for this client (STATS
//   client_locked_keys) are not the ones this index holds (quarantined pins may have expired);
//   kUnavailable when kvtierd does not answer STATS.
// - While the client is not OK (kvtierd down or unreachable) lookups miss and loads and stores
//   are not prepared: requests recompute (H7); degraded() says why. A LOOKUP waits at most
//   min(server.request_timeout_s, server.heartbeat_interval_s) and, when that passes, lookups
//   miss and loads fail for as long again (the client turns DEGRADED meanwhile if the server is
//   hung). A lock whose LOOKUP was answered too late is released when its reply arrives.
// - lookup_ahead sends the LOOKUP (no lock) now; a lookup of those keys, or of the part of them
//   from some key on, within kLookAheadAge takes its reply instead of a round trip of its own
//   (waiting for it as long as for its own). So the reply may be that old: a chunk stored
//   since then is missed once, and one evicted since then fails prepare_load, which finds it
//   gone (the request recomputes). Each reply answers one lookup.
// Not thread-safe (the connector's thread); the client has its own I/O thread.
#pragma once

#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/connector/cache_index.h"
#include "kvtier/connector/remote_cache.h"
#include "kvtier/core/config.h"

namespace kvtier {

class RemoteCacheIndex final : public CacheIndex {
 public:
  // Connects in the background; waits at most server.connect_timeout_s for the first
  // registration (a server that is not up yet only makes the engine start DEGRADED). `layout`
  // is one rank's share of a chunk.
  RemoteCacheIndex(const Config& config, const KvLayout& layout, uint32_t world_size);
  ~RemoteCacheIndex() override;

  LookupResult lookup(std::span<const ChunkKey> keys) override;
  void lookup_ahead(std::span<const ChunkKey> keys) override;
  std::optional<StorePlan> prepare_store(std::span<const ChunkKey> keys) override;
  void complete_store(std::span<const ChunkKey> keys, Verdict verdict) override;
  void quarantine_store(std::span<const ChunkKey> keys) override;
  Result<std::vector<SlotId>> prepare_load(std::span<const ChunkKey> keys) override;
  void complete_load(std::span<const ChunkKey> keys) override;
  void quarantine_load(std::span<const ChunkKey> keys) override;
  Status reset() override;
  std::vector<CacheEvent> take_events() override;
  Status audit() const override;
  // H7: "cache server <endpoint>: <reason>" while the client is not OK, or the tiers below
  // kvtierd that are down.
  std::optional<std::string> degraded() const override;

  // Read-locked keys this index holds in kvtierd for loads (every rank's shares).
  size_t pinned_keys() const { return pinned_keys_; }
  // Lookups answered by a LOOKUP that lookup_ahead sent.
  uint64_t lookups_answered_ahead() const { return answered_ahead_; }
  static constexpr Duration kLookAheadAge = std::chrono::seconds(1);
  // Tests: a kvtierd test hook (the server runs with `--test-hooks`) sent with every RELEASE.
  void set_release_hook(server::TestHook hook) { release_hook_ = hook; }

 private:
  struct Pin {
    std::vector<ChunkKey> keys;   // as prepare_load got them
    std::vector<uint64_t> locks;  // one per rank
  };
  using LookupFuture = std::future<Result<server::LookupReply>>;
  struct Ahead {
    std::vector<ChunkKey> keys;
    std::vector<LookupFuture> replies;  // one per rank
    TimePoint sent{};
  };

  bool usable() const;  // the client is OK and no LOOKUP timed out just now
  // A LOOKUP of every rank's shares of `keys`; nullopt when one failed or timed out.
  std::optional<std::vector<server::LookupReply>> lookup_ranks(std::span<const ChunkKey> keys,
                                                               Duration lock_for);
  std::vector<LookupFuture> send_lookups(std::span<const ChunkKey> keys, Duration lock_for);
  std::optional<std::vector<server::LookupReply>> collect(std::vector<LookupFuture> replies,
                                                          Duration lock_for);
  void release(uint64_t lock) const;
  // Releases the locks of late LOOKUP replies; with `wait`, waits for every reply first (each
  // resolves by its deadline).
  void reap(bool wait) const;

  std::string endpoint_;
  uint32_t world_size_;
  Duration lookup_wait_;  // longest wait for a lookup's replies
  Duration lock_for_;     // a load's read locks (kvtierd caps them at server.lock_ttl_s)
  Duration request_timeout_;
  // The client must register some KV memory to look up: one chunk per group, never copied to.
  SharedKvArena arena_;
  std::unique_ptr<server::CacheClient> client_;  // destroyed (and unregistered) before arena_
  TimePoint backoff_until_{};                    // lookups miss until then: one timed out
  std::vector<Pin> pins_;                        // loads in flight
  std::vector<Ahead> ahead_;                     // lookup_ahead's LOOKUPs, oldest first
  uint64_t answered_ahead_ = 0;
  size_t pinned_keys_ = 0;       // locked keys of pins_
  size_t quarantined_keys_ = 0;  // locked keys of quarantined loads (F7)
  std::unordered_map<ChunkKey, uint32_t, ChunkKeyHash> storing_;  // stores in flight
  size_t quarantined_stores_ = 0;
  std::vector<CacheEvent> events_;
  mutable std::vector<LookupFuture> late_;  // LOOKUPs with a lock that timed out here
  mutable std::vector<std::future<Status>> releases_;
  server::TestHook release_hook_ = server::TestHook::kNone;
};

}  // namespace kvtier
