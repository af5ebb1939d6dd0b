// MetricsHttp: kvtierd's HTTP endpoint on server.metrics_host:server.metrics_port, for
// Prometheus and load balancers (docs/operations.md):
//   GET /metrics  Server::metrics_text(), Prometheus text format 0.0.4
//   GET /health   Server::health(): 200 or 503, JSON {"status": …, "degraded": [DOWN tiers]}
// Anything else is 404. It only reads the server's thread-safe snapshots, on its own threads, so
// a slow scraper never delays a request. Part of the kvtierd binary (kvtier_server_http), not of
// libkvtier.
#pragma once

#include <memory>
#include <string>

#include "kvtier/core/status.h"
#include "kvtier/server/server.h"

namespace kvtier::server {

class MetricsHttp {
 public:
  explicit MetricsHttp(const Server& server);
  ~MetricsHttp();  // stop()s

  // Binds host:port and starts serving on a thread; port 0 picks a free one. Returns the port,
  // or an error naming the address when it cannot be bound.
  Result<int> start(const std::string& host, int port);
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::server
