#include "kvtier/connector/connector_factory.h"

#include <stdexcept>
#include <utility>

#include "kvtier/cache/host_pool.h"
#include "kvtier/connector/local_worker_connector.h"
#include "kvtier/connector/remote_cache_index.h"
#include "kvtier/connector/remote_worker_connector.h"
#include "kvtier/connector/tiered_cache_index.h"

namespace kvtier {
namespace {

bool tiers_configured(const TiersConfig& tiers) {
  return !tiers.disk_path.empty() || !tiers.redis_url.empty();
}

std::string rank_pool_name(const std::string& host_pool_name, uint32_t rank) {
  return host_pool_name + "-r" + std::to_string(rank);
}

// The local worker side as an engine gets it: the rank's KV caches and its share of the host
// pool, allocated on its device, and the LocalWorkerConnector over them.
class OwningLocalWorker final : public WorkerConnector {
 public:
  OwningLocalWorker(const Config& config, const ConnectorShape& shape, const WorkerSetup& setup)
      : device_(*setup.device),
        connector_(setup.rank, config.connector.transfer_granularity,
                   config.connector.load_in_step) {
    for (size_t g = 0; g < shape.layout.groups.size(); ++g) {
      Result<size_t> bytes = shape.layout.tensor_bytes(g, setup.device_blocks);
      if (!bytes) {
        free_caches();
        throw std::runtime_error("KV cache: " + bytes.error().message);
      }
      GroupCacheAddresses group{.num_blocks = setup.device_blocks};
      for (size_t i = 0; i < shape.layout.tensors_per_group(g); ++i) {
        group.bases.push_back(device_.allocate(*bytes));
      }
      caches_.groups.push_back(std::move(group));
    }
    // Anonymous memory, or the rank's object of the scheduler side's shared memory.
    auto pool =
        shape.host_pool_name.empty()
            ? HostPool::create(device_, shape.layout.max_chunk_bytes(), shape.host_slots)
            : HostPool::open_existing(device_, rank_pool_name(shape.host_pool_name, setup.rank),
                                      shape.layout.max_chunk_bytes(), shape.host_slots);
    if (!pool) {
      free_caches();
      throw std::runtime_error("host pool: " + pool.error().message);
    }
    pool_ = std::move(*pool);
    connector_.register_kv_caches(
        device_, shape.layout, caches_,
        HostSlots{pool_->slot_address(0), pool_->slot_bytes(), shape.host_slots},
        setup.compute_stream, transfer_options(config.transfer));
  }
  // The connector (its TransferEngine) goes first, then the pool, then the caches; the device
  // drained before (WorkerConnector's contract).
  ~OwningLocalWorker() override {
    connector_ = LocalWorkerConnector(connector_.rank());
    pool_.reset();
    free_caches();
  }

  uint32_t rank() const override { return connector_.rank(); }
  const KvCacheAddresses& kv_caches() const override { return caches_; }
  void start_load(const StepMetadata& metadata) override { connector_.start_load(metadata); }
  void wait_for_layer_load(KvLayer layer) override { connector_.wait_for_layer_load(layer); }
  void save_layer(KvLayer layer) override { connector_.save_layer(layer); }
  void queue_stores(const StepMetadata& metadata) override { connector_.queue_stores(metadata); }
  WorkerOutput take_output() override { return connector_.take_output(); }
  bool fail_stopped() const override { return connector_.fail_stopped(); }
  size_t in_flight() const override { return connector_.in_flight(); }
  Status audit() const override { return connector_.audit(); }

 private:
  void free_caches() {
    for (const GroupCacheAddresses& g : caches_.groups) {
      for (DeviceAddress base : g.bases) device_.free(base);
    }
    caches_.groups.clear();
  }

