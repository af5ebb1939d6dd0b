#include "endpoint_access.h"

#include <grp.h>
#include <sys/stat.h>
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

}  // namespace

Status check_endpoint_access(const ServerConfig& server, std::string& warning) {
  warning.clear();
  if (!server.tenants_file.empty() || server.endpoint.starts_with(kIpc)) return {};
  if (!server.insecure) {
    return make_error(ErrorCode::kInvalidArgument,
                      "server.endpoint " + server.endpoint +
                          " is not ipc://, so kvtierd requires CURVE: set server.tenants_file and "
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

Status bind_endpoint(zmq::socket_t& router, const ServerConfig& server) {
  // ipc://@name is Linux's abstract namespace: no file, so no mode (a peer's credentials are
  // not checked; use a path).
  const bool ipc = server.endpoint.starts_with(kIpc) && !server.endpoint.starts_with("ipc://@");
  std::optional<gid_t> gid;
  if (ipc && !server.ipc_group.empty()) {
    auto g = group_id(server.ipc_group);
    if (!g) return std::unexpected(g.error());
    gid = *g;
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
  if (gid) {
    const std::string path = server.endpoint.substr(kIpc.size());
    if (::chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0) {
      return make_error(ErrorCode::kInvalidArgument, "server.ipc_group: cannot give " + path +
                                                         " to group " + server.ipc_group + ": " +
                                                         std::strerror(errno));
    }
  }
  return {};
}

}  // namespace kvtier::server
