// RouterServer: the HTTP side of `kvtier router` (docs/router.md), an OpenAI-compatible reverse
// proxy in front of several `kvtier serve` instances (cpp-httplib, a thread pool).
//
//   POST /v1/completions, POST /v1/chat/completions   checked as the backends check them (their
//                                                     RoutingInfo's limits), then sent to the
//                                                     backend BackendPool::pick() names; the
//                                                     answer passed back as it comes: a stream
//                                                     (`stream: true`, SSE) chunk by chunk
//   GET  /v1/models                                   the backends' model
//   GET  /health                                      200 while a backend is in rotation, else 503
//   GET  /metrics                                     BackendPool::metrics() and the router's own
//
// Errors: more than RouterOptions::max_requests_in_flight requests at once get 429
// {"error": {"code": "overloaded", …}}; a request the backends would reject gets their 400/404
// from the router; no backend
// in rotation 503 {"error": {"code": "no_backend", …}}. A request that cannot reach its backend
// (no connection) is sent to the next one, and that backend leaves the rotation; one whose
// backend fails after the connection gets 502 (a stream: an SSE `error` event, then the end).
// A client that hangs up on a stream ends the backend's request too. A malformed request never
// takes the router down.
#pragma once

#include <memory>
#include <ostream>

#include "kvtier/core/clock.h"
#include "kvtier/core/status.h"
#include "kvtier/engine/backend_pool.h"

namespace kvtier {

struct RouterOptions {
  BackendPoolOptions pool;
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: a free port
  // The longest a backend may take to answer (to send the next piece of a stream).
  Duration request_timeout = std::chrono::seconds(600);
  // Completion requests relayed at once; more are answered 429 (HttpEndpoint).
  size_t max_requests_in_flight = 256;
};

class RouterServer {
 public:
  // `pool` outlives the server.
  RouterServer(BackendPool& pool, const RouterOptions& options);
  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  // Binds host:port. Returns the bound port.
  Result<int> bind();
  // Serves until stop(); call after bind().
  void run();
  // Thread-safe; run() returns soon after.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `kvtier router`: starts the pool and the server, prints "kvtier: serving router on
// http://host:port", serves until SIGINT or SIGTERM (StopSignals). Returns the exit code.
int run_router(const RouterOptions& options, std::ostream& out);

}  // namespace kvtier
