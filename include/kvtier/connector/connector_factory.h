// ConnectorFactory: builds both sides of the connector for the cache a validated Config asks
// for, so that an engine uses the in-process host cache and kvtierd through the same two
// objects. An engine builds one factory in its scheduling process and calls scheduler_side(),
// and one in each rank's process and calls worker(); every process passes the same shape.
//
//   cache.mode   scheduler side                              worker side (per rank)
//   local        CacheManager + LocalCacheIndex              LocalWorkerConnector: KV caches and
//                                                            the rank's host pool on its device
//   server       RemoteCacheIndex (kvtierd at                RemoteWorkerConnector: KV caches in
//                server.endpoint)                            shared memory kvtierd maps
//
// With connector.enabled false there is no scheduler side (every member null) and the worker
// side is a local one that is never handed a job. The remote sides wait at most
// server.connect_timeout_s for their first registration: a kvtierd that is not up yet only
// makes them start DEGRADED (H7).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/cache/cache_manager.h"
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
};

// The scheduler side. Members are destroyed connector first, then the index, then the cache.
struct SchedulerSide {
  std::unique_ptr<CacheManager> cache;            // cache.mode local; null otherwise
  std::unique_ptr<CacheIndex> index;              // over `cache`, or kvtierd's
  std::unique_ptr<SchedulerConnector> connector;  // over `index`
};

// One rank's part of the worker side.
struct WorkerSetup {
  uint32_t rank = 0;
  uint32_t device_blocks = 0;  // KV blocks per group
  // cache.mode local: the rank's device (its KV caches and host pool are allocated there and
  // the copies run there) and the stream its forward pass writes KV on (F10 fences).
  Device* device = nullptr;
  StreamHandle compute_stream{};
};

class ConnectorFactory {
 public:
  // std::invalid_argument when `config` is not valid (Config::validate) or `shape` does not fit
  // it (an invalid layout, world_size 0, no host slot for a local cache).
  ConnectorFactory(Config config, ConnectorShape shape);

  const Config& config() const { return config_; }
  const ConnectorShape& shape() const { return shape_; }

  SchedulerSide scheduler_side() const;
  // The rank's worker side and its KV caches (WorkerConnector::kv_caches()). Destroy it only
  // once the device drained. std::invalid_argument for a bad setup (no device for a local cache,
  // a rank not below world_size).
  std::unique_ptr<WorkerConnector> worker(const WorkerSetup& setup) const;

 private:
  Config config_;
  ConnectorShape shape_;
};

}  // namespace kvtier
