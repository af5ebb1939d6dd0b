#include <csignal>
#include <iostream>

#include "commands.h"
#include "kvtier/server/server.h"

namespace kvtier::cli {
namespace {

server::Server* running_server = nullptr;

extern "C" void on_stop_signal(int) {
  if (running_server) running_server->request_stop();
}

}  // namespace

Action add_server_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "server", "Run kvtierd, the cache server (endpoint: server.endpoint; see docs/protocol.md)");
  auto test_hooks = std::make_shared<bool>(false);
  cmd->add_flag("--test-hooks", *test_hooks,
                "Honour the 'hook' field of requests (throw, no_reply, stall, hang_copies, "
                "fail_copies, fail_partway); "
                "for tests only");
  return [cmd, test_hooks](const Config& config) -> int {
    if (!cmd->parsed()) return -1;
    server::Server server(server::ServerOptions{.config = config, .test_hooks = *test_hooks});
    running_server = &server;
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    std::cerr << "kvtierd: starting on " << config.server.endpoint << " (boot id " << std::hex
              << server.boot_id() << std::dec << ")" << std::endl;
    const Status st = server.run();
    running_server = nullptr;
    if (!st) {
      std::cerr << "kvtierd: " << st.error().message << "\n";
      return 1;
    }
    std::cerr << "kvtierd: shut down\n";
    return 0;
  };
}

}  // namespace kvtier::cli
