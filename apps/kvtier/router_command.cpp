// `kvtier router`: an OpenAI-compatible reverse proxy in front of several `kvtier serve`
// instances, routing each request to the one that holds its prefix (docs/router.md).
#include <iostream>

#include "commands.h"
#include "kvtier/core/log.h"
#include "kvtier/engine/router_server.h"

namespace kvtier::cli {
namespace {

struct RouterFlags {
  std::vector<std::string> backends;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string policy = "cache";
  double health_interval_s = 0.5;
  double health_timeout_s = 1;
  double request_timeout_s = 600;
  size_t max_requests_in_flight = 256;
};

int router(const Config& config, const RouterFlags& flags) {
  init_logging(config.log, "router");
  RouterOptions options{.pool = {.policy = flags.policy,
                                 .health_interval = seconds_to_duration(flags.health_interval_s),
                                 .health_timeout = seconds_to_duration(flags.health_timeout_s)},
                        .host = flags.host,
                        .port = flags.port,
                        .request_timeout = seconds_to_duration(flags.request_timeout_s),
                        .max_requests_in_flight = flags.max_requests_in_flight};
  for (const std::string& url : flags.backends) {
    Result<BackendAddress> address = parse_backend_url(url);
    if (!address) {
      log_error(address.error().message);
      return 2;
    }
    options.pool.backends.push_back(std::move(*address));
  }
  return run_router(options, std::cout);
}

}  // namespace

Action add_router_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "router",
      "OpenAI-compatible reverse proxy in front of several `kvtier serve` instances: sends each "
      "request to the instance whose engine cores hold its prefix, as their KV events say, "
      "weighed by load; passes streams through; keeps an instance out of rotation while its "
      "/health is not 200 (docs/router.md)");
  cmd->footer(
      "Each backend must publish KV events (events.endpoint, and events.replay_endpoint) for "
      "routing by cache; the router reads where from the backend's GET /kvtier/routing. Without "
      "them it routes that backend by load. --config, KVTIER_* variables and --set set log.*.");
  auto flags = std::make_shared<RouterFlags>();
  cmd->add_option("--backend", flags->backends,
                  "A `kvtier serve` instance, http://host:port; repeat for each")
      ->required();
  cmd->add_option("--host", flags->host, "Address the router listens on (default 127.0.0.1)");
  cmd->add_option("--port", flags->port, "HTTP port (default 8000); 0 picks a free port, printed")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--policy", flags->policy,
                  "cache (longest cached prefix, weighed by load; the default) or load (fewest "
                  "requests in flight)")
      ->check(CLI::IsMember({"cache", "load"}));
  cmd->add_option("--health-interval", flags->health_interval_s,
                  "Seconds between two /health checks of each backend (default 0.5)")
      ->check(finite_in(0.01, 3600.0));
  cmd->add_option("--health-timeout", flags->health_timeout_s,
                  "Seconds a backend has to answer /health (default 1)")
      ->check(finite_in(0.01, 600.0));
  cmd->add_option("--request-timeout", flags->request_timeout_s,
                  "Seconds a backend has to answer a request, or to send a stream's next piece "
                  "(default 600)")
      ->check(finite_in(0.01, 86400.0));
  cmd->add_option("--max-requests-in-flight", flags->max_requests_in_flight,
                  "Completion requests relayed at once; more are answered 429 at once (default "
                  "256)")
      ->check(CLI::Range(1, 4096));
  return [cmd, flags](const Config& config) -> int {
    if (!cmd->parsed()) return -1;
    return router(config, *flags);
  };
}

}  // namespace kvtier::cli
