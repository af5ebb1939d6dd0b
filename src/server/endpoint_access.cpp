#include "endpoint_access.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "kvtier/server/curve_keys.h"

namespace kvtier::server {
namespace {

constexpr std::string_view kIpc = "ipc://";

// The gid of `name`, or an error naming it.
Result<gid_t> group_id(const std::string& name) {
  std::vector<char> buffer(16384);
  group g{};
  group* found = nullptr;
  const int rc = getgrnam_r(name.c_str(), &g, buffer.data(), buffer.size(), &found);
  if (rc != 0 || found == nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      "server.ipc_group: no group '" + name + "'" +
                          (rc != 0 ? std::string(": ") + std::strerror(rc) : std::string()));
  }
  return found->gr_gid;
}

// Makes `path` free for an ipc:// bind: see bind_endpoint().
Status claim_ipc_path(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return make_error(ErrorCode::kUnavailable,
                      "server.endpoint: cannot check ipc://" + path + ": " + std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return make_error(ErrorCode::kInvalidArgument, "server.endpoint: " + path +
                                                       " exists and is not a socket (kvtierd does "
                                                       "not replace it); choose another path");
  }
  sockaddr_un address{};
  if (path.size() >= sizeof address.sun_path) return {};  // the bind reports it
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return make_error(ErrorCode::kUnavailable,
                      std::string("server.endpoint: socket(): ") + std::strerror(errno));
  }
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  if (rc == 0 || err == EAGAIN || err == EINPROGRESS) {  // accepted, or a full backlog
    return make_error(ErrorCode::kUnavailable,
                      "server.endpoint ipc://" + path +
                          " is served by another process (a kvtierd already running?): stop it, "
                          "or choose another path");
  }
  if (err != ECONNREFUSED) {
    return make_error(ErrorCode::kUnavailable,
                      "server.endpoint: cannot check ipc://" + path + ": " + std::strerror(err));
  }
  // Nobody accepts on it: left by a process that is gone.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return make_error(ErrorCode::kUnavailable, "server.endpoint: cannot remove the stale " + path +
                                                   ": " + std::strerror(errno));
  }
  return {};
}

}  // namespace

IpcSocketFile& IpcSocketFile::operator=(IpcSocketFile&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::exchange(other.path_, {});
    device_ = other.device_;
    inode_ = other.inode_;
  }
  return *this;
}

void IpcSocketFile::remove() {
  if (path_.empty()) return;
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_) {
    ::unlink(path_.c_str());
  }
  path_.clear();
}

Status check_endpoint_access(const ServerConfig& server, std::string& warning) {
  warning.clear();
  // ipc://@name is Linux's abstract namespace: no file, so no mode keeps other users out.
  const bool abstract = server.endpoint.starts_with("ipc://@");
  const bool ipc = server.endpoint.starts_with(kIpc);
  if (!server.tenants_file.empty() && !ipc && geteuid() == 0) {
    // REGISTER opens memory only of processes of the client's user, and over tcp:// that user
    // is taken to be the server's own (SharedKvMapping::open): here, root's.
    warning = "kvtierd runs as root and serves " + server.endpoint +
              ": it cannot tell which user a tcp:// client runs as, so a client of any tenant "
              "may register the memory of any process on this machine; run kvtierd as a user "
              "of its own, or serve an ipc:// endpoint";
  }
  if (!server.tenants_file.empty() || (ipc && !abstract)) return {};
  if (!server.insecure) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "server.endpoint " + server.endpoint +
            (abstract ? " is an abstract ipc:// socket (any user can connect)" : " is not ipc://") +
            ", so kvtierd requires CURVE: set server.tenants_file and "
            "server.curve_key_file (docs/operations.md), or accept any client that "
            "reaches it with server.insecure=true (kvtier server --insecure)");
  }
  warning = "serving " + server.endpoint +
            " without authentication (server.insecure): anyone who reaches it reads and writes "
            "every chunk";
  return {};
}

Status enable_curve_server(zmq::socket_t& router, const ServerConfig& server) {
  if (!curve_available()) {
    return make_error(ErrorCode::kUnimplemented,
                      "server.tenants_file needs CURVE, and this libzmq was built without it");
  }
  auto keys = read_curve_key_pair(server.curve_key_file);
  if (!keys) {
    return make_error(ErrorCode::kInvalidArgument,
                      "server.curve_key_file: " + keys.error().message);
  }
  router.set(zmq::sockopt::curve_server, 1);
  router.set(zmq::sockopt::curve_secretkey, keys->secret_key);
  // A ZAP domain makes libzmq ask the handler for every connection (RFC 27).
  router.set(zmq::sockopt::zap_domain, "kvtierd");
  return {};
}

Result<IpcSocketFile> bind_endpoint(zmq::socket_t& router, const ServerConfig& server) {
  // ipc://@name is Linux's abstract namespace: no file, so no mode (check_endpoint_access
  // treats it as a network endpoint). ipc://* is a file libzmq names.
  const bool ipc = server.endpoint.starts_with(kIpc) && !server.endpoint.starts_with("ipc://@") &&
                   server.endpoint != "ipc://*";
  const std::string path = ipc ? server.endpoint.substr(kIpc.size()) : std::string();
  std::optional<gid_t> gid;
  if (ipc && !server.ipc_group.empty()) {
    auto g = group_id(server.ipc_group);
    if (!g) return std::unexpected(g.error());
    gid = *g;
  }
  if (ipc) {
    if (Status claimed = claim_ipc_path(path); !claimed) return std::unexpected(claimed.error());
  }
  // The socket file is created by bind() on this thread: the umask makes it private from the
  // first moment (no window in which another user could connect).
  const mode_t previous = ipc ? ::umask(gid ? 0117 : 0177) : 0;
  try {
    router.bind(server.endpoint);
  } catch (const zmq::error_t& e) {
    if (ipc) ::umask(previous);
    return make_error(ErrorCode::kUnavailable, "cannot bind " + server.endpoint + ": " + e.what());
  }
  if (ipc) ::umask(previous);
  IpcSocketFile bound;
  if (ipc) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) bound = IpcSocketFile(path, st.st_dev, st.st_ino);
  }
  if (gid) {
    if (::chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0) {
      return make_error(ErrorCode::kInvalidArgument, "server.ipc_group: cannot give " + path +
                                                         " to group " + server.ipc_group + ": " +
                                                         std::strerror(errno));
    }
  }
  return bound;
}

}  // namespace kvtier::server
