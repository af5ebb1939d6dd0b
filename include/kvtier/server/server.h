// kvtierd: the cache server. Owns one host pool and its CacheManager for every client (engine
// ranks) that registers, and copies between each client's registered KV memory and the pool
// with one TransferEngine per client. See docs/protocol.md for the wire protocol.
//
// Threads: the socket loop (run()'s caller) owns the ZeroMQ ROUTER socket and never runs a
// handler; the cache service thread owns the pool, the CacheManager and every TransferEngine and
// never blocks on a transfer (it polls). So a slow handler never blocks the socket loop.
//
// F11: every request that reaches the server gets exactly one terminal reply (success or error
// frame), including malformed frames, unknown ops and handlers that raise; a failed STORE or
// RETRIEVE is answered only after its TransferEngine decided it (its copies stopped), and an
// Unprovable one is answered with code "unprovable". The only exception is the "no_reply" test
// hook, available only with test_hooks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/core/config.h"
#include "kvtier/core/status.h"

namespace kvtier::server {

struct ServerOptions {
  Config config;
  // Honour the "hook" field of requests (tests only): throw, no_reply, stall (a handler that
  // takes 2 s), hang_copies, fail_copies, fail_partway, service (a LOOKUP answered by the
  // service thread rather than the socket loop).
  bool test_hooks = false;
};

// The threads kvtierd copies one STORE's or RETRIEVE's bytes with: server.copy_threads, or for 0
// half the CPU cores, from 1 to 4 (the socket loop, the service thread and the clients need the
// other half).
size_t effective_copy_threads(const ServerConfig& server);

// What kvtierd's GET /health answers: 200 while it serves requests ("ok", or "degraded" with
// the DOWN lower tiers named; H7: a DOWN tier fails no request), 503 while it does not
// ("starting", "shutting_down", "stopped", or "stalled": the socket loop has not turned for
// kStallAfter).
struct ServerHealth {
  int http_status = 503;
  std::string status = "starting";
  std::vector<std::string> degraded;  // DOWN tiers, and DOWN parts of DEGRADED ones

  // {"status": …, "degraded": […]} ("degraded" only when not empty).
  std::string json() const;
};

class SocketLoop;

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Binds the endpoint and serves until SHUTDOWN (or request_stop()), then drains: new work is
  // refused with "shutting_down", transfers in flight are decided and answered, every known
  // client gets a "shutdown" event. Returns an error when the endpoint cannot be bound or the
  // pool cannot be created.
  Status run();

  // Thread- and async-signal-safe: starts the graceful shutdown.
  void request_stop() { stop_requested_.store(true); }

  uint64_t boot_id() const { return boot_id_; }

  // Thread-safe, at any time (before run(), during, after): what /health and /metrics answer.
  ServerHealth health() const;
  // Prometheus text (docs/operations.md): per-tenant counters, the socket loop's and the host
  // pool's counters, the DOWN tiers, kvtier_server_healthy. Before run() and after it returned,
  // only kvtier_server_healthy (0).
  std::string metrics_text() const;

  static constexpr std::chrono::seconds kStallAfter{5};

 private:
  ServerOptions options_;
  uint64_t boot_id_;
  std::atomic<bool> stop_requested_{false};
  // The running loop, for health() and metrics_text(); set and cleared by run() under live_mu_.
  mutable std::mutex live_mu_;
  SocketLoop* live_ = nullptr;
  bool stopped_ = false;
};

}  // namespace kvtier::server
