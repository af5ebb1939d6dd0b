// CoreProcessHarness: a real `kvtier engine-core` process with its real worker processes,
// driven by the test acting as the frontend (a ROUTER at the run dir's frontend endpoint), so
// the engine core and workers are tested without the HTTP frontend. Every wait is bounded.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kvtier/core/child_process.h"
#include "kvtier/core/chunk_key.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/engine/wire.h"

namespace kvtier::testing {

struct Completion {
  std::vector<TokenId> tokens;
  size_t cached_tokens = 0;
  std::string error;
  bool done = false;
  bool ended_after_core_failed = false;  // its error came after the core's `failed` message
};

class CoreProcessHarness {
 public:
  explicit CoreProcessHarness(Config config)
      : config_(std::move(config)), socket_(context_, zmq::socket_type::router) {
    char tmpl[] = "/tmp/kvtier-core-test-XXXXXX";
    run_dir_ = mkdtemp(tmpl);
    config_path_ = run_dir_ + "/config.yaml";
    std::ofstream(config_path_) << to_yaml(config_);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind(frontend_endpoint(run_dir_));
    core_ = ChildProcess::spawn(
        {KVTIER_CLI_PATH, "engine-core", "0", "--run-dir", run_dir_, "--config", config_path_});
  }

  ~CoreProcessHarness() {
    send({{"t", "shutdown"}});
    wait_until([&] { return core_.poll_exit().has_value(); }, std::chrono::seconds(5));
    core_.kill_and_reap();
    std::filesystem::remove_all(run_dir_);
  }

  void send(const nlohmann::json& body) { send_message_to(socket_, "core-0", body); }

  // Handles messages until `done()` holds or `timeout` passes; returns whether it held.
  template <class Pred>
  bool wait_until(Pred done, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(10));
      while (auto msg = try_receive(socket_, true)) {
        if (*msg) handle((*msg)->body);
      }
    }
    return true;
  }

  bool wait_ready() {
    return wait_until([&] { return hello_ || core_.poll_exit(); }, std::chrono::seconds(60)) &&
           hello_;
  }

  Completion complete(const std::vector<TokenId>& prompt, size_t max_tokens,
                      std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    const std::string id = "req-" + std::to_string(next_id_++);
    send({{"t", "add"}, {"id", id}, {"prompt", prompt}, {"max_tokens", max_tokens}});
    wait_until([&] { return completions_[id].done || failed_; }, timeout);
    return completions_[id];
  }

  const std::optional<std::string>& failed() const { return failed_; }
  const nlohmann::json& counters() const { return counters_; }
  // Longest time between two heartbeats handled since the last reset (messages are handled
  // only inside wait_until: call this after waits that poll continuously).
  std::chrono::steady_clock::duration max_heartbeat_gap() const { return max_heartbeat_gap_; }
  void reset_heartbeat_gap() { max_heartbeat_gap_ = {}; }
  // The last heartbeat's degraded list (H7).
  const std::vector<std::string>& degraded() const { return degraded_; }
  // Every name a heartbeat's degraded list held, and the counters of the last heartbeat whose
  // list was not empty: a state that lasted a few heartbeats is seen even when it ended before
  // the test looked.
  const std::set<std::string>& degraded_seen() const { return degraded_seen_; }
  const nlohmann::json& counters_while_degraded() const { return counters_while_degraded_; }
  // Counters from a heartbeat sent after everything handled so far.
  const nlohmann::json& fresh_counters() {
    const size_t seen = heartbeats_;
    wait_until([&] { return heartbeats_ >= seen + 2; }, std::chrono::seconds(5));
    return counters_;
  }
  ChildProcess& core() { return core_; }
  std::map<std::string, Completion>& completions() { return completions_; }
  std::string add(const std::vector<TokenId>& prompt, size_t max_tokens) {
    const std::string id = "req-" + std::to_string(next_id_++);
    send({{"t", "add"}, {"id", id}, {"prompt", prompt}, {"max_tokens", max_tokens}});
    return id;
  }
  const std::string& run_dir() const { return run_dir_; }
  const std::vector<int>& worker_pids() const { return worker_pids_; }

 private:
  void handle(const nlohmann::json& m) {
    const std::string t = m["t"];
    if (t == "hello") {
      hello_ = true;
      worker_pids_ = m["workers"].get<std::vector<int>>();
    }
    if (t == "hb") {
      const auto now = std::chrono::steady_clock::now();
      if (heartbeats_ > 0) max_heartbeat_gap_ = std::max(max_heartbeat_gap_, now - last_heartbeat_);
      last_heartbeat_ = now;
      counters_ = m["counters"];
      degraded_ = m["degraded"].get<std::vector<std::string>>();
      degraded_seen_.insert(degraded_.begin(), degraded_.end());
      if (!degraded_.empty()) counters_while_degraded_ = counters_;
      ++heartbeats_;
    }
    if (t == "failed" && !failed_) failed_ = m["reason"].get<std::string>();
    if (t == "out") {
      Completion& c = completions_[m["id"]];
      for (TokenId tok : m["tokens"].get<std::vector<TokenId>>()) c.tokens.push_back(tok);
      c.cached_tokens = m["cached_tokens"];
      c.done = c.done || m["done"].get<bool>();
    }
    if (t == "err") {
      Completion& c = completions_[m["id"]];
      c.error = m["message"];
      c.done = true;
      c.ended_after_core_failed = failed_.has_value();
    }
  }

  Config config_;
  std::string run_dir_;
  std::string config_path_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  ChildProcess core_;
  bool hello_ = false;
  std::optional<std::string> failed_;
  nlohmann::json counters_;
  std::vector<std::string> degraded_;
  std::set<std::string> degraded_seen_;
  nlohmann::json counters_while_degraded_ = nlohmann::json::object();
  std::chrono::steady_clock::time_point last_heartbeat_{};
  std::chrono::steady_clock::duration max_heartbeat_gap_{};
  size_t heartbeats_ = 0;
  std::vector<int> worker_pids_;
  std::map<std::string, Completion> completions_;
  size_t next_id_ = 0;
};

}  // namespace kvtier::testing
