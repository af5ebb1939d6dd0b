#include "kvtier/tier/tier_factory.h"

#include "kvtier/tier/disk_tier.h"
#include "kvtier/tier/redis_tier.h"

namespace kvtier {

Result<std::vector<std::unique_ptr<HealthCheckedTier>>> make_tiers(const TiersConfig& config,
                                                                   const KeyNamespace& ns,
                                                                   const Clock& clock) {
  const auto health = [&](std::string_view tier_name) {
    return HealthOptions{.probe_initial = seconds_to_duration(config.probe_initial_s),
                         .probe_max = seconds_to_duration(config.probe_max_s),
                         .probe_timeout = tier_timeout(config, tier_name),
                         .clock = &clock};
  };
  std::vector<std::unique_ptr<HealthCheckedTier>> tiers;
  if (!config.disk_path.empty()) {
    Result<std::unique_ptr<DiskTier>> disk = DiskTier::open({.directory = config.disk_path,
                                                             .capacity_bytes = config.disk_bytes,
                                                             .io_threads = config.disk_io_threads});
    if (!disk) {
      return make_error(disk.error().code, "tiers.disk_path: " + disk.error().message);
    }
    tiers.push_back(std::make_unique<HealthCheckedTier>(std::move(*disk), health("disk")));
  }
  if (!config.redis_url.empty()) {
    Result<std::unique_ptr<RedisTier>> redis = RedisTier::open({.url = config.redis_url,
                                                                .key_prefix = redis_key_prefix(ns),
                                                                .pool_size = config.redis_pool_size,
                                                                .node_health = health("redis")});
    if (!redis) {
      return make_error(redis.error().code, "tiers.redis_url: " + redis.error().message);
    }
    tiers.push_back(std::make_unique<HealthCheckedTier>(std::move(*redis), health("redis")));
  }
  return tiers;
}

Duration tier_timeout(const TiersConfig& config, std::string_view tier_name) {
  return seconds_to_duration(tier_name == "disk" ? config.disk_timeout_s : config.redis_timeout_s);
}

}  // namespace kvtier
