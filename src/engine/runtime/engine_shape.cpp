#include "kvtier/engine/engine_shape.h"

#include <filesystem>
#include <stdexcept>

namespace kvtier {

EngineShape engine_shape(const Config& config) {
  EngineShape shape;
  const ModelSection& m = config.model;
  shape.model = ModelConfig{.layers = m.layers,
                            .q_heads = m.q_heads,
                            .kv_heads = m.kv_heads,
                            .head_dim = m.head_dim,
                            .hidden = m.hidden,
                            .mlp_dim = m.mlp_dim,
                            .max_context = m.max_context,
                            .sliding_window = m.sliding_window,
                            .seed = m.seed};
  shape.world_size = config.engine.world_size;
  if (Status s = shape.model.validate_for(shape.world_size); !s) {
    throw std::invalid_argument(s.error().message + " (engine.world_size is " +
                                std::to_string(shape.world_size) + ")");
  }
  const std::vector<GroupBlocking> blocking(
      shape.model.num_kv_groups(),
      GroupBlocking{.block_size = config.layout.block_size,
                    .blocks_per_chunk = config.layout.blocks_per_chunk});
  shape.layout =
      model_kv_layout(shape.model, config.layout.device_layout, blocking, shape.world_size);
  shape.device_blocks = config.engine.device_blocks;
  const uint64_t chunk_all_ranks = uint64_t{shape.layout.max_chunk_bytes()} * shape.world_size;
  const uint64_t slots = config.cache.host_bytes / chunk_all_ranks;
  if (config.connector.enabled && slots == 0) {
    throw std::invalid_argument("cache.host_bytes (" + std::to_string(config.cache.host_bytes) +
                                ") holds no chunk: one chunk on every rank is " +
                                std::to_string(chunk_all_ranks) + " bytes");
  }
  shape.host_slots =
      static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(slots, 1), 1u << 24));
  shape.model_id = shape.model.model_id();
  return shape;
}

ConnectorShape connector_shape(const EngineShape& shape) {
  return ConnectorShape{.world_size = shape.world_size,
                        .layout = shape.layout,
                        .model = shape.model_id,
                        .host_slots = shape.host_slots};
}

uint64_t max_request_tokens(const EngineShape& shape) {
  return uint64_t{shape.device_blocks} * shape.layout.groups.front().block_size + 1;
}

bool tiers_enabled(const Config& config) {
  return config.connector.enabled && config.cache.mode == CacheMode::kLocal &&
         (!config.tiers.disk_path.empty() || !config.tiers.redis_url.empty());
}

Config engine_core_config(const Config& config, uint32_t core) {
  Config out = config;
  const uint32_t cores = config.engine.engine_cores;
  if (cores > 1 && !config.tiers.disk_path.empty()) {
    out.tiers.disk_path =
        (std::filesystem::path(config.tiers.disk_path) / ("core-" + std::to_string(core))).string();
    out.tiers.disk_bytes = config.tiers.disk_bytes / cores;
  }
  return out;
}

std::string host_pool_name(const Config& config, pid_t core_pid) {
  return tiers_enabled(config) ? "/kvtier-" + std::to_string(core_pid) + "-host" : "";
}

KeyNamespace device_key_namespace(const EngineShape& shape) {
  return {.model = shape.model_id,
          .layout_fingerprint = shape.layout.fingerprint(),
          .cache_salt = "device"};
}

KeyNamespace host_key_namespace(const EngineShape& shape, uint32_t group) {
  return {
      .model = shape.model_id, .layout_fingerprint = shape.layout.fingerprint(), .group = group};
}

bool routes_by_cache(const Config& config) {
  return config.routing.policy == "cache" && config.engine.engine_cores > 1;
}

std::string core_events_endpoint(const std::string& endpoint, uint32_t core) {
  if (endpoint.empty() || core == 0) return endpoint;
  if (endpoint.starts_with("tcp://")) {
    const size_t colon = endpoint.rfind(':');
    const std::string port = endpoint.substr(colon + 1);
    if (colon < 6 || port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
        port.size() > 5) {
      throw std::invalid_argument("events endpoint " + endpoint +
                                  ": no port to number engine "
                                  "cores by (tcp://host:port)");
    }
    return endpoint.substr(0, colon + 1) + std::to_string(std::stoul(port) + core);
  }
  return endpoint + "-" + std::to_string(core);
}

std::string events_endpoint(const std::string& run_dir, uint32_t core) {
  return "ipc://" + run_dir + "/events-" + std::to_string(core) + ".ipc";
}
std::string events_replay_endpoint(const std::string& run_dir, uint32_t core) {
  return "ipc://" + run_dir + "/events-replay-" + std::to_string(core) + ".ipc";
}

std::string frontend_endpoint(const std::string& run_dir) {
  return "ipc://" + run_dir + "/frontend.ipc";
}
std::string core_endpoint(const std::string& run_dir, uint32_t core) {
  return "ipc://" + run_dir + "/core-" + std::to_string(core) + ".ipc";
}
std::string collective_endpoint(const std::string& run_dir, uint32_t core) {
  return "ipc://" + run_dir + "/core-" + std::to_string(core) + "-collective.ipc";
}

}  // namespace kvtier
