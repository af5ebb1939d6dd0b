#include "kvtierd_instance.h"

#include <chrono>
#include <stdexcept>
#include <thread>
#include <zmq.hpp>

#include "kvtier/core/config.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/server/protocol.h"

namespace kvtier::bench {

KvtierdInstance::KvtierdInstance(std::string exe, std::string endpoint,
                                 std::vector<std::string> sets, std::filesystem::path log)
    : exe_(std::move(exe)),
      endpoint_(std::move(endpoint)),
      sets_(std::move(sets)),
      log_(std::move(log)) {}

KvtierdInstance::~KvtierdInstance() {
  process_.kill_and_reap();
}

bool KvtierdInstance::start(Duration ready_timeout) {
  process_.kill_and_reap();
  killed_ = false;
  std::vector<std::string> argv = {exe_, "--set", "server.endpoint=" + endpoint_};
  for (const std::string& s : sets_) argv.insert(argv.end(), {"--set", s});
  argv.push_back("server");
  process_ = ChildProcess::spawn(argv, {.output_file = log_});
  const auto deadline = std::chrono::steady_clock::now() + ready_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (process_.poll_exit()) return false;
    if (stats(std::chrono::milliseconds(200))) return true;
  }
  return false;
}

bool KvtierdInstance::running() {
  return !process_.poll_exit().has_value() && process_.running();
}

std::optional<std::string> KvtierdInstance::crashed() {
  if (killed_ || process_.pid() < 0) return std::nullopt;
  return process_.poll_exit();
}

std::optional<std::map<std::string, uint64_t>> KvtierdInstance::stats(Duration timeout) const {
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint_);
  server::Request request;
  request.id = 1;
  request.op = server::Op::kStats;
  if (!dealer.send(zmq::buffer(server::encode_request(request)), zmq::send_flags::dontwait))
    return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, left);
    if (!(item.revents & ZMQ_POLLIN)) continue;
    zmq::message_t message;
    if (!dealer.recv(message, zmq::recv_flags::dontwait)) continue;
    const Result<server::Reply> reply =
        server::decode_reply({static_cast<const std::byte*>(message.data()), message.size()});
    if (reply && reply->id == 1 && reply->ok) return reply->fields.to_map();
  }
}

std::vector<std::string> kvtierd_layout_sets(const std::vector<std::string>& serve_sets) {
  const Result<Config> config = with_overrides(Config{}, serve_sets);
  if (!config) throw std::runtime_error("kvtier serve overrides: " + config.error().message);
  const KvGroup g = engine_shape(*config).layout.groups.at(0);
  return {"layout.layers=" + std::to_string(g.layers),
          "layout.kv_heads=" + std::to_string(g.kv_heads),
          "layout.head_dim=" + std::to_string(g.head_dim),
          "layout.dtype_bytes=" + std::to_string(g.dtype_bytes),
          "layout.block_size=" + std::to_string(g.block_size),
          "layout.blocks_per_chunk=" + std::to_string(g.blocks_per_chunk)};
}

}  // namespace kvtier::bench
