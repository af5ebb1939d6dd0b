// `kvtier serve` and its re-executed role `kvtier frontend` (docs/engine.md).
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>

#include "commands.h"
#include "kvtier/core/child_process.h"
#include "kvtier/core/log.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/engine/frontend_process.h"

extern char** environ;

namespace kvtier::cli {
namespace {

struct ServeFlags {
  std::optional<std::string> host;
  std::optional<uint32_t> port;
  std::optional<uint32_t> engine_cores;
  std::optional<uint32_t> world_size;
  std::optional<CacheMode> cache_mode;
  std::optional<std::string> cache_server;
};

// The resolved configuration is written to the run dir; the re-executed processes must read it
// as is, not with KVTIER_* variables laid over it again (they may be overridden by --set).
void drop_kvtier_environment() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (std::strncmp(*e, "KVTIER_", 7) == 0 && eq != nullptr)
      names.emplace_back(*e, static_cast<size_t>(eq - *e));
  }
  for (const std::string& name : names) unsetenv(name.c_str());
}

int serve(Config config, const ServeFlags& flags) {
  init_logging(config.log, "serve");
  if (flags.host) config.engine.host = *flags.host;
  if (flags.port) config.engine.port = *flags.port;
  if (flags.engine_cores) config.engine.engine_cores = *flags.engine_cores;
  if (flags.world_size) config.engine.world_size = *flags.world_size;
  if (flags.cache_mode) config.cache.mode = *flags.cache_mode;
  if (flags.cache_server) config.server.endpoint = *flags.cache_server;
  if (Status ok = config.validate(); !ok) {
    log_error("configuration: " + ok.error().message);
    return 2;
  }
  try {
    (void)engine_shape(config);  // the model splits over the ranks, the cache holds a chunk
  } catch (const std::invalid_argument& e) {
    log_error(std::string("configuration: ") + e.what());
    return 2;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kvtier-serve-XXXXXX";
  // ipc:// endpoints live in the run dir: a Unix socket path has at most 107 bytes.
  if (pattern.size() + std::strlen("/core-64-collective.ipc") > 107) {
    log_error("TMPDIR is too long for ipc:// socket paths: " + pattern);
    return 2;
  }
  if (mkdtemp(pattern.data()) == nullptr) {
    log_error("cannot create a run directory " + pattern + ": " + std::strerror(errno));
    return 1;
  }
  const std::filesystem::path run_dir = pattern;
  const std::filesystem::path config_path = run_dir / "config.yaml";
  {
    std::ofstream file(config_path);
    file << to_yaml(config);
    if (!file.flush()) {
      log_error("cannot write " + config_path.string());
      std::filesystem::remove_all(run_dir);
      return 1;
    }
  }
  drop_kvtier_environment();
  const std::string exe = self_executable();
  std::vector<std::string> argv = {exe,        "frontend",          "--run-dir", run_dir.string(),
                                   "--config", config_path.string()};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  execv(exe.c_str(), args.data());
  log_error("cannot execute " + exe + ": " + std::strerror(errno));
  std::filesystem::remove_all(run_dir);
  return 1;
}

}  // namespace

Action add_serve_command(CLI::App& app) {
  CLI::App* serve = app.add_subcommand(
      "serve",
      "Serve the tiny test/demo model over an OpenAI-compatible HTTP API: /v1/completions, "
      "/v1/chat/completions, /v1/models, /health, /metrics (docs/engine.md)");
  serve->footer(
      "Every setting is a configuration field (docs/config.md): --config FILE, KVTIER_* "
      "variables and --set section.field=value work here too; sections engine.*, model.*, "
      "connector.*, cache.* and faults.* shape the server. The flags above are shortcuts.");
  auto flags = std::make_shared<ServeFlags>();
  serve->add_option("--host", flags->host, "Address the HTTP server listens on (engine.host)");
  serve
      ->add_option("--port", flags->port,
                   "HTTP port (engine.port); 0 picks a free port, printed at start")
      ->check(CLI::Range(0, 65535));
  serve
      ->add_option("--engine-cores", flags->engine_cores,
                   "Engine-core processes, each a scheduler with its own workers "
                   "(engine.engine_cores)")
      ->check(CLI::Range(1, 64));
  serve
      ->add_option("--world-size", flags->world_size,
                   "Tensor-parallel worker processes per engine core; must divide "
                   "model.kv_heads and model.mlp_dim (engine.world_size)")
      ->check(CLI::Range(1, 64));
  serve
      ->add_option_function<std::string>(
          "--cache-mode",
          [flags](const std::string& name) { flags->cache_mode = parse_cache_mode(name).value(); },
          "Where offloaded KV goes: local (an in-process host cache, the default) or "
          "server (kvtierd at --cache-server) (cache.mode)")
      ->check([](const std::string& name) {
        const Result<CacheMode> mode = parse_cache_mode(name);
        return mode ? std::string() : mode.error().message;
      });
  serve->add_option("--cache-server", flags->cache_server,
                    "kvtierd's ZeroMQ endpoint for --cache-mode server, e.g. tcp://127.0.0.1:5557 "
                    "(server.endpoint)");
  CLI::App* frontend = app.add_subcommand(
      "frontend", "Internal role of `kvtier serve`: HTTP server and engine-core manager");
  frontend->group("");  // not listed: started by `kvtier serve` only
  auto run_dir = std::make_shared<std::string>();
  frontend->add_option("--run-dir", *run_dir, "The run directory `kvtier serve` created")
      ->required();
  return [serve, flags, frontend, run_dir](const Config& config) -> int {
    if (serve->parsed()) return kvtier::cli::serve(config, *flags);
    if (frontend->parsed()) {
      init_logging(config.log, "frontend");
      return run_frontend(config, *run_dir, std::cout);
    }
    return -1;
  };
}

}  // namespace kvtier::cli
