// HttpEndpoint: how the engine's HTTP servers (kvtier serve's frontend, kvtier router) set up
// cpp-httplib and bind it: bodies up to 64 MiB, 30 s read and write timeouts, 2 s keep-alive, a
// listen backlog past the 5 compiled into Debian's cpp-httplib, and SO_REUSEADDR without
// SO_REUSEPORT (a port in use fails to bind; it is never shared); how many requests it serves at
// once; and how it runs and stops.
//
// Requests in flight. cpp-httplib gives each connection a thread of a fixed pool for as long as
// the connection lasts, and queues the connections past the pool, unanswered. A server whose
// threads all carry long requests (streams) would leave /health unanswered too, and a probe with
// a timeout would take it for dead. So the pool has `max_requests` threads for requests (what
// admit() hands out) and kSpareThreads more for everything else: /health, /metrics, and the
// refusals of requests past the limit (429, which close their connection).
//
// Thread-safety: run() on one thread, stop() from any other (e.g. a signal's), in any order;
// admit() and refused() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "kvtier/core/status.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace kvtier {

class HttpEndpoint {
 public:
  // Threads beyond max_requests: /health, /metrics and refusals are answered while every request
  // thread is busy (unless this many more connections are open besides).
  static constexpr size_t kSpareThreads = 16;

  // A request's place among the max_requests in flight; given back when destroyed.
  class RequestSlot {
   public:
    explicit RequestSlot(std::atomic<size_t>& in_flight) : in_flight_(&in_flight) {}
    RequestSlot(RequestSlot&& other) noexcept
        : in_flight_(std::exchange(other.in_flight_, nullptr)) {}
    RequestSlot(const RequestSlot&) = delete;
    RequestSlot& operator=(const RequestSlot&) = delete;
    RequestSlot& operator=(RequestSlot&&) = delete;
    ~RequestSlot() {
      if (in_flight_) in_flight_->fetch_sub(1);
    }

   private:
    std::atomic<size_t>* in_flight_;
  };

  // Configures `http`, which must outlive this, to serve up to `max_requests` (> 0) requests at
  // once. Not copyable: http's socket options refer to it.
  HttpEndpoint(httplib::Server& http, size_t max_requests);
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Binds host:port, port 0 meaning any free port; returns the port bound. kUnavailable when
  // the address cannot be bound, naming `settings` (where the user sets host and port).
  Result<int> bind(const std::string& host, int port, std::string_view settings);

  // Serves on the bound socket until stop(); returns at once if stop() came first.
  void run();
  // Ends run() and waits until it returned, also when run() has not begun to listen yet (a stop
  // right after start: cpp-httplib's own stop() does nothing until its listen loop runs).
  // Returns at once when run() is not running. Idempotent.
  void stop();

  // A slot for one more request, or nullopt (counted in refused()) when max_requests are in
  // flight: the caller then answers with refuse().
  std::optional<RequestSlot> admit();
  // Answers 429 (`error_type`'s JSON error, code "overloaded", Retry-After: 1) and closes the
  // connection, so that it holds no thread.
  void refuse(httplib::Response& res, const std::string& error_type) const;
  uint64_t refused() const { return refused_.load(); }

 private:
  httplib::Server& http_;
  const size_t max_requests_;
  std::atomic<size_t> in_flight_{0};
  std::atomic<uint64_t> refused_{0};
  int listen_fd_ = -1;  // the socket http binds last (set by its socket options)
  std::mutex mutex_;
  std::condition_variable returned_;
  bool stopping_ = false;
  bool running_ = false;
};

}  // namespace kvtier
