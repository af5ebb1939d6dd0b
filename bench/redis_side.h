// The Redis side of `kvtier bench server`: a redis-server child process on a unix socket, and a
// hiredis connection to it. Every wait is bounded.
#pragma once

#include <fcntl.h>
#include <hiredis.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace kvtier::bench {

class RedisProcess {
 public:
  explicit RedisProcess(const std::string& binary)
      : socket_("/tmp/kvtier-bench-redis-" + std::to_string(getpid()) + ".sock") {
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive this process
      const int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) {
        dup2(devnull, STDOUT_FILENO);
        dup2(devnull, STDERR_FILENO);
      }
      execlp(binary.c_str(), binary.c_str(), "--port", "0", "--unixsocket", socket_.c_str(),
             "--save", "", "--appendonly", "no", "--loglevel", "warning", nullptr);
      _exit(127);
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      context_ = redisConnectUnix(socket_.c_str());
      if (context_ && !context_->err) return;
      if (context_) redisFree(context_);
      context_ = nullptr;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) break;          // it exited
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
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    unlink(socket_.c_str());
  }
  std::string socket_;
  pid_t pid_ = -1;
  redisContext* context_ = nullptr;
};

}  // namespace kvtier::bench