  Device& device_;
  KvCacheAddresses caches_;
  std::unique_ptr<HostPool> pool_;
  LocalWorkerConnector connector_;
};

}  // namespace

ConnectorFactory::ConnectorFactory(Config config, ConnectorShape shape)
    : config_(std::move(config)), shape_(std::move(shape)) {
  if (Status s = config_.validate(); !s) throw std::invalid_argument(s.error().message);
  if (Status s = shape_.layout.validate(); !s) throw std::invalid_argument(s.error().message);
  if (shape_.world_size == 0) throw std::invalid_argument("ConnectorFactory: world_size 0");
  if (config_.cache.mode == CacheMode::kLocal && shape_.host_slots == 0) {
    throw std::invalid_argument("ConnectorFactory: a local cache needs host slots");
  }
  if (config_.connector.enabled && config_.cache.mode == CacheMode::kLocal &&
      tiers_configured(config_.tiers) && shape_.host_pool_name.empty()) {
    throw std::invalid_argument(
        "ConnectorFactory: tiers (tiers.disk_path, tiers.redis_url) in cache.mode local need "
        "ConnectorShape::host_pool_name: the scheduler side's tier mover reaches the host pool "
        "through shared memory");
  }
}

void SchedulerSide::unlink_host_memory_names() {
  for (const std::unique_ptr<HostPool>& pool : host_memory) pool->unlink_name();
}

SchedulerSide ConnectorFactory::scheduler_side() const {
  SchedulerSide side;
  if (!config_.connector.enabled) return side;
  switch (config_.cache.mode) {
    case CacheMode::kLocal: {
      Result<std::unique_ptr<EvictionPolicy>> policy =
          make_eviction_policy(config_.cache.eviction, shape_.host_slots);
      if (!policy) throw std::invalid_argument(policy.error().message);
      side.cache = std::make_unique<CacheManager>(
          shape_.host_slots, shape_.layout.max_chunk_bytes(), std::move(*policy));
      if (!shape_.host_pool_name.empty()) {
        for (uint32_t r = 0; r < shape_.world_size; ++r) {
          auto pool =
              HostPool::create_unregistered(shape_.layout.max_chunk_bytes(), shape_.host_slots,
                                            rank_pool_name(shape_.host_pool_name, r));
          if (!pool) throw std::runtime_error(pool.error().message);
          side.host_memory.push_back(std::move(*pool));
        }
      }
      if (!tiers_configured(config_.tiers)) {
        side.index = std::make_unique<LocalCacheIndex>(*side.cache);
        break;
      }
      // Every rank's share of a chunk, rank 0 first, is one chunk in the tiers: the namespace
      // names the world size (the keys name the model and each rank's layout already).
      auto tiers = make_mover_tiers(
          config_.tiers, KeyNamespace{.model = "local", .layout_fingerprint = shape_.world_size});
      if (!tiers) throw std::runtime_error(tiers.error().message);
      std::vector<const HostPool*> pools;
      pools.reserve(side.host_memory.size());
      for (const std::unique_ptr<HostPool>& pool : side.host_memory) pools.push_back(pool.get());
      side.mover = std::make_unique<TierMover>(*side.cache, std::move(pools), std::move(*tiers),
                                               tier_mover_options(config_.tiers));
      side.index = std::make_unique<TieredCacheIndex>(*side.cache, *side.mover);
      break;
    }
    case CacheMode::kServer:
      side.index = std::make_unique<RemoteCacheIndex>(config_, shape_.layout, shape_.world_size);
      break;
  }
  side.connector = std::make_unique<SchedulerConnector>(
      scheduler_options(config_, shape_.world_size, shape_.layout, shape_.model), *side.index);
  return side;
}

TransferGranularity ConnectorFactory::granularity() const {
  return config_.connector.enabled && config_.cache.mode == CacheMode::kLocal
             ? config_.connector.transfer_granularity
             : TransferGranularity::kRequest;
}

bool ConnectorFactory::loads_in_step() const {
  return config_.connector.enabled && config_.connector.load_in_step;
}

std::unique_ptr<WorkerConnector> ConnectorFactory::worker(const WorkerSetup& setup) const {
  if (setup.rank >= shape_.world_size) {
    throw std::invalid_argument("ConnectorFactory: rank " + std::to_string(setup.rank) +
                                " of world_size " + std::to_string(shape_.world_size));
  }
  const CacheMode mode = config_.connector.enabled ? config_.cache.mode : CacheMode::kLocal;
  switch (mode) {
    case CacheMode::kLocal:
      if (setup.device == nullptr) {
        throw std::invalid_argument("ConnectorFactory: a local cache's worker needs a device");
      }
      return std::make_unique<OwningLocalWorker>(config_, shape_, setup);
    case CacheMode::kServer: {
      auto remote = std::make_unique<RemoteWorkerConnector>(
          setup.rank, shape_.layout, setup.device_blocks, config_, setup.while_waiting);
      if (config_.faults.stall_server_loads)
        remote->set_test_hook(Direction::kLoad, server::TestHook::kStall);
      // A server that is not up yet only makes this rank's loads and stores fail (H7).
      remote->wait_until_ok(seconds_to_duration(config_.server.connect_timeout_s));
      return remote;
    }
  }
  throw std::logic_error("ConnectorFactory: unknown cache mode");
}

}  // namespace kvtier
