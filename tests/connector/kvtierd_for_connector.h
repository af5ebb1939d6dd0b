// A real kvtierd (`kvtier server`) sized for one rank's KV layout, and the config that points
// the connector at it (`cache.mode: server`). Used by the connector's and the engine's tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvtier/core/config.h"
#include "kvtier/core/kv_layout.h"
#include "server/kvtierd_process.h"

namespace kvtier::testing {

constexpr double kServerHeartbeatS = 0.1;  // client PINGs: kvtierd's death is seen within 0.2 s

// One rank's share of a chunk of `group` fits a slot of this kvtierd. `extra` settings follow.
inline std::unique_ptr<KvtierdProcess> start_kvtierd(const KvGroup& g, const std::string& endpoint,
                                                     bool test_hooks = false,
                                                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> settings{
      "layout.layers=" + std::to_string(g.layers),
      "layout.kv_heads=" + std::to_string(g.kv_heads),
      "layout.head_dim=" + std::to_string(g.head_dim),
      "layout.dtype_bytes=" + std::to_string(g.dtype_bytes),
      "layout.block_size=" + std::to_string(g.block_size),
      "layout.blocks_per_chunk=" + std::to_string(g.blocks_per_chunk),
      "cache.host_bytes=" + std::to_string(64ull << 20),
      "server.heartbeat_interval_s=" + std::to_string(kServerHeartbeatS),
      "server.client_timeout_s=2"};
  settings.insert(settings.end(), extra.begin(), extra.end());
  return std::make_unique<KvtierdProcess>(endpoint, settings, test_hooks);
}

// The one-group layout the remote connector's tests run with: 2 layers, 4 blocks of 4 tokens per
// chunk.
inline KvLayout remote_layout() {
  return KvLayout{.device_layout = DeviceLayout::kPerLayer,
                  .groups = {KvGroup{.layers = 2,
                                     .kv_heads = 1,
                                     .head_dim = 4,
                                     .dtype_bytes = 4,
                                     .block_size = 4,
                                     .blocks_per_chunk = 4}}};
}

inline Config server_mode(Config c, const std::string& endpoint) {
  c.cache.mode = CacheMode::kServer;
  c.server.endpoint = endpoint;
  c.server.heartbeat_interval_s = kServerHeartbeatS;
  c.server.connect_timeout_s = 10;
  return c;
}

}  // namespace kvtier::testing
