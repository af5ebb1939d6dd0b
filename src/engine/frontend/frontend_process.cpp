#include "kvtier/engine/frontend_process.h"

#include <condition_variable>
#include <csignal>
#include <iostream>
#include <mutex>
#include <thread>

#include "kvtier/core/child_process.h"
#include "kvtier/core/log.h"
#include "kvtier/core/stop_signals.h"
#include "kvtier/engine/core_manager.h"
#include "kvtier/engine/frontend_server.h"

namespace kvtier {
namespace {

// Set by a stop signal or by the HTTP server stopping by itself; the main thread waits for it.
class StopLatch {
 public:
  void set() {
    std::lock_guard lock(mutex_);
    set_ = true;
    changed_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return set_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool set_ = false;
};

}  // namespace

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
