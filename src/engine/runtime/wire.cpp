#include "kvtier/engine/wire.h"

#include <vector>

namespace kvtier {
namespace {

zmq::message_t encode(const nlohmann::json& body) {
  const std::vector<uint8_t> bytes = encode_message(body);
  return zmq::message_t(bytes.data(), bytes.size());
}

}  // namespace

std::vector<uint8_t> encode_message(const nlohmann::json& body) {
  return nlohmann::json::to_msgpack(body);
}

Result<nlohmann::json> decode_message(std::span<const uint8_t> frame) {
  nlohmann::json body = nlohmann::json::from_msgpack(frame.begin(), frame.end(), true, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("t") || !body["t"].is_string()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "not a message (" + std::to_string(frame.size()) + " bytes)");
  }
  return body;
}

void lossless_queues(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
}

void send_message(zmq::socket_t& socket, const nlohmann::json& body) {
  (void)socket.send(encode(body), zmq::send_flags::dontwait);
}

void send_message_to(zmq::socket_t& socket, const std::string& peer, const nlohmann::json& body) {
  if (!socket.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
  (void)socket.send(encode(body), zmq::send_flags::dontwait);
}

std::optional<Result<Envelope>> try_receive(zmq::socket_t& socket, bool router) {
  Envelope envelope;
  zmq::message_t frame;
  if (router) {
    if (!socket.recv(frame, zmq::recv_flags::dontwait)) return std::nullopt;
    envelope.peer = frame.to_string();
    if (!frame.more()) return make_error(ErrorCode::kInvalidArgument, "message without a body");
    if (!socket.recv(frame, zmq::recv_flags::none)) {
      return make_error(ErrorCode::kInvalidArgument, "message without a body");
    }
  } else if (!socket.recv(frame, zmq::recv_flags::dontwait)) {
    return std::nullopt;
  }
  // Drain any extra frames: one message is exactly one body frame.
  bool extra = frame.more();
  while (extra) {
    zmq::message_t rest;
    (void)socket.recv(rest, zmq::recv_flags::none);
    extra = rest.more();
  }
  Result<nlohmann::json> body =
      decode_message(std::span(static_cast<const uint8_t*>(frame.data()), frame.size()));
  if (!body) {
    return make_error(ErrorCode::kInvalidArgument,
                      "malformed message from '" + envelope.peer + "': " + body.error().message);
  }
  envelope.body = std::move(*body);
  return envelope;
}

}  // namespace kvtier
