// Messages between the processes of `kvtier serve`: one ZeroMQ frame holding a MessagePack map
// whose field "t" names the message type (docs/engine.md lists them). A ROUTER socket's peer
// routing id travels as the frame before it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "kvtier/core/status.h"

namespace kvtier {

struct Envelope {
  std::string peer;  // routing id of the sender (ROUTER sockets only)
  nlohmann::json body;
};

// One message body as the bytes of its frame.
std::vector<uint8_t> encode_message(const nlohmann::json& body);
// The body a frame holds: a MessagePack map with a string "t". Anything else is
// kInvalidArgument; no input throws, crashes or is partly accepted.
Result<nlohmann::json> decode_message(std::span<const uint8_t> frame);

// Makes the queues of one of the engine's own sockets (frontend, engine core, workers)
// unbounded, before it binds or connects. Every message there carries state (a request, its
// tokens, a step's verdicts): one dropped at ZeroMQ's high-water mark (1,000 messages by default,
// reached by a reader a few busy steps behind) would be lost silently, a response missing tokens
// or a request never ended. The queues are bounded by the work in flight.
void lossless_queues(zmq::socket_t& socket);

// DEALER side: sends `body`. Never blocks for long: a peer that is gone drops the message.
void send_message(zmq::socket_t& socket, const nlohmann::json& body);
// ROUTER side: sends `body` to `peer`; an unknown peer drops it.
void send_message_to(zmq::socket_t& socket, const std::string& peer, const nlohmann::json& body);

// Receives one message if one is waiting, without blocking. nullopt: nothing waiting. A frame
// that is not a MessagePack map with a string "t" is kInvalidArgument (the caller logs and goes
// on: a malformed message never takes a process down).
std::optional<Result<Envelope>> try_receive(zmq::socket_t& socket, bool router);

}  // namespace kvtier
