// HttpEndpoint: how the engine's HTTP servers (kvtier serve's frontend, kvtier router) set up
// cpp-httplib and bind it: a pool of 64 threads, bodies up to 64 MiB, 30 s read and write
// timeouts, 2 s keep-alive, a listen backlog past the 5 compiled into Debian's cpp-httplib, and
// SO_REUSEADDR without SO_REUSEPORT (a port in use fails to bind; it is never shared), and how
// they run and stop.
//
// Thread-safety: run() on one thread, stop() from any other (e.g. a signal's), in any order.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>

#include "kvtier/core/status.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace kvtier {

class HttpEndpoint {
 public:
  // Configures `http`, which must outlive this. Not copyable: http's socket options refer to it.
  explicit HttpEndpoint(httplib::Server& http);
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

 private:
  httplib::Server& http_;
  int listen_fd_ = -1;  // the socket http binds last (set by its socket options)
  std::mutex mutex_;
  std::condition_variable returned_;
  bool stopping_ = false;
  bool running_ = false;
};

}  // namespace kvtier
