#include <iostream>

#include "commands.h"
#include "kvtier/core/stop_signals.h"
#include "kvtier/server/server.h"

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
    // Before the server starts any thread; SIGINT/SIGTERM ask it to drain.
    StopSignals stop_signals;
    server::Server server(server::ServerOptions{.config = config, .test_hooks = *test_hooks});
    stop_signals.deliver_to([&server] { server.request_stop(); });
    std::cerr << "kvtierd: starting on " << config.server.endpoint << " (boot id " << std::hex
              << server.boot_id() << std::dec << ")" << std::endl;
    const Status st = server.run();
    stop_signals.end();
    if (!st) {
      std::cerr << "kvtierd: " << st.error().message << "\n";
      return 1;
    }
    std::cerr << "kvtierd: shut down\n";
    return 0;
  };
}

}  // namespace kvtier::cli
