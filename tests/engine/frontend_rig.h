// FrontendRig: a CoreManager whose engine cores are the scripted kvtier_fake_core, plus a
// FrontendServer on a free port, in this process. For the frontend's integration tests.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/serve_process.h"
#include "kvtier/engine/core_manager.h"
#include "kvtier/engine/frontend_server.h"

namespace kvtier::test {

struct FrontendRigOptions {
  uint32_t cores = 1;
  double stall_timeout_s = 5.0;
  std::vector<std::string> fake_core_switches;  // see fake_core.cpp
};

class FrontendRig {
 public:
  explicit FrontendRig(FrontendRigOptions options = {}) {
    std::string pattern = "/tmp/kvtier-frontend-test-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp");
    run_dir = pattern;
    config.engine.port = 0;
    config.engine.engine_cores = options.cores;
    config.engine.stall_timeout_s = options.stall_timeout_s;
    config.engine.max_tokens = 8;
    config.model.max_context = 256;
    CoreManagerOptions manager_options =
        CoreManagerOptions::from_config(config, run_dir, KVTIER_FAKE_CORE);
    manager_options.shutdown_grace = std::chrono::seconds(2);
    auto real_argv = manager_options.core_argv;
    manager_options.core_argv = [real_argv, switches = options.fake_core_switches](uint32_t n) {
      std::vector<std::string> argv = real_argv(n);
      argv.insert(argv.end(), switches.begin(), switches.end());
      return argv;
    };
    auto started = CoreManager::start(std::move(manager_options));
    if (!started) throw std::runtime_error(started.error().message);
    manager = std::move(*started);
    server = std::make_unique<FrontendServer>(*manager, config);
    auto bound = server->bind();
    if (!bound) throw std::runtime_error(bound.error().message);
    port = *bound;
    http_thread = std::thread([this] { server->run(); });
  }

  ~FrontendRig() {
    manager->shutdown();
    server->stop();
    http_thread.join();
  }

  HttpReply get(const std::string& path) const { return http_get("127.0.0.1", port, path); }
  HttpReply post(const std::string& path, const nlohmann::json& body) const {
    return http_post_json("127.0.0.1", port, path, body);
  }
  HttpReply post_raw(const std::string& path, const std::string& body) const {
    return http_post("127.0.0.1", port, path, body);
  }
  SseStream stream(const std::string& path, const nlohmann::json& body,
                   std::function<void(const SseEvent&)> on_event = nullptr) const {
    return read_sse("127.0.0.1", port, path, body, 5000ms, std::move(on_event));
  }
  // /health's status field ("ok", "failed", …) once it equals `status` within `timeout`.
  bool health_becomes(const std::string& status, std::chrono::milliseconds timeout = 5000ms) const {
    return wait_until(
        [&] {
          const nlohmann::json body = get("/health").json();
          return body.is_object() && body.value("status", "") == status;
        },
        timeout);
  }

  Config config;
  std::filesystem::path run_dir;
  std::unique_ptr<CoreManager> manager;
  std::unique_ptr<FrontendServer> server;
  int port = 0;

 private:
  std::thread http_thread;
};

}  // namespace kvtier::test
