#include "kvtier/engine/frontend_process.h"

#include <csignal>
#include <iostream>
#include <thread>

#include "kvtier/core/child_process.h"
#include "kvtier/core/log.h"
#include "kvtier/core/stop_signals.h"
#include "kvtier/engine/core_manager.h"
#include "kvtier/engine/frontend_server.h"
#include "kvtier/engine/stop_latch.h"

namespace kvtier {

int run_frontend(const Config& config, const std::filesystem::path& run_dir, std::ostream& out) {
  StopLatch stop;  // outlives the thread that sets it
  // Before any thread starts (the core manager's, the HTTP server's pool).
  StopSignals stop_signals;
  stop_signals.deliver_to([&stop] { stop.set(); });
  // A client that disconnects mid-answer must not kill the server.
  std::signal(SIGPIPE, SIG_IGN);
  auto manager =
      CoreManager::start(CoreManagerOptions::from_config(config, run_dir, self_executable()));
  if (!manager) {
    log_error(manager.error().message);
    std::error_code ignored;
    std::filesystem::remove_all(run_dir, ignored);
    return 1;
  }
  FrontendServer server(**manager, config);
  const Result<int> port = server.bind();
  if (!port) {
    log_error(port.error().message);
    (*manager)->shutdown();
    return 1;
  }
  std::thread http([&] {
    server.run();
    stop.set();  // the server stopped by itself: shut down as well
  });
  out << "kvtier: serving " << config.engine.model_name << " on http://" << config.engine.host
      << ":" << *port << '\n'
      << std::flush;  // the line callers wait for
  stop.wait();
  // Cores first, with the HTTP server still answering 503 "closed" meanwhile.
  (*manager)->shutdown();
  server.stop();
  http.join();
  return 0;
}

}  // namespace kvtier
