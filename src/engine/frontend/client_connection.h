// ClientConnection: the TCP connection an HTTP request came in on, so that a handler waiting for
// the engine notices a client that hung up. cpp-httplib (0.11) does not hand handlers their
// socket, so it is found among this process's sockets by the request's addresses (the
// connection's 4-tuple is unique, and httplib keeps the socket open while the handler runs).
#pragma once

#include <optional>
#include <string>

namespace kvtier {

class ClientConnection {
 public:
  // The socket whose peer is remote_addr:remote_port and whose local port is local_port.
  static std::optional<ClientConnection> find(const std::string& remote_addr, int remote_port,
                                              int local_port);
  // The client closed its side (or the connection broke). A client that only half-closes
  // after its request counts as gone: HTTP clients keep the connection open for the answer.
  bool closed() const;

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace kvtier
