// kvtier: the command-line entry point. Built twice: `kvtier` with every command, and `kvtierd`
// (KVTIER_SERVICE_ONLY) with the cache service's commands only: server, admin, keygen, config.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "commands.h"
#include "kvtier/core/log.h"

int main(int argc, char** argv) {
#ifdef KVTIER_SERVICE_ONLY
  CLI::App app{"kvtierd: the kvtier cache service (kvtier's server, admin, keygen and config)"};
#else
  CLI::App app{"kvtier: a KV-cache offload engine for LLM inference"};
#endif
  app.set_version_flag("--version", "kvtier " KVTIER_VERSION);
  app.require_subcommand(1);
  kvtier::ConfigSources sources;
  std::string config_path;
  app.add_option("--config", config_path, "YAML configuration file (see docs/config.md)")
      ->check([](const std::string& path) {
        return path.empty() ? std::string("--config needs a file's path, not an empty string")
                            : std::string();
      });
  app.add_option("--set", sources.overrides,
                 "Override one field, e.g. --set transfer.max_batch_descriptors=1024 "
                 "(repeatable; wins over the file and KVTIER_* variables)");
  std::string log_level, log_format;
  app.add_option("--log-level", log_level,
                 "Least severe log lines: trace, debug, info, warning, error, off (log.level)");
  app.add_option("--log-format", log_format,
                 "Log lines as text, or json (one object per line) for log shippers (log.format)");
  app.fallthrough();  // --config / --set may follow the subcommand too
#ifdef KVTIER_SERVICE_ONLY
  const kvtier::cli::Action actions[] = {
      kvtier::cli::add_config_command(app), kvtier::cli::add_server_command(app),
      kvtier::cli::add_admin_command(app), kvtier::cli::add_keygen_command(app)};
#else
  const kvtier::cli::Action actions[] = {
      kvtier::cli::add_bench_command(app),       kvtier::cli::add_config_command(app),
      kvtier::cli::add_engine_core_command(app), kvtier::cli::add_worker_command(app),
      kvtier::cli::add_server_command(app),      kvtier::cli::add_serve_command(app),
      kvtier::cli::add_admin_command(app),       kvtier::cli::add_keygen_command(app),
      kvtier::cli::add_router_command(app)};
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!config_path.empty()) sources.yaml_path = config_path;
  if (!log_level.empty()) sources.overrides.push_back("log.level=" + log_level);
  if (!log_format.empty()) sources.overrides.push_back("log.format=" + log_format);
  sources.env = kvtier::kvtier_environment();
  const auto config = kvtier::load_config(sources);
  if (!config) {
    std::cerr << "kvtier: configuration: " << config.error().message << "\n";
    return 2;
  }
  try {
    for (const auto& action : actions) {
      if (int rc = action(*config); rc >= 0) return rc;
    }
    return 2;
  } catch (const std::exception& e) {
    kvtier::log_error(std::string("fatal: ") + e.what());
    return 1;
  }
}
