// ConnectorFactory: builds both sides of the connector for the cache a validated Config asks
// for, so that an engine uses the in-process host cache and kvtierd through the same two
// objects. An engine builds one factory in its scheduling process and calls scheduler_side(),
// and one in each rank's process and calls worker(); every process passes the same shape.
//
//   cache.mode   scheduler side                              worker side (per rank)
//   local        CacheManager + LocalCacheIndex              LocalWorkerConnector: KV caches and
//                                                            the rank's host pool on its device
//   local with   the host pool's memory (shared memory, one  LocalWorkerConnector over the
//   tiers        object per rank), CacheManager, TierMover   rank's object, mapped and
//                + TieredCacheIndex                          registered with its device
//   server       RemoteCacheIndex (kvtierd at                RemoteWorkerConnector: KV caches in
//                server.endpoint)                            shared memory kvtierd maps
//
// Tiers in cache.mode local (tiers.disk_path or tiers.redis_url set) run in the scheduler's
// process, beside the cache's index, as kvtierd runs them: the scheduler side owns the host
// pool's memory, one shared-memory object per rank named ConnectorShape::host_pool_name +
// "-r<rank>", and its TierMover copies a chunk's shares between the tiers and those objects;
// each rank's worker side maps its object (so scheduler_side() comes before any worker()).
// A chunk in the tiers is every rank's share, rank 0 first, under the namespace
// {model "local", layout fingerprint = world_size}.
//
// With connector.enabled false there is no scheduler side (every member null) and the worker
// side is a local one that is never handed a job. The remote sides wait at most
// server.connect_timeout_s for their first registration: a kvtierd that is not up yet only
// makes them start DEGRADED (H7).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/cache/cache_manager.h"
#include "kvtier/cache/host_pool.h"
#include "kvtier/cache/tier_mover.h"
#include "kvtier/connector/cache_index.h"
#include "kvtier/connector/scheduler_connector.h"
#include "kvtier/connector/worker_connector.h"
#include "kvtier/core/config.h"
#include "kvtier/core/kv_layout.h"
#include "kvtier/device/device.h"

namespace kvtier {

// What the engine derives from its model and the config; the same in every process.
struct ConnectorShape {
  uint32_t world_size = 1;
  KvLayout layout;          // one rank's share of a chunk; every rank holds the same shape
  std::string model;        // KeyNamespace::model: part of every key
  uint32_t host_slots = 0;  // cache.mode local: slots of the host cache (each rank's pool holds
                            // its share of each)
  // cache.mode local: empty, each rank's pool is its own anonymous memory; else the pools are
  // shared memory the scheduler side creates, "<host_pool_name>-r<rank>" ('/' then no other
  // '/'), which tiers need. Unique per scheduler side on the machine.
  std::string host_pool_name;
};

// The scheduler side. Members are destroyed connector first, then the index, the mover, the
// cache and the memory.
struct SchedulerSide {
  // cache.mode local with a host_pool_name: each rank's pool, rank by rank (the ranks map them).
  std::vector<std::unique_ptr<HostPool>> host_memory;
  std::unique_ptr<CacheManager> cache;            // cache.mode local; null otherwise
  std::unique_ptr<TierMover> mover;               // cache.mode local with tiers; null otherwise
  std::unique_ptr<CacheIndex> index;              // over `cache` (and `mover`), or kvtierd's
  std::unique_ptr<SchedulerConnector> connector;  // over `index`

  // Removes the names of host_memory's objects: call once every rank mapped its object, so
  // that no object outlives the processes that use it, however they end.
  void unlink_host_memory_names();
};

// One rank's part of the worker side.
struct WorkerSetup {
  uint32_t rank = 0;
  uint32_t device_blocks = 0;  // KV blocks per group
  // cache.mode local: the rank's device (its KV caches and host pool are allocated there and
  // the copies run there) and the stream its forward pass writes KV on (F10 fences).
  Device* device = nullptr;
  StreamHandle compute_stream{};
  // cache.mode server: called about every engine.heartbeat_interval_s while start_load waits
  // for kvtierd (flushed stores, loads in the step); the worker heartbeats from it, so a slow
  // cache server (one that still answers its client's PINGs) holds the step, each wait ending
  // by its deadline (F8), without making the worker look stalled (H6, H7). A server the client
  // loses meanwhile ends the wait at once, Unprovable (F7). May be empty.
  std::function<void()> while_waiting;
};

class ConnectorFactory {
 public:
  // std::invalid_argument when `config` is not valid (Config::validate) or `shape` does not fit
  // it (an invalid layout, world_size 0, no host slot for a local cache, tiers in a local cache
  // without a host_pool_name).
  ConnectorFactory(Config config, ConnectorShape shape);

  const Config& config() const { return config_; }
  const ConnectorShape& shape() const { return shape_; }

  // std::runtime_error when the host memory or the tiers cannot be had (it names why).
  SchedulerSide scheduler_side() const;
  // The rank's worker side and its KV caches (WorkerConnector::kv_caches()). Destroy it only
  // once the device drained. std::invalid_argument for a bad setup (no device for a local cache,
  // a rank not below world_size).
  std::unique_ptr<WorkerConnector> worker(const WorkerSetup& setup) const;
  // How the worker sides move KV: connector.transfer_granularity for the in-process cache;
  // whole requests for kvtierd (its RemoteWorkerConnector does nothing per layer).
  TransferGranularity granularity() const;
  // connector.load_in_step (false when the connector is off): the workers order each step's
  // loads before the forward pass reads them, so the engine may compute a loading request in
  // its load's step (and keeps that step's result only if the load completed, F4).
  bool loads_in_step() const;

 private:
  Config config_;
  ConnectorShape shape_;
};

}  // namespace kvtier
