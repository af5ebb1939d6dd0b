// ServerCacheIndex: the scheduler side's CacheIndex when `cache.mode: server`. kvtierd owns the
// cache: it reserves slots when a rank's STORE arrives and skips chunks it holds or is storing,
// and it pins chunks when a rank's RETRIEVE arrives. So this index only answers lookups (a chunk
// is a hit when every rank's share is ready, see server_cache.h) and hands out placeholder
// slots; the connector's job bookkeeping (F3, F4, F7–F10) is unchanged.
//
// - While the client is not OK (kvtierd down or unreachable) lookups miss and stores are
//   skipped: requests recompute (H7); degraded() says why. A lookup waits at most
//   min(server.request_timeout_s, server.heartbeat_interval_s) and, when that passes, lookups
//   miss for as long again (the client turns DEGRADED meanwhile if the server is hung).
// - A chunk evicted between lookup and RETRIEVE fails that load (`not_found`): the request
//   recomputes from the first invalid block (F4).
// - reset() cannot drop kvtierd's chunks (the protocol has no such operation): no-op.
// Not thread-safe (the connector's thread); the client has its own I/O thread.
#pragma once

#include <optional>
#include <string>

#include "kvtier/connector/cache_index.h"
#include "kvtier/core/config.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/engine/server_cache.h"

namespace kvtier {

class ServerCacheIndex final : public CacheIndex {
 public:
  // Connects in the background; waits at most server.connect_timeout_s for the first
  // registration (a server that is not up yet only makes the engine start DEGRADED).
  ServerCacheIndex(const Config& config, const EngineShape& shape);

  size_t slot_bytes() const override { return layout_.max_chunk_bytes(); }
  LookupResult lookup(std::span<const ChunkKey> keys) override;
  std::optional<StorePlan> prepare_store(std::span<const ChunkKey> keys) override;
  void complete_store(std::span<const ChunkKey>, Verdict) override {}
  void quarantine_store(std::span<const ChunkKey>) override {}  // kvtierd retains them (F7)
  Result<std::vector<SlotId>> prepare_load(std::span<const ChunkKey> keys) override;
  void complete_load(std::span<const ChunkKey>) override {}
  void quarantine_load(std::span<const ChunkKey>) override {}
  void touch(std::span<const ChunkKey>) override {}  // kvtierd's RETRIEVE uses them
  void reset() override {}
  std::vector<CacheEvent> take_events() override { return {}; }
  Status audit() const override { return {}; }

  // H7: "cache server <endpoint>: <reason>" while the client is not OK.
  std::optional<std::string> degraded() const;

 private:
  KvLayout layout_;
  uint32_t world_size_;
  std::string endpoint_;
  // The client must register some KV memory to look up: one chunk per group, never copied to.
  SharedKvArena arena_;
  server::CacheClient client_;  // after arena_: destroyed (and unregistered) first
  Duration lookup_wait_;        // longest wait for a lookup's replies
  TimePoint backoff_until_{};   // lookups miss until then: the last one timed out
};

}  // namespace kvtier
