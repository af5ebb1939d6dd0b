#include "kvtier/engine/http_endpoint.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "kvtier/engine/client_connection.h"
#include "kvtier/engine/http_json.h"

namespace kvtier {

HttpEndpoint::HttpEndpoint(httplib::Server& http, size_t max_requests)
    : http_(http), max_requests_(max_requests) {
  http_.new_task_queue = [threads = max_requests + kSpareThreads] {
    return new httplib::ThreadPool(threads);
  };
  http_.set_socket_options([this](socket_t sock) {
    // SO_REUSEADDR (a restart binds at once, past the old sockets' TIME_WAIT), not
    // cpp-httplib's default SO_REUSEPORT: with it a second server on a port in use would be
    // bound beside the first and take part of its connections, instead of failing.
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_ = sock;
  });
  http_.set_payload_max_length(size_t{64} << 20);
  // cpp-httplib reads a request's body whole before its handler runs, and bounds it only by
  // its Content-Length: a chunked body, or a POST's without a length (read until the connection
  // ends), would grow without bound. Such a request is answered 411 before its body is read,
  // and what arrived of the body is dropped.
  http_.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    const bool has_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
    if (!req.has_header("Transfer-Encoding") && (!has_body || req.has_header("Content-Length"))) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (auto connection =
            ClientConnection::find(req.remote_addr, req.remote_port, req.local_port)) {
      connection->drop_received();
    }
    reply_json(res, 411,
               RequestError{411,
                            "a request body must come with a Content-Length (a chunked body, "
                            "or one read until the connection ends, is not accepted)",
                            ""}
                   .body());
    return httplib::Server::HandlerResponse::Handled;
  });
  http_.set_read_timeout(std::chrono::seconds(30));
  http_.set_write_timeout(std::chrono::seconds(30));
  // Idle keep-alive connections hold a pool thread; stop() waits for them this long at most.
  http_.set_keep_alive_timeout(2);
}

Result<int> HttpEndpoint::bind(const std::string& host, int port, std::string_view settings) {
  if (port == 0) {
    port = http_.bind_to_any_port(host);
    if (port < 0) return make_error(ErrorCode::kUnavailable, "cannot bind " + host);
  } else if (!http_.bind_to_port(host, port)) {
    return make_error(ErrorCode::kUnavailable, "cannot bind " + host + ":" + std::to_string(port) +
                                                   " (" + std::string(settings) + ")");
  }
  // cpp-httplib listens with a backlog of 5 (compiled into Debian's libcpp-httplib): a burst of
  // more connections than that overflows the accept queue, and each dropped SYN costs its client
  // a 1 s retransmit (TTFT +1 s, or a failed connect, at 32 concurrent clients). Listening
  // again on the bound socket raises the backlog (the kernel caps it at net.core.somaxconn).
  if (listen_fd_ >= 0 && ::listen(listen_fd_, SOMAXCONN) != 0) {
    return make_error(ErrorCode::kUnavailable,
                      std::string("cannot raise the listen backlog: ") + std::strerror(errno));
  }
  return port;
}

void HttpEndpoint::run() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    running_ = true;
  }
  http_.listen_after_bind();
  std::lock_guard lock(mutex_);
  running_ = false;
  returned_.notify_all();
}

void HttpEndpoint::stop() {
  std::unique_lock lock(mutex_);
  const bool first = !std::exchange(stopping_, true);
  // cpp-httplib's stop() does nothing until its listen loop has begun, and may be called once
  // while it runs.
  while (running_ && !http_.is_running()) returned_.wait_for(lock, std::chrono::milliseconds(1));
  if (first && running_) http_.stop();
  returned_.wait(lock, [this] { return !running_; });
}

std::optional<HttpEndpoint::RequestSlot> HttpEndpoint::admit() {
  size_t n = in_flight_.load();
  do {
    if (n >= max_requests_) {
      ++refused_;
      return std::nullopt;
    }
  } while (!in_flight_.compare_exchange_weak(n, n + 1));
  return RequestSlot(in_flight_);
}

void HttpEndpoint::refuse(httplib::Response& res, const std::string& error_type) const {
  reply_json(res, 429,
             typed_error(error_type, 429,
                         "the server is serving its most requests at once (" +
                             std::to_string(max_requests_) + "); retry later",
                         "overloaded")
                 .body());
  res.set_header("Retry-After", "1");
  res.set_header("Connection", "close");
}

}  // namespace kvtier
