// The roles `kvtier serve` starts its processes in. They are not meant to be run by hand: their
// parent gives them a run dir and the resolved configuration (docs/engine.md).
#include <cstdio>

#include "commands.h"
#include "kvtier/core/log.h"
#include "kvtier/engine/engine_core_process.h"
#include "kvtier/engine/worker_process.h"

namespace kvtier::cli {
namespace {

struct ProcessArgs {
  std::string run_dir;
  std::string config_path;
};

void add_process_options(CLI::App* cmd, ProcessArgs& args) {
  cmd->add_option("--run-dir", args.run_dir, "The serve run dir (ZeroMQ endpoints)")->required();
  cmd->group("");  // hidden from the top-level help
}

}  // namespace

Action add_engine_core_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("engine-core", "Engine core <n> of kvtier serve (internal)");
  auto args = std::make_shared<ProcessArgs>();
  auto core = std::make_shared<uint32_t>(0);
  cmd->add_option("core", *core, "Engine core index")->required();
  add_process_options(cmd, *args);
  return [cmd, args, core, &app](const Config& config) -> int {
    if (!cmd->parsed()) return -1;
    init_logging(config.log, "engine-core-" + std::to_string(*core));
    return run_engine_core(config, *core, args->run_dir,
                           app.get_option("--config")->as<std::string>());
  };
}

Action add_worker_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("worker", "Worker <core>/<rank> of kvtier serve (internal)");
  auto args = std::make_shared<ProcessArgs>();
  auto name = std::make_shared<std::string>();
  cmd->add_option("core/rank", *name, "Engine core and rank, e.g. 0/1")->required();
  add_process_options(cmd, *args);
  return [cmd, args, name](const Config& config) -> int {
    if (!cmd->parsed()) return -1;
    unsigned core = 0, rank = 0;
    if (std::sscanf(name->c_str(), "%u/%u", &core, &rank) != 2) {
      init_logging(config.log, "worker");
      log_error("expected <core>/<rank>, got '" + *name + "'");
      return 2;
    }
    init_logging(config.log, "worker-" + std::to_string(core) + "/" + std::to_string(rank));
    return run_worker(config, core, rank, args->run_dir);
  };
}

}  // namespace kvtier::cli
