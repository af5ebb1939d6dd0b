// kvtierd's socket loop: owns the ROUTER socket, rejects bad frames itself, answers PING,
// enforces per-client limits, tracks client liveness, and forwards replies the cache service
// produces. It never runs a handler, so a slow handler never blocks it.
#include <chrono>
#include <map>
#include <random>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "cache_service.h"
#include "kvtier/server/server.h"

namespace kvtier::server {
namespace {

using std::chrono::milliseconds;

constexpr auto kPollInterval = milliseconds(50);
constexpr size_t kMaxMessagesPerWakeup = 256;

struct Peer {
  TimePoint last_seen;
  uint32_t in_flight = 0;
};

uint64_t random_boot_id() {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  return id == 0 ? 1 : id;
}

void send_to(zmq::socket_t& router, const std::string& client, const std::string& body) {
  // Non-blocking: a client that went away (or whose queue is full) loses the reply; it never
  // stalls the loop. Its future then ends by its own deadline (F8).
  try {
    if (!router.send(zmq::buffer(client), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return;
    }
    static_cast<void>(router.send(zmq::buffer(body), zmq::send_flags::dontwait));
  } catch (const zmq::error_t&) {
  }
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)), boot_id_(random_boot_id()) {}
Server::~Server() = default;

Status Server::run() {
  const Config& config = options_.config;
  if (Status st = config.validate(); !st) return st;
  HostDevice host;
  std::unique_ptr<FaultInjectingDevice> fault;
  if (options_.test_hooks) fault = std::make_unique<FaultInjectingDevice>(host, FaultPlan{});
  Device& device = fault ? static_cast<Device&>(*fault) : host;

  const size_t slot_bytes = config.kv_layout().max_chunk_bytes();
  const size_t num_slots = config.cache.host_bytes / slot_bytes;
  if (num_slots == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cache.host_bytes (" + std::to_string(config.cache.host_bytes) +
                          ") holds no chunk of " + std::to_string(slot_bytes) + " bytes");
  }
  auto pool = HostPool::create(device, slot_bytes, num_slots, config.cache.shm_name);
  if (!pool) return std::unexpected(pool.error());
  auto tiers = make_server_tiers(config);  // a bad disk_path / redis_url ends startup here
  if (!tiers) return std::unexpected(tiers.error());

  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 200);
  // Frames past 16x max_frame_bytes are dropped by the transport with the connection (the
  // memory bound); frames past max_frame_bytes get a too_large error reply.
  router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(std::min<uint64_t>(
                                           config.server.max_frame_bytes * 16, INT32_MAX)));
  try {
    router.bind(config.server.endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable,
                      "cannot bind " + config.server.endpoint + ": " + e.what());
  }
  const std::string reply_endpoint = "inproc://kvtierd-replies";
  zmq::socket_t replies(context, zmq::socket_type::pull);
  replies.bind(reply_endpoint);

  LoopCounters counters;
  std::unique_ptr<zmq::socket_t> push;  // used on the service thread only
  const auto push_socket = [&]() -> zmq::socket_t& {
    if (!push) {
      push = std::make_unique<zmq::socket_t>(context, zmq::socket_type::push);
      push->set(zmq::sockopt::linger, 0);
      push->connect(reply_endpoint);
    }
    return *push;
  };
  auto service = std::make_unique<CacheService>(
      options_, host, device, fault.get(), **pool, boot_id_, counters,
      [&](const std::string& client, const Reply& reply) {
        zmq::socket_t& s = push_socket();
        s.send(zmq::buffer(client), zmq::send_flags::sndmore);
        s.send(zmq::buffer(encode_reply(reply)), zmq::send_flags::none);
      },
      [&] {
        zmq::socket_t& s = push_socket();
        s.send(zmq::str_buffer(""), zmq::send_flags::sndmore);  // empty routing id: drained
        s.send(zmq::str_buffer(""), zmq::send_flags::none);
      },
      std::move(*tiers));
  service->start();

  const DecodeLimits limits{.max_frame_bytes = config.server.max_frame_bytes};
  const Duration client_timeout = seconds_to_duration(config.server.client_timeout_s);
  const uint32_t max_in_flight = config.server.max_requests_in_flight;
  std::map<std::string, Peer> peers;
  bool shutdown_begun = false;
  bool drained = false;

  const auto answer = [&](const std::string& client, const Reply& reply) {
    send_to(router, client, encode_reply(reply));
  };
  const auto on_request = [&](const std::string& client, std::vector<zmq::message_t>& parts) {
    Peer& peer = peers[client];
    peer.last_seen = SteadyClock::instance().now();
    ++counters.requests;
    if (parts.size() != 2) {
      ++counters.rejected_frames;
      answer(client, Reply::error(0, codes::kMalformed,
                                  "expected exactly one frame after the routing id, got " +
                                      std::to_string(parts.size() - 1)));
      return;
    }
    uint64_t id = 0;
    auto request = decode_request(as_bytes(parts[1].to_string_view()), limits, &id);
    if (!request) {
      ++counters.rejected_frames;
      auto [code, message] = split_decode_error(request.error());
      answer(client, Reply::error(id, code, message));
      return;
    }
    if (request->hook != TestHook::kNone && !options_.test_hooks) {
      answer(client, Reply::error(id, codes::kInvalidArgument,
                                  "test hooks are disabled (start kvtierd with --test-hooks)"));
      return;
    }
    if (request->op == Op::kPing && request->hook == TestHook::kNone) {
      ++counters.pings;
      Reply pong;
      pong.id = id;
      pong.fields = {{"boot_id", boot_id_}};
      for (const std::string& tier : service->degraded_tiers())
        pong.fields[tier_down_field(tier)] = 1;
      answer(client, pong);
      return;
    }
    if (peer.in_flight >= max_in_flight) {
      ++counters.limit_rejections;
      answer(client, Reply::error(id, codes::kLimitExceeded,
                                  "more than server.max_requests_in_flight (" +
                                      std::to_string(max_in_flight) + ") requests in flight"));
      return;
    }
    ++peer.in_flight;
    service->post(Envelope{client, std::move(*request)});
  };

  while (!drained) {
    zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0},
                               {replies.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, kPollInterval);
    if (stop_requested_.load() && !shutdown_begun) {
      shutdown_begun = true;
      service->begin_shutdown();
    }
    for (size_t n = 0; n < kMaxMessagesPerWakeup; ++n) {
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(router, std::back_inserter(parts), zmq::recv_flags::dontwait)) break;
      on_request(parts[0].to_string(), parts);
    }
    for (size_t n = 0; n < kMaxMessagesPerWakeup; ++n) {
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(replies, std::back_inserter(parts), zmq::recv_flags::dontwait))
        break;
      const std::string client = parts.at(0).to_string();
      if (client.empty()) {
        drained = true;
        continue;
      }
      if (auto it = peers.find(client); it != peers.end() && it->second.in_flight > 0) {
        --it->second.in_flight;
      }
      send_to(router, client, parts.at(1).to_string());
    }
    // Liveness: a live client PINGs every heartbeat interval, so only a silent one is reaped.
    const TimePoint now = SteadyClock::instance().now();
    for (auto it = peers.begin(); it != peers.end();) {
      if (now - it->second.last_seen > client_timeout) {
        ++counters.clients_reaped;
        service->client_gone(it->first);
        it = peers.erase(it);
      } else {
        ++it;
      }
    }
  }
  Reply event;
  event.event = "shutdown";
  for (const auto& [client, peer] : peers) answer(client, event);
  service.reset();
  return {};
}

}  // namespace kvtier::server
