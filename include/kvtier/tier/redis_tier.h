// RedisTier (L3): chunks in one redis-server or a Redis Cluster, shared by every engine that
// uses the same server and namespace. A cache that outgrows one machine.
//
// Keys: key_prefix + the chunk key's 32 hex digits, where the prefix comes from
// redis_key_prefix(namespace) ("kvtier:<model>:<layout fingerprint>:"). Values are chunk
// records (chunk_record.h), so a value that was changed, truncated or written under another key
// reads as kCorrupt. Redis's own maxmemory policy (e.g. allkeys-lru) bounds its size.
//
// Calls are pipelined per node: put is one SET per key, get one GET, contains one EXISTS, sent
// without waiting for replies, to every node of the call at once. A chunk is never copied: a
// SET sends it from the caller's buffer, a GET reads it into dst. Cluster mode is detected on
// first contact; MOVED and ASK redirections are followed. Each node has a pool of up to
// pool_size connections. The call's timeout bounds connecting, waiting for a pooled connection
// and every socket read and write. A put of chunks too large to stay in the CPU's L2 cache from
// their checksum to their send has its checksums computed ahead, in order, on a helper on another
// CPU while the calling thread sends (the caller still computes any the helper has not reached).
//
// Parts (tier.h): a Redis Cluster's masters. A master that cannot be reached, times out or
// answers CLUSTERDOWN/LOADING is down: its keys are kSkipped at once (contains answers false)
// while the other masters serve theirs, down_parts() names it ("host:port"), and it is probed
// with the node_health backoff until it reports cluster_state:ok (or a failover gave its slots
// to another master). When every master is down, calls fail whole. One server fails whole.
//
// open() does not connect: an engine starts while Redis is away, and the tier's first call
// fails instead (the health wrapper then marks it DOWN and probes it).
//
// Thread-safety: every call may come from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/key_list.h"
#include "kvtier/tier/health_state.h"
#include "kvtier/tier/tier.h"

namespace kvtier {

class TaskPool;

namespace tier_internal {
class RedisRouter;
}  // namespace tier_internal

// "kvtier:<model>:<16 hex digits of the layout fingerprint>:". Braces in the model name become
// '_', so a model name never acts as a cluster hash tag (which would put every chunk in one slot).
std::string redis_key_prefix(const KeyNamespace& ns);

struct RedisTierOptions {
  std::string url;            // redis://host[:port] of the server or of any cluster node
  std::string key_prefix;     // redis_key_prefix(namespace)
  uint32_t pool_size = 4;     // connections per node, at most
  HealthOptions node_health;  // the probes of a cluster's masters that are down
  // KV events (publish_events): Redis drops keys without telling, so the tier announces as
  // stored at most this many chunks, the newest; an older one is announced removed, as is one a
  // get finds missing.
  size_t max_announced_chunks = size_t{1} << 20;
};

class RedisTier final : public Tier {
 public:
  // kInvalidArgument for a malformed URL, a zero pool size or node_health options that
  // HealthState rejects. Does not connect.
  static Result<std::unique_ptr<RedisTier>> open(const RedisTierOptions& options);
  ~RedisTier() override;

  std::string name() const override { return "redis"; }

  std::string redis_key(const ChunkKey& key) const { return options_.key_prefix + key.hex(); }
  // Whether the server turned out to be a cluster (false before the first successful call).
  bool cluster_mode() const;

  // The cluster's masters that are down now; none for one server.
  std::vector<DownPart> down_parts() const override;
  void probe_down_parts() override;

 protected:
  Result<std::vector<ChunkStatus>> do_put(std::span<const ChunkKey> keys,
                                          std::span<const std::span<const std::byte>> chunks,
                                          Duration timeout) override;
  Result<std::vector<ChunkStatus>> do_get(std::span<const ChunkKey> keys,
                                          std::span<const std::span<std::byte>> dst,
                                          Duration timeout) override;
  Result<std::vector<bool>> do_contains(std::span<const ChunkKey> keys, Duration timeout) override;
  Status do_ping(Duration timeout) override;

 private:
  RedisTier(RedisTierOptions options, std::unique_ptr<tier_internal::RedisRouter> router);

  const RedisTierOptions options_;
  std::unique_ptr<tier_internal::RedisRouter> router_;
  // Computes puts' checksums ahead of the send (null on one CPU).
  std::unique_ptr<TaskPool> checksum_helpers_;
  // What the tier announced stored, oldest first (at most options_.max_announced_chunks), and
  // its events' order.
  std::mutex announced_mutex_;
  KeyList announced_;
};

}  // namespace kvtier
