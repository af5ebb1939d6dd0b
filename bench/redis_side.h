// The Redis side of `kvtier bench server`: a redis-server child process on a unix socket, and a
// hiredis connection to it. Every wait is bounded.
#pragma once

#include <hiredis.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "kvtier/core/child_process.h"

namespace kvtier::bench {

class RedisProcess {
 public:
  explicit RedisProcess(const std::string& binary)
      : socket_("/tmp/kvtier-bench-redis-" + std::to_string(getpid()) + ".sock") {
    process_ = ChildProcess::spawn({binary, "--port", "0", "--unixsocket", socket_, "--save", "",
                                    "--appendonly", "no", "--loglevel", "warning"},
                                   {.search_path = true, .output_file = "/dev/null"});
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      context_ = redisConnectUnix(socket_.c_str());
      if (context_ && !context_->err) return;
      if (context_) redisFree(context_);
      context_ = nullptr;
      if (process_.poll_exit()) break;                             // it exited
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // waiting for its socket
    }
    stop();
    throw std::runtime_error("cannot start " + binary + " (is redis-server installed?)");
  }
  ~RedisProcess() { stop(); }
  redisContext* context() const { return context_; }

 private:
  void stop() {
    if (context_) redisFree(context_);
    context_ = nullptr;
    process_.kill_and_reap();
    unlink(socket_.c_str());
  }
  std::string socket_;
  ChildProcess process_;
  redisContext* context_ = nullptr;
};

}  // namespace kvtier::bench
