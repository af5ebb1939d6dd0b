// The `kvtier frontend` process: CoreManager + FrontendServer until SIGINT/SIGTERM.
#pragma once

#include <filesystem>
#include <ostream>

#include "kvtier/core/config.h"

namespace kvtier {

// Starts config.engine.engine_cores engine cores (this executable, role `engine-core <n>`),
// binds the HTTP server and prints "kvtier: serving <model_name> on http://<host>:<port>" to
// `out` (flushed; with engine.port 0 the port actually bound). On SIGINT or SIGTERM: graceful
// shutdown (CoreManager::shutdown, /health 503 "closed" meanwhile), then returns 0. Returns 1
// when the cores cannot be started or the port cannot be bound (message on stderr).
// `run_dir` holds the endpoints and is removed at shutdown.
int run_frontend(const Config& config, const std::filesystem::path& run_dir, std::ostream& out);

}  // namespace kvtier
