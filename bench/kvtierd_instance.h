// KvtierdInstance: a kvtierd (`kvtier server`) process started by a benchmark on a given
// endpoint with the benchmark's --set overrides, killed when the object goes away; its STATS read
// over a DEALER socket of its own (no registration: STATS answers any peer). Used by
// `kvtier bench chaos`.
// Thread-safety: none; one thread drives each object.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/core/child_process.h"
#include "kvtier/core/clock.h"

namespace kvtier::bench {

class KvtierdInstance {
 public:
  // Does not start it; see start().
  KvtierdInstance(std::string exe, std::string endpoint, std::vector<std::string> sets,
                  std::filesystem::path log);
  ~KvtierdInstance();
  KvtierdInstance(const KvtierdInstance&) = delete;
  KvtierdInstance& operator=(const KvtierdInstance&) = delete;

  // Starts the process (killing a previous one) and waits up to `ready_timeout` for STATS to
  // answer; false when it does not.
  bool start(Duration ready_timeout);
  // Whether it runs (polls); a stopped (SIGSTOP) process runs.
  bool running();
  pid_t pid() const { return process_.pid(); }
  void signal(int signo) const { process_.signal(signo); }
  void kill() {
    process_.kill_and_reap();
    killed_ = true;
  }
  // How it ended, when it ended without kill() (a crash, or an exit of its own); nullopt while
  // it runs, and after kill(). Polls.
  std::optional<std::string> crashed();
  // STATS, its fields; nullopt when no reply came within `timeout`.
  std::optional<std::map<std::string, uint64_t>> stats(Duration timeout) const;
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string exe_;
  std::string endpoint_;
  std::vector<std::string> sets_;
  std::filesystem::path log_;
  ChildProcess process_;
  bool killed_ = false;  // since the last start()
};

// The layout.* overrides of a kvtierd sized for one rank's share of the KV layout that a `kvtier
// serve` started with `serve_sets` has. Throws std::runtime_error for overrides that do not load.
std::vector<std::string> kvtierd_layout_sets(const std::vector<std::string>& serve_sets);

}  // namespace kvtier::bench
