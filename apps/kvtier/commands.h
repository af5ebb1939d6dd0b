// Subcommands of the kvtier CLI. Each adds itself to the parser and returns the action to run
// if it was selected; actions get the effective configuration (defaults < --config file <
// KVTIER_* environment < --set).
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <string>

#include "kvtier/core/config.h"

namespace kvtier::cli {

using Action = std::function<int(const Config&)>;

// CLI::Range(lo, hi) for a floating-point option, refusing what is not a finite number too
// (CLI11's Range lets "nan" through: every comparison with it is false).
inline CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) || value < lo ||
            value > hi) {
          return "must be a number in [" + CLI::detail::to_string(lo) + ", " +
                 CLI::detail::to_string(hi) + "], got " + text;
        }
        return {};
      },
      "FLOAT in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

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
