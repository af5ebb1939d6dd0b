// Subcommands of the kvtier CLI. Each adds itself to the parser and runs when selected.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace kvtier::cli {

// Returns the action to run if the subcommand was selected.
std::function<int()> add_bench_command(CLI::App& app);

}  // namespace kvtier::cli
