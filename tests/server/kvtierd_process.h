// KvtierdProcess: a real kvtierd (`kvtier server`) child process for integration tests, on a
// unique ipc:// endpoint, configured through --set. Every wait is bounded.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifndef KVTIER_BINARY
#error "KVTIER_BINARY (path of the kvtier executable) must be defined by CMake"
#endif

namespace kvtier::testing {

inline std::string unique_endpoint() {
  static std::atomic<int> n{0};
  return "ipc:///tmp/kvtier-test-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
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
  ~KvtierdProcess() {
    if (pid_ > 0) kill_now();
  }

  void start() {
    std::vector<std::string> args = {KVTIER_BINARY, "--set", "server.endpoint=" + endpoint_};
    for (const auto& s : small_layout_settings()) args.insert(args.end(), {"--set", s});
    for (const auto& s : settings_) args.insert(args.end(), {"--set", s});
    args.push_back("server");
    if (test_hooks_) args.push_back("--test-hooks");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive this process
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  // A no-op when the process is gone already (kill(-1) would signal every process we own).
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // SIGSTOP / SIGCONT: a server that is alive and connected but answers nothing.
  // Never signal pid <= 0: kill(-1, …) reaches every process of the user.
  void pause() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  void resume() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }
  // Waits (bounded) for the process to exit; its exit status, or nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a child's exit
    }
    return std::nullopt;
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string endpoint_;
  std::vector<std::string> settings_;
  bool test_hooks_;
  pid_t pid_ = -1;
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
