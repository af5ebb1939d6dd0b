#include "client_connection.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

namespace kvtier {
namespace {

// The numeric host and the port of a socket address, as cpp-httplib prints them.
std::optional<std::pair<std::string, int>> host_and_port(const sockaddr_storage& addr,
                                                         socklen_t len) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, port,
                  sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return std::nullopt;
  }
  return std::pair<std::string, int>(host, std::atoi(port));
}

}  // namespace

std::optional<ClientConnection> ClientConnection::find(const std::string& remote_addr,
                                                       int remote_port, int local_port) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{};
    sockaddr_storage peer{};
    socklen_t local_len = sizeof local;
    socklen_t peer_len = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;
    }
    const auto l = host_and_port(local, local_len);
    const auto p = host_and_port(peer, peer_len);
    if (l && p && l->second == local_port && p->second == remote_port && p->first == remote_addr) {
      return ClientConnection(fd);
    }
  }
  return std::nullopt;
}

bool ClientConnection::closed() const {
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace kvtier
