#include <pthread.h>

#include <csignal>
#include <iostream>
#include <thread>

#include "commands.h"
#include "kvtier/server/server.h"

namespace kvtier::cli {
namespace {

// SIGINT/SIGTERM stop kvtierd: they are blocked before the server starts any thread, so every
// thread inherits them blocked and no call inside kvtierd is ever interrupted, and one thread
// takes them with sigwait() and asks the server to drain. end() ends that thread.
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&signals_);
    for (int s : {SIGINT, SIGTERM, kEnd}) sigaddset(&signals_, s);
    pthread_sigmask(SIG_BLOCK, &signals_, &previous_);
  }
  ~StopSignals() {
    end();
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  void deliver_to(server::Server& server) {
    waiter_ = std::thread([this, &server] {
      int signal = 0;
      while (sigwait(&signals_, &signal) == 0 && signal != kEnd) server.request_stop();
    });
  }
  // Ends the waiting thread (before the server it stops goes away).
  void end() {
    if (!waiter_.joinable()) return;
    pthread_kill(waiter_.native_handle(), kEnd);
    waiter_.join();
  }

 private:
  static constexpr int kEnd = SIGUSR1;  // sent by the destructor to the waiting thread only
  sigset_t signals_;
  sigset_t previous_;
  std::thread waiter_;
};

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
    StopSignals stop_signals;
    server::Server server(server::ServerOptions{.config = config, .test_hooks = *test_hooks});
    stop_signals.deliver_to(server);
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
