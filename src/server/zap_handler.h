// ZapHandler: kvtierd's ZeroMQ authentication handler (ZAP, ZeroMQ RFC 27) for CURVE. libzmq
// asks it, over inproc://zeromq.zap.01 of the server's context, whether each client that
// completed a CURVE handshake may connect; it admits the public keys the tenants file lists and
// names the key's tenant as the ZAP "user id", which libzmq attaches to every message of that
// connection as the "User-Id" property (how the socket loop learns a request's tenant). Every
// other client, and every other mechanism, is refused: the connection is closed before any
// request of it is read.
//
// Thread: answers on its own thread from construction until destruction. Destroy it before
// its context.
#pragma once

#include <atomic>
#include <thread>
#include <zmq.hpp>

#include "tenants.h"

namespace kvtier::server {

class ZapHandler {
 public:
  // Binds inproc://zeromq.zap.01 now, so that it must be constructed before a CURVE server
  // socket of `context` binds. `tenants` and `refused` outlive the handler; `refused` counts
  // the clients it refused.
  ZapHandler(zmq::context_t& context, const Tenants& tenants, std::atomic<uint64_t>& refused);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

 private:
  void run();

  zmq::socket_t socket_;
  const Tenants& tenants_;
  std::atomic<uint64_t>& refused_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvtier::server
