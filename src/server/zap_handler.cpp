#include "zap_handler.h"

#include <chrono>
#include <string>
#include <vector>
#include <zmq_addon.hpp>

namespace kvtier::server {
namespace {

constexpr auto kStopPoll = std::chrono::milliseconds(100);

}  // namespace

ZapHandler::ZapHandler(zmq::context_t& context, const Tenants& tenants,
                       std::atomic<uint64_t>& refused)
    : socket_(context, zmq::socket_type::rep), tenants_(tenants), refused_(refused) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this] { run(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::run() {
  while (!stop_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      if (zmq::poll(&item, 1, kStopPoll) == 0) continue;
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(socket_, std::back_inserter(request))) continue;
      // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
      std::string status = "400";
      std::string text = "refused";
      std::string user;
      if (request.size() >= 7 && request[0].to_string_view() == "1.0" &&
          request[5].to_string_view() == "CURVE" && request[6].size() == 32) {
        const auto* key = static_cast<const uint8_t*>(request[6].data());
        if (auto tenant = tenants_.by_key({key, 32})) {
          status = "200";
          text = "OK";
          user = tenants_[*tenant].name;
        }
      }
      if (status != "200") ++refused_;
      const std::string version = "1.0";
      const std::string request_id = request.size() > 1 ? request[1].to_string() : std::string();
      std::vector<zmq::const_buffer> reply = {zmq::buffer(version), zmq::buffer(request_id),
                                              zmq::buffer(status),  zmq::buffer(text),
                                              zmq::buffer(user),    zmq::const_buffer()};
      zmq::send_multipart(socket_, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      // Anything else (an interrupted poll): serve on; every client's handshake waits for us.
    }
  }
}

}  // namespace kvtier::server
