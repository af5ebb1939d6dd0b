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
#include <string>

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

 private:
  ServerOptions options_;
  uint64_t boot_id_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace kvtier::server
