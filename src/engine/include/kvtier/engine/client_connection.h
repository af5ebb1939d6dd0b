// ClientConnection: the TCP connection an HTTP request came in on, so that a handler waiting for
// the engine notices a client that hung up. cpp-httplib (0.11) does not hand handlers their
// socket, so it is found by the request's addresses: the connection's 4-tuple (unique) names a
// socket inode in /proc/net/tcp{,6}, and that inode the descriptor among /proc/self/fd's links.
// No call is made on any other descriptor, which other server threads may be closing meanwhile;
// httplib keeps the request's own socket open while its handler runs.
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
  // Reads and drops what the client has sent and nobody read yet (at most 1 MiB), e.g. a body
  // that is refused unread: cpp-httplib would take it for the next request, and a socket closed
  // with unread bytes resets the connection, which can lose the answer on its way.
  void drop_received() const;

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace kvtier
