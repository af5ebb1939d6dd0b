#include "kvtier/engine/client_connection.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvtier {
namespace {

uint32_t parse_hex32(std::string_view hex) {
  uint32_t v = 0;
  std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
  return v;
}

// One "ADDRESS:PORT" field of /proc/net/tcp or tcp6: the address as the kernel prints it (each
// 32-bit word of the network-order address in hex, as a host-order integer), the port in hex.
// Returns the numeric host, as cpp-httplib prints a peer's, and the port.
std::optional<std::pair<std::string, int>> parse_endpoint(std::string_view field) {
  const size_t colon = field.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view address = field.substr(0, colon);
  const int port = static_cast<int>(parse_hex32(field.substr(colon + 1)));
  char host[INET6_ADDRSTRLEN];
  if (address.size() == 8) {
    in_addr a{};
    a.s_addr = parse_hex32(address);
    if (!inet_ntop(AF_INET, &a, host, sizeof host)) return std::nullopt;
  } else if (address.size() == 32) {
    in6_addr a{};
    for (size_t w = 0; w < 4; ++w) {
      const uint32_t word = parse_hex32(address.substr(w * 8, 8));
      std::memcpy(reinterpret_cast<char*>(&a) + w * 4, &word, 4);
    }
    if (!inet_ntop(AF_INET6, &a, host, sizeof host)) return std::nullopt;
  } else {
    return std::nullopt;
  }
  return std::pair<std::string, int>(host, port);
}

// The inode of the TCP socket with this 4-tuple (local address: any), from /proc/net/tcp{,6}.
std::optional<std::string> socket_inode(const std::string& remote_addr, int remote_port,
                                        int local_port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode)) {
        continue;
      }
      const auto l = parse_endpoint(local);
      const auto r = parse_endpoint(remote);
      if (l && r && l->second == local_port && r->second == remote_port &&
          r->first == remote_addr) {
        return inode;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ClientConnection> ClientConnection::find(const std::string& remote_addr,
                                                       int remote_port, int local_port) {
  const auto inode = socket_inode(remote_addr, remote_port, local_port);
  if (!inode) return std::nullopt;
  const std::string link = "socket:[" + *inode + "]";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    std::error_code link_error;
    if (std::filesystem::read_symlink(entry.path(), link_error).string() != link) continue;
    int fd = -1;
    const std::string name = entry.path().filename().string();
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec == std::errc{}) {
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

void ClientConnection::drop_received() const {
  char buffer[16384];
  for (size_t dropped = 0; dropped < (size_t{1} << 20);) {
    const ssize_t n = recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
  }
}

}  // namespace kvtier
