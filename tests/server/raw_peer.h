// RawPeer: a bare DEALER speaking raw frames, for frames no client library would send.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "kvtier/server/protocol.h"

namespace kvtier::testing {

class RawPeer {
 public:
  explicit RawPeer(const std::string& endpoint) : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  void send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  // Sends `request` as one frame and waits for the next reply.
  std::optional<server::Reply> call(const server::Request& request,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(3)) {
    send({server::encode_request(request)});
    return receive(timeout);
  }
  // The next reply, or nullopt when none arrives within `timeout`.
  std::optional<server::Reply> receive(
      std::chrono::milliseconds timeout = std::chrono::seconds(3)) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    zmq::message_t msg;
    if (!socket_.recv(msg)) return std::nullopt;
    auto reply = server::decode_reply(server::as_bytes(msg.to_string_view()));
    EXPECT_TRUE(reply) << reply.error().message;
    return reply ? std::optional(*reply) : std::nullopt;
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

}  // namespace kvtier::testing
