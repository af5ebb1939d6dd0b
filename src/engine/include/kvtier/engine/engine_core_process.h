// `kvtier engine-core <n>`: one engine core. It starts its `world_size` workers, runs the
// EngineScheduler's steps on them, streams request outputs to the frontend and reports its
// health (docs/engine.md).
//
// Health duties (docs/architecture.md): a worker that dies, reports a fatal error or stays
// silent for engine.stall_timeout_s is reported to the frontend in a `failed` message before
// anything is cleaned up (H2, H6); so is a fail-stop (F7 → H4), and a core that stops making
// progress (H8, ProgressWatchdog: "no progress (H8): …" naming the request). Requests in flight
// then end with an error (H5), the workers are stopped and the core exits. The loop never
// blocks longer than 10 ms, so it sees a death within one poll and heartbeats every
// engine.heartbeat_interval_s.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/core/config.h"

namespace kvtier {

// Returns the process exit code: 0 after a shutdown message, 1 after a failure.
int run_engine_core(const Config& config, uint32_t core, const std::string& run_dir,
                    const std::string& config_path);

}  // namespace kvtier
