// KvtierdProcess: a real kvtierd (`kvtier server`) child process for integration tests, on a
// unique ipc:// endpoint, configured through --set. Every wait is bounded.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/core/child_process.h"
#include "support/temp_dir.h"

#ifndef KVTIER_BINARY
#error "KVTIER_BINARY (path of the kvtier executable) must be defined by CMake"
#endif

namespace kvtier::testing {

// The socket files live in a directory of this test process's own (mkdtemp), removed when the
// process exits: a server the test killed leaves its socket file behind, and a name made of the
// pid alone meets such a leftover of an earlier process once pids wrap around.
inline std::string unique_endpoint() {
  static const TempDir directory;
  static std::atomic<int> n{0};
  return "ipc://" + (directory.path() / ("kvtierd-" + std::to_string(n++) + ".sock")).string();
}

// The layout of tests/support/transfer_rig.h's small_layout (per-layer, 4 blocks per chunk).
inline std::vector<std::string> small_layout_settings() {
  return {"layout.layers=3",      "layout.kv_heads=2",   "layout.head_dim=8",
          "layout.dtype_bytes=2", "layout.block_size=4", "layout.blocks_per_chunk=4"};
}

class KvtierdProcess {
 public:
  KvtierdProcess(std::string endpoint, std::vector<std::string> settings, bool test_hooks = true)
      : endpoint_(std::move(endpoint)), settings_(std::move(settings)), test_hooks_(test_hooks) {
    start();
  }

  // Throws std::system_error when fork fails. The server never outlives this process.
  void start() {
    std::vector<std::string> args = {KVTIER_BINARY, "--set", "server.endpoint=" + endpoint_};
    for (const auto& s : small_layout_settings()) args.insert(args.end(), {"--set", s});
    for (const auto& s : settings_) args.insert(args.end(), {"--set", s});
    args.push_back("server");
    if (test_hooks_) args.push_back("--test-hooks");
    process_ = ChildProcess::spawn(args);
  }
  // SIGKILL and reap; a no-op when the process is gone already.
  void kill_now() { process_.kill_and_reap(); }
  // SIGSTOP / SIGCONT: a server that is alive and connected but answers nothing.
  void pause() { process_.signal(SIGSTOP); }
  void resume() { process_.signal(SIGCONT); }
  void signal(int signo) { process_.signal(signo); }
  // Waits (bounded) for the process to exit; its exit status (128 + the signal when a signal
  // ended it), or nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    if (!process_.wait_exit(timeout)) return std::nullopt;
    const std::optional<int> status = process_.wait_status();
    if (!status) return std::nullopt;
    return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string endpoint_;
  std::vector<std::string> settings_;
  bool test_hooks_;
  ChildProcess process_;  // killed and reaped when the test ends
};

// Polls `pred` until it holds or `timeout` passes; returns whether it held.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // poll interval, not a settle
  }
  return pred();
}

}  // namespace kvtier::testing
