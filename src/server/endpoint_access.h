// Who may reach kvtierd's endpoint (docs/operations.md, "Access control"):
// - With server.tenants_file: CURVE. The ROUTER is a CURVE server with kvtierd's key pair
//   (server.curve_key_file); the ZAP handler (zap_handler.h) admits the listed public keys.
// - Without it: no authentication; every client is the default tenant. Allowed on ipc:// (the
//   socket file is created with mode 0600, or 0660 for server.ipc_group) and on any other
//   transport only with server.insecure (a warning is logged).
#pragma once

#include <string>
#include <zmq.hpp>

#include "kvtier/core/config.h"
#include "kvtier/core/status.h"

namespace kvtier::server {

// The transport's rule above: kInvalidArgument for a non-ipc:// endpoint without
// server.tenants_file or server.insecure. A warning to log (else "") in `warning`.
Status check_endpoint_access(const ServerConfig& server, std::string& warning);
// Makes `router` a CURVE server with the key pair in server.curve_key_file (before bind).
// kUnimplemented when libzmq has no CURVE; kInvalidArgument for a bad key pair file.
Status enable_curve_server(zmq::socket_t& router, const ServerConfig& server);
// Binds `router` to server.endpoint; an ipc:// socket file is created with mode 0600 (0660 and
// group server.ipc_group when set: an unknown group is kInvalidArgument). kUnavailable when
// the endpoint cannot be bound.
Status bind_endpoint(zmq::socket_t& router, const ServerConfig& server);

}  // namespace kvtier::server
