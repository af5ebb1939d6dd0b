// Who may reach kvtierd's endpoint (docs/operations.md, "Access control"):
// - With server.tenants_file: CURVE. The ROUTER is a CURVE server with kvtierd's key pair
//   (server.curve_key_file); the ZAP handler (zap_handler.h) admits the listed public keys.
// - Without it: no authentication; every client is the default tenant. Allowed on ipc:// with
//   a path (the socket file is created with mode 0600, or 0660 for server.ipc_group) and on any
//   other transport, the abstract ipc://@name included, only with server.insecure (a warning
//   is logged).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <zmq.hpp>

#include "kvtier/core/config.h"
#include "kvtier/core/status.h"

namespace kvtier::server {

// The transport's rule above: kInvalidArgument for an endpoint other than an ipc:// path without
// server.tenants_file or server.insecure. A warning to log (else "") in `warning`.
Status check_endpoint_access(const ServerConfig& server, std::string& warning);
// Makes `router` a CURVE server with the key pair in server.curve_key_file (before bind).
// kUnimplemented when libzmq has no CURVE; kInvalidArgument for a bad key pair file.
Status enable_curve_server(zmq::socket_t& router, const ServerConfig& server);
// The socket file of an ipc:// endpoint this process bound. Destroying it removes the file,
// unless the file at that path is no longer the one bound (another process's since).
class IpcSocketFile {
 public:
  IpcSocketFile() = default;
  IpcSocketFile(std::string path, dev_t device, ino_t inode)
      : path_(std::move(path)), device_(device), inode_(inode) {}
  IpcSocketFile(IpcSocketFile&& other) noexcept
      : path_(std::exchange(other.path_, {})), device_(other.device_), inode_(other.inode_) {}
  IpcSocketFile& operator=(IpcSocketFile&& other) noexcept;
  IpcSocketFile(const IpcSocketFile&) = delete;
  IpcSocketFile& operator=(const IpcSocketFile&) = delete;
  ~IpcSocketFile() { remove(); }

 private:
  void remove();

  std::string path_;  // empty: nothing to remove
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

// Binds `router` to server.endpoint. An ipc:// path is claimed first: a socket that a live
// process accepts on is kUnavailable (libzmq would replace it, leaving that server running
// unreachable), anything there that is not a socket is kInvalidArgument, and a socket nobody
// accepts on (left by a process that is gone) is replaced. The socket file is created with
// mode 0600 (0660 and group server.ipc_group when set: an unknown group is kInvalidArgument),
// and returned for removal when the server stops. kUnavailable when the endpoint cannot be
// bound. (Two servers started at the same instant on one path can both pass the claim.)
Result<IpcSocketFile> bind_endpoint(zmq::socket_t& router, const ServerConfig& server);

}  // namespace kvtier::server
