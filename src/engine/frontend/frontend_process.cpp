#include "kvtier/engine/frontend_process.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <iostream>
#include <thread>

#include "kvtier/core/child_process.h"
#include "kvtier/engine/core_manager.h"
#include "kvtier/engine/frontend_server.h"

namespace kvtier {
namespace {

// Self-pipe: the signal handler writes the signal number, the main thread reads it.
int g_wake_pipe[2] = {-1, -1};

void on_stop_signal(int signo) {
  const char byte = static_cast<char>(signo);
  (void)!write(g_wake_pipe[1], &byte, 1);
}

void install_stop_handlers() {
  if (pipe2(g_wake_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // A client that disconnects mid-answer must not kill the server.
  std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

int run_frontend(const Config& config, const std::filesystem::path& run_dir, std::ostream& out) {
  install_stop_handlers();
  auto manager =
      CoreManager::start(CoreManagerOptions::from_config(config, run_dir, self_executable()));
  if (!manager) {
    std::cerr << "kvtier frontend: " << manager.error().message << "\n";
    std::error_code ignored;
    std::filesystem::remove_all(run_dir, ignored);
    return 1;
  }
  FrontendServer server(**manager, config);
  const Result<int> port = server.bind();
  if (!port) {
    std::cerr << "kvtier frontend: " << port.error().message << "\n";
    (*manager)->shutdown();
    return 1;
  }
  std::thread http([&] {
    server.run();
    on_stop_signal(0);  // the server stopped by itself: shut down as well
  });
  out << "kvtier: serving " << config.engine.model_name << " on http://" << config.engine.host
      << ":" << *port << '\n'
      << std::flush;  // the line callers wait for
  char signo = 0;
  while (read(g_wake_pipe[0], &signo, 1) < 0 && errno == EINTR) {
  }
  // Cores first, with the HTTP server still answering 503 "closed" meanwhile.
  (*manager)->shutdown();
  server.stop();
  http.join();
  return 0;
}

}  // namespace kvtier
