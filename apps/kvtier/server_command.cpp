#include <sstream>

#include "commands.h"
#include "kvtier/core/log.h"
#include "kvtier/core/stop_signals.h"
#include "kvtier/server/server.h"
#include "metrics_http.h"

namespace kvtier::cli {

Action add_server_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "server", "Run kvtierd, the cache server (endpoint: server.endpoint; see docs/protocol.md)");
  auto test_hooks = std::make_shared<bool>(false);
  cmd->add_flag("--test-hooks", *test_hooks,
                "Honour the 'hook' field of requests (throw, no_reply, stall, hang_copies, "
                "fail_copies, fail_partway, service); "
                "for tests only");
  auto insecure = std::make_shared<bool>(false);
  cmd->add_flag("--insecure", *insecure,
                "Serve a tcp:// endpoint without CURVE (server.insecure): any client that "
                "reaches it reads and writes every chunk");
  return [cmd, test_hooks, insecure](const Config& loaded) -> int {
    if (!cmd->parsed()) return -1;
    Config config = loaded;
    if (*insecure) config.server.insecure = true;
    init_logging(config.log, "kvtierd");
    // Before the server starts any thread; SIGINT/SIGTERM ask it to drain.
    StopSignals stop_signals;
    server::Server server(server::ServerOptions{.config = config, .test_hooks = *test_hooks});
    stop_signals.deliver_to([&server] { server.request_stop(); });
    std::ostringstream boot_id;
    boot_id << std::hex << server.boot_id();
    server::MetricsHttp http(server);
    if (config.server.metrics_port != 0) {
      const Result<int> port =
          http.start(config.server.metrics_host, static_cast<int>(config.server.metrics_port));
      if (!port) {
        log_error(port.error().message);
        return 1;
      }
      log_info("metrics on http://" + config.server.metrics_host + ":" + std::to_string(*port) +
               " (/metrics, /health)");
    }
    log_info("starting on " + config.server.endpoint, {{"boot_id", boot_id.str()}});
    const Status st = server.run();
    stop_signals.end();
    http.stop();
    if (!st) {
      log_error(st.error().message);
      return 1;
    }
    log_info("shut down");
    return 0;
  };
}

}  // namespace kvtier::cli
