// RedisServerProcess / RedisClusterProcess: real redis-server processes on free loopback ports,
// each in its own directory, killed when the object goes away. Used by the tier tests and by
// `kvtier bench tiers` when no --redis-url is given.
//
// Readiness is polled (PING, then cluster_state:ok for a cluster) until a bounded deadline;
// start() fails with a message naming the log file when it is not reached.
// Thread-safety: none; one thread drives each object.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/core/child_process.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/status.h"

namespace kvtier::bench {

class RedisServerProcess {
 public:
  struct Options {
    std::filesystem::path directory;      // created; holds the log (and cluster state)
    int port = 0;                         // 0: a free loopback port (and port + 10000 free)
    std::vector<std::string> extra_args;  // e.g. {"--cluster-enabled", "yes"}
  };

  // kUnavailable when redis-server is not installed, does not start, or does not answer PING
  // within ready_timeout.
  static Result<std::unique_ptr<RedisServerProcess>> start(Options options, Duration ready_timeout);
  ~RedisServerProcess();  // kills the server

  RedisServerProcess(const RedisServerProcess&) = delete;
  RedisServerProcess& operator=(const RedisServerProcess&) = delete;

  int port() const { return options_.port; }
  pid_t pid() const { return process_.pid(); }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(options_.port); }
  std::string address() const { return "127.0.0.1:" + std::to_string(options_.port); }
  // Whether it runs (polls: one that died on its own does not); a paused one runs.
  bool running() { return !process_.poll_exit().has_value() && process_.running(); }
  // How it ended, when it ended without kill() or restart(); nullopt while it runs. Polls.
  std::optional<std::string> crashed();

  // SIGKILL and reap: the server is gone at once, as in a crash.
  void kill();
  // SIGSTOP / SIGCONT: a server that accepts connections but never answers (a hung node).
  void pause();
  void resume();
  // Starts the server again on the same port with the same arguments.
  Status restart(Duration ready_timeout);
  // One command, its reply as text (strings, status, integers as decimal, errors as
  // "ERR ..." in the error).
  Result<std::string> command(const std::vector<std::string>& args, Duration timeout) const;

 private:
  explicit RedisServerProcess(Options options) : options_(std::move(options)) {}
  Status spawn(Duration ready_timeout);

  Options options_;
  ChildProcess process_;
  bool killed_ = false;  // since the last start
};

// Three masters, no replicas, all 16384 slots assigned (redis-cli --cluster create), with
// cluster-require-full-coverage off: while a master is down the others serve their slots.
class RedisClusterProcess {
 public:
  static Result<std::unique_ptr<RedisClusterProcess>> start(const std::filesystem::path& directory,
                                                            Duration ready_timeout);
  std::string url() const { return nodes_.front()->url(); }
  std::vector<std::unique_ptr<RedisServerProcess>>& nodes() { return nodes_; }
  // Waits until `node` reports cluster_state:ok (it serves its slots), within `timeout`.
  static Status wait_serving(const RedisServerProcess& node, Duration timeout);

 private:
  std::vector<std::unique_ptr<RedisServerProcess>> nodes_;
};

// A loopback TCP port that nothing listens on now (nor on port + 10000, the cluster bus).
int free_loopback_port();

}  // namespace kvtier::bench
