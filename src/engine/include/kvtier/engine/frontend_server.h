// FrontendServer: the HTTP side of `kvtier frontend` (cpp-httplib, a thread pool).
//
//   POST /v1/completions, POST /v1/chat/completions   OpenAI-shaped, `stream: true` as SSE
//   GET  /v1/models                                   the one served model
//   GET  /health                                      CoreManager::health() (H1-H3, H6, H7)
//   GET  /metrics                                     Prometheus text (metrics_text.h)
//   GET  /kvtier/routing                              RoutingInfo, for `kvtier router`
//
// Errors: bad input 400 (404 for an unknown model) with an OpenAI error naming the field, also a
// request that could never fit the device (H8); an engine that is not healthy or is closed 503;
// a request whose core fails mid-flight 503, one that outlives engine.request_timeout_s 504, or
// on a stream an SSE `error` event and the end of the stream (H5). A handler never waits
// without a bound: output arrives, or the core manager ends the stream (failure, stall,
// shutdown, no progress), or the request's deadline passes, or its client hangs up (the request
// is aborted, streaming or not). A malformed request never takes the server down.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "kvtier/core/config.h"
#include "kvtier/core/status.h"
#include "kvtier/engine/core_manager.h"

namespace kvtier {

class FrontendServer {
 public:
  // `manager` outlives the server.
  FrontendServer(CoreManager& manager, const Config& config);
  ~FrontendServer();
  FrontendServer(const FrontendServer&) = delete;
  FrontendServer& operator=(const FrontendServer&) = delete;

  // Binds engine.host:engine.port (port 0: a free port). Returns the bound port.
  Result<int> bind();
  // Serves until stop(); call after bind().
  void run();
  // Thread-safe; run() returns soon after. Streams in flight end when their requests do.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
