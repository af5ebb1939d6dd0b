// ZmqCollective: the tensor-parallel all-reduce between the worker processes of one engine
// core, over ZeroMQ. Rank 0 binds a ROUTER at `endpoint`; every other rank connects a DEALER.
// A call: ranks 1..N-1 send their buffer to rank 0, rank 0 sums rank 0 + rank 1 + … in that
// order (collective.h) and sends the result back to each.
//
// A rank that never arrives: the others wait at most `timeout`, then throw std::runtime_error
// (the worker reports it and exits; its engine core is failing by then, since a rank that stops
// is a dead or stalled worker).
#pragma once

#include <chrono>
#include <string>
#include <zmq.hpp>

#include "kvtier/engine/collective.h"

namespace kvtier {

class ZmqCollective final : public Collective {
 public:
  ZmqCollective(zmq::context_t& context, const std::string& endpoint, uint32_t rank,
                uint32_t world_size, std::chrono::milliseconds timeout);

  uint32_t rank() const override { return rank_; }
  uint32_t world_size() const override { return world_size_; }
  void all_reduce_sum(std::span<float> data) override;

 private:
  zmq::message_t receive(const char* what);

  uint32_t rank_;
  uint32_t world_size_;
  std::chrono::milliseconds timeout_;
  zmq::socket_t socket_;
  std::vector<std::vector<float>> gathered_;  // rank 0: buffers of ranks 1..N-1
};

}  // namespace kvtier
