// EngineShape: what an engine core and its workers must agree on, derived from the config alone
// so that every process computes the same: the model, each rank's KV layout, the device blocks
// per group and the host cache's slots.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "kvtier/connector/connector_factory.h"
#include "kvtier/core/config.h"
#include "kvtier/engine/model_config.h"

namespace kvtier {

struct EngineShape {
  ModelConfig model;
  KvLayout layout;  // one rank's share; every group has layout.block_size tokens/block
  uint32_t world_size = 1;
  uint32_t device_blocks = 0;  // per rank and group
  uint32_t host_slots = 0;     // slots of the host cache; a rank's pool holds its share of each
  std::string model_id;        // KeyNamespace::model
};

// Throws std::invalid_argument naming the field when the sections do not fit together (the
// model does not split over world_size, a host cache smaller than one chunk per rank, …).
EngineShape engine_shape(const Config& config);

// What the connector's factory needs of the shape (the same in the engine core and every rank).
ConnectorShape connector_shape(const EngineShape& shape);

// The most prompt + max_tokens one request may have: its KV at its longest (every token but the
// last generated one) fills the device blocks of one group. A longer request can never run.
uint64_t max_request_tokens(const EngineShape& shape);

// Whether the config asks for tiers below the host cache (tiers.disk_path or tiers.redis_url).
bool tiers_enabled(const Config& config);

// The config engine core `core` runs: with several cores each has its own directory of the disk
// tier (a disk tier directory has one owner), tiers.disk_path/core-<core>, and an equal share of
// tiers.disk_bytes. With one core, `config` unchanged.
Config engine_core_config(const Config& config, uint32_t core);

// ConnectorShape::host_pool_name of the engine core with pid `core_pid` when tiers are on (its
// workers, its children, name it from getppid()); empty otherwise.
std::string host_pool_name(const Config& config, pid_t core_pid);

// The namespaces of the keys an engine core's KV events name (docs/events.md), so that the
// frontend computes them from a prompt: the device prefix cache keys every block_size tokens
// under device_key_namespace; the host cache (and the tiers below it) keys every chunk of
// group g under host_key_namespace(shape, g), as the connector does.
KeyNamespace device_key_namespace(const EngineShape& shape);
KeyNamespace host_key_namespace(const EngineShape& shape, uint32_t group = 0);

// Whether the frontend routes by the cores' KV events: routing.policy cache with several cores.
bool routes_by_cache(const Config& config);

// events.endpoint / events.replay_endpoint as engine core `core` binds it: core 0 the endpoint
// itself, core n > 0 a tcp port n higher, an ipc path with "-<n>" appended. Empty stays empty.
std::string core_events_endpoint(const std::string& endpoint, uint32_t core);

// ZeroMQ endpoints in the run dir (docs/engine.md).
std::string frontend_endpoint(const std::string& run_dir);
std::string core_endpoint(const std::string& run_dir, uint32_t core);
std::string collective_endpoint(const std::string& run_dir, uint32_t core);
// Engine core `core`'s KV events and their replay, for the frontend's routing.
std::string events_endpoint(const std::string& run_dir, uint32_t core);
std::string events_replay_endpoint(const std::string& run_dir, uint32_t core);

}  // namespace kvtier
