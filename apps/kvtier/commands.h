// Subcommands of the kvtier CLI. Each adds itself to the parser and returns the action to run
// if it was selected; actions get the effective configuration (defaults < --config file <
// KVTIER_* environment < --set).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "kvtier/core/config.h"

namespace kvtier::cli {

using Action = std::function<int(const Config&)>;

Action add_bench_command(CLI::App& app);
Action add_config_command(CLI::App& app);
Action add_engine_core_command(CLI::App& app);
Action add_worker_command(CLI::App& app);
Action add_server_command(CLI::App& app);
Action add_serve_command(CLI::App& app);
Action add_admin_command(CLI::App& app);
Action add_keygen_command(CLI::App& app);
Action add_router_command(CLI::App& app);

}  // namespace kvtier::cli
