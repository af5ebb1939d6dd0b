#include "metrics_http.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <future>

namespace kvtier::server {

struct MetricsHttp::Impl {
  const Server& server;
  httplib::Server http;
  std::future<void> listening;  // the listen loop, on a thread of its own

  explicit Impl(const Server& s) : server(s) {
    http.new_task_queue = [] { return new httplib::ThreadPool(2); };
    // SO_REUSEADDR, not cpp-httplib's default SO_REUSEPORT: a port in use fails to bind
    // instead of being shared with whatever listens there.
    http.set_socket_options([](socket_t sock) {
      const int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    http.set_read_timeout(std::chrono::seconds(5));
    http.set_write_timeout(std::chrono::seconds(5));
    http.set_keep_alive_timeout(2);  // stop() waits for idle keep-alive connections this long
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const ServerHealth health = server.health();
      res.status = health.http_status;
      res.set_content(health.json(), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(server.metrics_text(), "text/plain; version=0.0.4");
    });
  }
};

MetricsHttp::MetricsHttp(const Server& server) : impl_(std::make_unique<Impl>(server)) {}

MetricsHttp::~MetricsHttp() {
  stop();
}

Result<int> MetricsHttp::start(const std::string& host, int port) {
  const int bound = port == 0                              ? impl_->http.bind_to_any_port(host)
                    : impl_->http.bind_to_port(host, port) ? port
                                                           : -1;
  if (bound < 0) {
    return make_error(ErrorCode::kUnavailable, "cannot bind the metrics port " + host + ":" +
                                                   std::to_string(port) +
                                                   " (server.metrics_host / server.metrics_port)");
  }
  impl_->listening = std::async(std::launch::async, [this] { impl_->http.listen_after_bind(); });
  return bound;
}

void MetricsHttp::stop() {
  if (!impl_->listening.valid()) return;
  // cpp-httplib's stop() does nothing until its listen loop has begun (a stop right after
  // start), and may be called once while it runs.
  while (!impl_->http.is_running() &&
         impl_->listening.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
  }
  impl_->http.stop();
  impl_->listening.get();
}

}  // namespace kvtier::server
