#include "kvtier/engine/zmq_collective.h"

#include <cstring>
#include <stdexcept>

namespace kvtier {

ZmqCollective::ZmqCollective(zmq::context_t& context, const std::string& endpoint, uint32_t rank,
                             uint32_t world_size, std::chrono::milliseconds timeout)
    : rank_(rank),
      world_size_(world_size),
      timeout_(timeout),
      socket_(context, rank == 0 ? zmq::socket_type::router : zmq::socket_type::dealer) {
  socket_.set(zmq::sockopt::linger, 0);
  if (rank == 0) {
    socket_.bind(endpoint);
    gathered_.resize(world_size);
  } else {
    socket_.set(zmq::sockopt::routing_id, "r" + std::to_string(rank));
    socket_.connect(endpoint);
  }
}

zmq::message_t ZmqCollective::receive(const char* what) {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout_) == 0) {
    throw std::runtime_error(std::string("collective: no ") + what + " within " +
                             std::to_string(timeout_.count()) + " ms");
  }
  zmq::message_t msg;
  (void)socket_.recv(msg, zmq::recv_flags::none);
  return msg;
}

void ZmqCollective::all_reduce_sum(std::span<float> data) {
  if (world_size_ == 1) return;
  const size_t bytes = data.size_bytes();
  if (rank_ != 0) {
    (void)socket_.send(zmq::buffer(data.data(), bytes), zmq::send_flags::none);
    zmq::message_t result = receive("result from rank 0");
    if (result.size() != bytes)
      throw std::invalid_argument("collective: span length differs between ranks");
    std::memcpy(data.data(), result.data(), bytes);
    return;
  }
  // Rank 0: gather every other rank's buffer (they arrive in any order), then sum in rank order.
  for (uint32_t received = 1; received < world_size_; ++received) {
    zmq::message_t id = receive("buffer from a rank");
    zmq::message_t body;
    (void)socket_.recv(body, zmq::recv_flags::none);
    const uint32_t from = static_cast<uint32_t>(std::stoul(id.to_string().substr(1)));
    if (from == 0 || from >= world_size_ || body.size() != bytes) {
      throw std::invalid_argument("collective: bad buffer from rank " + id.to_string());
    }
    gathered_[from].resize(data.size());
    std::memcpy(gathered_[from].data(), body.data(), bytes);
  }
  for (uint32_t r = 1; r < world_size_; ++r) {
    const float* other = gathered_[r].data();
    for (size_t i = 0; i < data.size(); ++i) data[i] += other[i];
  }
  for (uint32_t r = 1; r < world_size_; ++r) {
    const std::string id = "r" + std::to_string(r);
    (void)socket_.send(zmq::buffer(id), zmq::send_flags::sndmore);
    (void)socket_.send(zmq::buffer(data.data(), bytes), zmq::send_flags::none);
  }
}

}  // namespace kvtier
