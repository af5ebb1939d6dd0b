// kvtierd's socket loop: owns the ROUTER socket, rejects bad frames itself, answers PING and
// (through CacheService::lookup_now, under the cache state's mutex) LOOKUP, enforces per-client
// limits, tracks client liveness, and forwards replies the cache service produces. It never
// runs a handler, so a slow handler never blocks it.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "cache_service.h"
#include "endpoint_access.h"
#include "kvtier/core/keep_forever.h"
#include "kvtier/core/log.h"
#include "kvtier/server/server.h"
#include "lookup_frames.h"
#include "zap_handler.h"

namespace kvtier::server {
namespace {

using std::chrono::milliseconds;

constexpr auto kPollInterval = milliseconds(50);
constexpr size_t kMaxMessagesPerWakeup = 256;

struct Peer {
  TenantId tenant = kDefaultTenant;  // of its first message; a routing id keeps its tenant
  TimePoint last_seen;
  uint32_t in_flight = 0;
  // Posted to the service and not yet dispatched there (CacheService's QueuedCount).
  QueuedCount queued = std::make_shared<std::atomic<uint32_t>>(0);
};

uint64_t random_boot_id() {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  return id == 0 ? 1 : id;
}

// A copy of `message`'s metadata property `name` (nullopt when it has none). libzmq's I/O
// thread wrote it and handed the message over through its own pipe, which ThreadSanitizer does
// not see (libzmq is not instrumented): tests/tsan.supp names this function, whose only memory
// access is that copy.
[[gnu::noinline]] std::optional<std::string> message_property(zmq::message_t& message,
                                                              const char* name) {
  const char* value = zmq_msg_gets(message.handle(), name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

void send_to(zmq::socket_t& router, const std::string& client, std::string_view body) {
  // Non-blocking: a client that went away (or whose queue is full) loses the reply; it never
  // stalls the loop. Its future then ends by its own deadline (F8).
  try {
    if (!router.send(zmq::buffer(client), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return;
    }
    static_cast<void>(router.send(zmq::buffer(body), zmq::send_flags::dontwait));
  } catch (const zmq::error_t&) {
    // ignored: a reply that cannot be sent now is dropped; the call ends by its deadline (F8).
  }
}

}  // namespace

size_t effective_copy_threads(const ServerConfig& server) {
  if (server.copy_threads != 0) return server.copy_threads;
  return std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 1, 4);
}

// One run of kvtierd's socket loop: setup() acquires everything it serves with; then, each
// turn, wait() for traffic, pump() it (admit() each request, forward each reply) and reap()
// the clients that went silent; farewell() once the cache service drained.
class SocketLoop {
 public:
  // The host pool (with the fault injector under test hooks), the lower tiers, the ROUTER
  // socket bound to server.endpoint, the reply channel from the service thread, and the cache
  // service, started. An error when the configuration is invalid, the pool holds no chunk or
  // cannot be created, a tier cannot be opened, or the endpoint cannot be bound.
  static Result<std::unique_ptr<SocketLoop>> setup(const ServerOptions& options, uint64_t boot_id);

  SocketLoop(const SocketLoop&) = delete;
  SocketLoop& operator=(const SocketLoop&) = delete;
  // The service (and its thread) goes first: it uses the pool, the device and push_. Where an
  // Unprovable transfer's copies may still run (F7), the pool they copy to and the devices that
  // run them are left to the process's end: unmapping the pool under them, or releasing a hung
  // copy (the fault device's end) over it, would crash the process at exit.
  ~SocketLoop() {
    if (!service_) return;
    service_->stop();
    const bool copies_may_run = service_->copies_may_run();
    service_.reset();
    if (copies_may_run) {
      keep_forever(std::move(pool_));
      keep_forever(std::move(fault_));
      keep_forever(std::move(host_));
    }
  }

  // Until a request or a reply arrives, at most kPollInterval.
  void wait();
  // Graceful shutdown: the service refuses new work, decides what is in flight, then drains.
  void begin_shutdown() { service_->begin_shutdown(); }
  // Up to kMaxMessagesPerWakeup requests, each through admit(), then as many replies from the
  // service, each forwarded to its client.
  void pump();
  // Liveness: a live client PINGs every heartbeat interval, so only a silent one is reaped.
  void reap(TimePoint now);
  // True once the service drained after begin_shutdown().
  bool drained() const { return drained_; }
  // After the drain: the "shutdown" event to every known client.
  void farewell();
  // Thread-safe (the metrics endpoint): Server::health() and metrics_text() while it runs.
  ServerHealth health() const;
  void add_metrics(PrometheusText& out) const;

 private:
  SocketLoop(const ServerOptions& options, uint64_t boot_id);

  // One frame: a request or a batch of them (each as if in its own frame); the replies given at
  // once go back in one frame (an array for a batch).
  void admit(const std::string& client, std::vector<zmq::message_t>& parts);
  // The replies one frame's requests got at once, encoded one after the other; each error reply
  // is accounted to the client (CacheService::account).
  struct Answers {
    CacheService& service;
    const std::string& client;
    BatchFrame& frame;  // the loop's, cleared for each frame received
    size_t count = 0;
    void add(const Reply& reply) {
      service.account(client, reply);
      append_reply(frame.bytes, reply);
      ++count;
    }
    // The replies as a frame: a batch's, or the one reply to a single request.
    std::string_view reply_frame(bool batch) { return batch ? frame.batch(count) : frame.body(); }
  };
  // One request: answers bad requests, disabled hooks, PING, requests over the client's
  // in-flight limit and (lookup_now) LOOKUP itself, adding the reply to `now`; posts the rest
  // to the service.
  void admit_one(const std::string& client, Peer& peer, zmq::message_t& message,
                 Result<Request> request, uint64_t id, Answers& now);
  // A LOOKUP (its keys scoped): over the in-flight limit, answered now (lookup_now), or posted
  // to the service, as `request` when the frame was decoded into one.
  void admit_lookup(const std::string& client, Peer& peer, const LookupQuery& query, Answers& now,
                    Request* request = nullptr);
  // A limit_exceeded reply when the client has server.max_requests_in_flight requests in flight.
  bool over_limit(const Peer& peer, uint64_t id, Answers& now);
  void post(const std::string& client, Peer& peer, Request request, uid_t client_uid = 0);
  // The user the sender of `message` runs as: the uid of its ipc:// socket's peer credentials,
  // which libzmq appends to the message's "Peer-Address" (":<uid>:<gid>:<pid>"); this server's
  // own user where the transport carries none (tcp://).
  uid_t client_uid_of(zmq::message_t& message) const;
  // The tenant of a request message: its "User-Id" (set by the ZAP handler) under CURVE, else
  // the default tenant; nullopt when a CURVE message names no known tenant.
  std::optional<TenantId> tenant_of(zmq::message_t& message) const;
  // One reply from the service: the empty routing id marks the drain.
  void forward(std::vector<zmq::message_t>& parts);
  void answer(const std::string& client, const Reply& reply) {
    service_->account(client, reply);
    send_to(router_, client, encode_reply(reply));
  }
  // The service thread's end of the reply channel, created on that thread.
  zmq::socket_t& push_socket();

  static constexpr const char* kReplyEndpoint = "inproc://kvtierd-replies";

  const ServerOptions& options_;
  const uint64_t boot_id_;
  const DecodeLimits limits_;
  LookupFrame lookups_;  // the frame being admitted, when read_lookup_frame took it
  BatchFrame answers_;   // the replies to it given at once (Answers)
  const Duration client_timeout_;
  const uint32_t max_in_flight_;
  std::unique_ptr<HostDevice> host_;
  std::unique_ptr<FaultInjectingDevice> fault_;  // under test hooks
  std::unique_ptr<HostPool> pool_;
  Tenants tenants_;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // under CURVE; before context_ ends
  zmq::socket_t router_;
  IpcSocketFile socket_file_;  // removed before router_ closes: no client connects any more
  zmq::socket_t replies_;
  LoopCounters counters_;
  std::unique_ptr<zmq::socket_t> push_;  // used on the service thread only
  std::unique_ptr<CacheService> service_;
  std::map<std::string, Peer> peers_;
  std::atomic<size_t> peer_count_{0};  // peers_.size(), for metrics
  // When wait() last returned (SteadyClock ns): /health says "stalled" once it is too old.
  std::atomic<int64_t> last_turn_ns_{SteadyClock::instance().now().time_since_epoch().count()};
  bool drained_ = false;
};

SocketLoop::SocketLoop(const ServerOptions& options, uint64_t boot_id)
    : options_(options),
      boot_id_(boot_id),
      limits_{.max_frame_bytes = options.config.server.max_frame_bytes},
      client_timeout_(seconds_to_duration(options.config.server.client_timeout_s)),
      max_in_flight_(options.config.server.max_requests_in_flight),
      host_(std::make_unique<HostDevice>(HostDevice::kDefaultMaxDescriptorsPerCall,
                                         effective_copy_threads(options.config.server))),
      tenants_(Tenants::single(options.config)),
      router_(context_, zmq::socket_type::router),
      replies_(context_, zmq::socket_type::pull) {
  if (options.test_hooks) fault_ = std::make_unique<FaultInjectingDevice>(*host_, FaultPlan{});
}

Result<std::unique_ptr<SocketLoop>> SocketLoop::setup(const ServerOptions& options,
                                                      uint64_t boot_id) {
  const Config& config = options.config;
  if (Status st = config.validate(); !st) return std::unexpected(st.error());
  std::unique_ptr<SocketLoop> loop(new SocketLoop(options, boot_id));
  Device& device = loop->fault_ ? static_cast<Device&>(*loop->fault_) : *loop->host_;

  const size_t slot_bytes = config.kv_layout().max_chunk_bytes();
  const size_t num_slots = config.cache.host_bytes / slot_bytes;
  if (num_slots == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cache.host_bytes (" + std::to_string(config.cache.host_bytes) +
                          ") holds no chunk of " + std::to_string(slot_bytes) + " bytes");
  }
  auto pool = HostPool::create(device, slot_bytes, num_slots, config.cache.shm_name);
  if (!pool) return std::unexpected(pool.error());
  loop->pool_ = std::move(*pool);
  auto tiers = make_server_tiers(config);  // a bad disk_path / redis_url ends startup here
  if (!tiers) return std::unexpected(tiers.error());
  std::string warning;
  if (Status st = check_endpoint_access(config.server, warning); !st) {
    return std::unexpected(st.error());
  }
  if (!warning.empty()) log_warning(warning);
  if (!config.server.tenants_file.empty()) {
    auto tenants = Tenants::load(config.server.tenants_file, config, num_slots);
    if (!tenants) return std::unexpected(tenants.error());
    loop->tenants_ = std::move(*tenants);
    if (Status st = enable_curve_server(loop->router_, config.server); !st) {
      return std::unexpected(st.error());
    }
    loop->zap_ =
        std::make_unique<ZapHandler>(loop->context_, loop->tenants_, loop->counters_.auth_refused);
  }

  zmq::socket_t& router = loop->router_;
  // The farewell `shutdown` events must leave before the socket closes, on a loaded machine too
  // (200 ms lost them under ASan in CI); only a peer that stopped reading costs this at exit.
  router.set(zmq::sockopt::linger, 2000);
  // Frames past 16x max_frame_bytes are dropped by the transport with the connection (the
  // memory bound); frames past max_frame_bytes get a too_large error reply.
  // (Saturated, not multiplied past 64 bits: a setting of 2^60 bytes must not wrap to 0.)
  const uint64_t frame = config.server.max_frame_bytes;
  router.set(zmq::sockopt::maxmsgsize,
             static_cast<int64_t>(frame > INT32_MAX / 16 ? INT32_MAX : frame * 16));
  auto bound = bind_endpoint(router, config.server);
  if (!bound) return std::unexpected(bound.error());
  loop->socket_file_ = std::move(*bound);
  loop->replies_.bind(kReplyEndpoint);

  SocketLoop* l = loop.get();
  loop->service_ = std::make_unique<CacheService>(
      options, loop->tenants_, *loop->host_, device, loop->fault_.get(), *loop->pool_, boot_id,
      loop->counters_,
      [l](const std::string& client, const Reply& reply) {
        zmq::socket_t& s = l->push_socket();
        s.send(zmq::buffer(client), zmq::send_flags::sndmore);
        s.send(zmq::buffer(encode_reply(reply)), zmq::send_flags::none);
      },
      [l] {
        zmq::socket_t& s = l->push_socket();
        s.send(zmq::str_buffer(""), zmq::send_flags::sndmore);  // empty routing id: drained
        s.send(zmq::str_buffer(""), zmq::send_flags::none);
      },
      std::move(*tiers));
  loop->service_->start();
  return loop;
}

zmq::socket_t& SocketLoop::push_socket() {
  if (!push_) {
    push_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::push);
    push_->set(zmq::sockopt::linger, 0);
    push_->connect(kReplyEndpoint);
  }
  return *push_;
}

void SocketLoop::wait() {
  zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                             {replies_.handle(), 0, ZMQ_POLLIN, 0}};
  try {
    zmq::poll(items, 2, kPollInterval);
  } catch (const zmq::error_t& e) {
    // A stop signal interrupted the poll: Server::run() sees stop_requested_ next and drains.
    if (e.num() != EINTR) throw;
  }
  last_turn_ns_ = SteadyClock::instance().now().time_since_epoch().count();
}

void SocketLoop::pump() {
  for (size_t n = 0; n < kMaxMessagesPerWakeup; ++n) {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(router_, std::back_inserter(parts), zmq::recv_flags::dontwait)) break;
    admit(parts[0].to_string(), parts);
  }
  for (size_t n = 0; n < kMaxMessagesPerWakeup; ++n) {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(replies_, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
      break;
    }
    forward(parts);
  }
}

std::optional<TenantId> SocketLoop::tenant_of(zmq::message_t& message) const {
  if (!tenants_.curve()) return kDefaultTenant;
  const std::optional<std::string> user = message_property(message, "User-Id");
  if (!user) return std::nullopt;
  return tenants_.by_name(*user);
}

void SocketLoop::admit(const std::string& client, std::vector<zmq::message_t>& parts) {
  const std::optional<TenantId> tenant = tenant_of(parts.back());
  auto [it, fresh] = peers_.try_emplace(client);
  peer_count_ = peers_.size();
  Peer& peer = it->second;
  if (fresh && tenant) {
    peer.tenant = *tenant;
    service_->bind_tenant(client, *tenant);
  }
  if (!tenant || peer.tenant != *tenant) {
    // A routing id names one client's session, locks and in-flight count: a connection of
    // another tenant that reuses it (after the first disconnected) reaches none of them.
    ++counters_.requests;
    ++counters_.rejected_frames;
    if (fresh) {
      peers_.erase(it);
      peer_count_ = peers_.size();
    }
    answer(client, Reply::error(0, codes::kPermissionDenied,
                                "this routing id belongs to a client of another tenant"));
    return;
  }
  peer.last_seen = SteadyClock::instance().now();
  if (parts.size() != 2) {
    ++counters_.requests;
    ++counters_.rejected_frames;
    answer(client, Reply::error(0, codes::kMalformed,
                                "expected exactly one frame after the routing id, got " +
                                    std::to_string(parts.size() - 1)));
    return;
  }
  const std::span<const std::byte> frame = as_bytes(parts[1].to_string_view());
  answers_.clear();
  Answers now{*service_, client, answers_};
  if (read_lookup_frame(frame, limits_, lookups_)) {  // plain LOOKUPs, read without a Request
    if (lookups_.batch) ++counters_.batch_frames;
    for (const LookupItem& item : lookups_.items) {
      ++counters_.requests;
      const std::span<ChunkKey> keys = lookups_.keys_of(item);
      tenants_.scope(peer.tenant, keys);
      admit_lookup(client, peer, LookupQuery{.id = item.id, .keys = keys, .lock_ms = item.lock_ms},
                   now);
    }
    if (now.count > 0) {
      send_to(router_, client, now.reply_frame(lookups_.batch));
    }
    return;
  }
  if (!is_batch_frame(frame)) {
    uint64_t id = 0;
    auto request = decode_request(frame, limits_, &id);
    admit_one(client, peer, parts.back(), std::move(request), id, now);
    if (now.count > 0) send_to(router_, client, now.reply_frame(false));
    return;
  }
  ++counters_.batch_frames;
  const Status read = decode_batch(frame, limits_, [&](BatchItem item) {
    admit_one(client, peer, parts.back(), std::move(item.request), item.id, now);
  });
  if (!read) {  // nothing of it could be read as requests: one error reply, as for any frame
    ++counters_.requests;
    ++counters_.rejected_frames;
    auto [code, message] = split_decode_error(read.error());
    answer(client, Reply::error(0, code, message));
    return;
  }
  if (now.count > 0) send_to(router_, client, now.reply_frame(true));
}

void SocketLoop::admit_one(const std::string& client, Peer& peer, zmq::message_t& message,
                           Result<Request> request, uint64_t id, Answers& now) {
  ++counters_.requests;
  if (!request) {
    ++counters_.rejected_frames;
    auto [code, message] = split_decode_error(request.error());
    now.add(Reply::error(id, code, message));
    return;
  }
  // The keys as the client's tenant's namespace holds them: from here on, every part of the
  // server sees only scoped keys (tenants.h).
  tenants_.scope(peer.tenant, request->keys);
  if (request->hook != TestHook::kNone && !options_.test_hooks) {
    now.add(Reply::error(id, codes::kInvalidArgument,
                         "test hooks are disabled (start kvtierd with --test-hooks)"));
    return;
  }
  if (request->op == Op::kPing && request->hook == TestHook::kNone) {
    ++counters_.pings;
    Reply pong;
    pong.id = id;
    pong.fields = {{"boot_id", boot_id_}};
    for (const std::string& tier : service_->degraded_tiers())
      pong.fields[tier_down_field(tier)] = 1;
    now.add(pong);
    return;
  }
  if (request->op == Op::kLookup && request->hook == TestHook::kNone) {
    admit_lookup(client, peer, LookupQuery::of(*request), now, &*request);
    return;
  }
  if (over_limit(peer, id, now)) return;
  const uid_t client_uid = request->op == Op::kRegister ? client_uid_of(message) : 0;
  post(client, peer, std::move(*request), client_uid);
}

uid_t SocketLoop::client_uid_of(zmq::message_t& message) const {
  if (options_.config.server.endpoint.starts_with("ipc://")) {
    const std::string address = message_property(message, "Peer-Address").value_or("");
    const std::string_view text = address;
    // The last three ':'-separated fields are uid, gid and pid.
    const size_t pid_at = text.rfind(':');
    const size_t gid_at = pid_at == 0 || pid_at == std::string_view::npos
                              ? std::string_view::npos
                              : text.rfind(':', pid_at - 1);
    const size_t uid_at = gid_at == 0 || gid_at == std::string_view::npos
                              ? std::string_view::npos
                              : text.rfind(':', gid_at - 1);
    uid_t uid = 0;
    if (uid_at != std::string_view::npos &&
        std::from_chars(text.data() + uid_at + 1, text.data() + gid_at, uid).ec == std::errc{}) {
      return uid;
    }
  }
  return geteuid();
}

bool SocketLoop::over_limit(const Peer& peer, uint64_t id, Answers& now) {
  if (peer.in_flight < max_in_flight_) return false;
  ++counters_.limit_rejections;
  now.add(Reply::error(id, codes::kLimitExceeded,
                       "more than server.max_requests_in_flight (" +
                           std::to_string(max_in_flight_) + ") requests in flight"));
  return true;
}

void SocketLoop::post(const std::string& client, Peer& peer, Request request, uid_t client_uid) {
  ++peer.in_flight;
  peer.queued->fetch_add(1);
  service_->post(Envelope{client, peer.tenant, std::move(request), peer.queued, client_uid});
}

void SocketLoop::admit_lookup(const std::string& client, Peer& peer, const LookupQuery& query,
                              Answers& now, Request* request) {
  if (over_limit(peer, query.id, now)) return;
  // Answered here, without the hop to the service thread, unless an earlier request of this
  // client still waits there (it must take effect first) or the lower tiers must be asked
  // (lookup_now declines).
  if (peer.queued->load() == 0) {
    if (std::optional<LookupAnswer> answer = service_->lookup_now(client, peer.tenant, query)) {
      if (answer->error) {
        now.add(*answer->error);
      } else {
        append_lookup_reply(now.frame.bytes, query.id, answer->hits, answer->pending, answer->lock);
        ++now.count;
      }
      return;
    }
  }
  if (request) {
    post(client, peer, std::move(*request));
    return;
  }
  Request r{.id = query.id, .op = Op::kLookup};
  r.keys.assign(query.keys.begin(), query.keys.end());
  r.lock_ms = query.lock_ms;
  post(client, peer, std::move(r));
}

void SocketLoop::forward(std::vector<zmq::message_t>& parts) {
  const std::string client = parts.at(0).to_string();
  if (client.empty()) {
    drained_ = true;
    return;
  }
  if (auto it = peers_.find(client); it != peers_.end() && it->second.in_flight > 0) {
    --it->second.in_flight;
  }
  send_to(router_, client, parts.at(1).to_string_view());
}

void SocketLoop::reap(TimePoint now) {
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (now - it->second.last_seen > client_timeout_) {
      ++counters_.clients_reaped;
      log_info(
          "client silent past server.client_timeout_s: gone",
          {{"client", client_label(it->first)}, {"tenant", service_->tenant_of(it->first).name}});
      service_->client_gone(it->first);
      service_->unbind_tenant(it->first);
      it = peers_.erase(it);
      peer_count_ = peers_.size();
    } else {
      ++it;
    }
  }
}

ServerHealth SocketLoop::health() const {
  ServerHealth h;
  const Duration since_turn =
      SteadyClock::instance().now().time_since_epoch() - Duration(last_turn_ns_.load());
  if (service_->draining()) {
    h.status = "shutting_down";
  } else if (since_turn > Server::kStallAfter) {
    h.status = "stalled";
  } else {
    h.degraded = service_->degraded_tiers();
    h.http_status = 200;
    h.status = h.degraded.empty() ? "ok" : "degraded";
  }
  return h;
}

void SocketLoop::add_metrics(PrometheusText& out) const {
  out.family("kvtier_server_clients", "gauge", "Clients kvtierd knows (registered or not).");
  out.sample("kvtier_server_clients", uint64_t{peer_count_.load()});
  visit_counters(counters_, [&](std::string_view name, uint64_t value, CounterKind kind) {
    const std::string family = "kvtier_server_" + std::string(name) + "_total";
    out.family(family, kind, "The socket loop's " + std::string(name) + ".");
    out.sample(family, value);
  });
  service_->add_metrics(out);
}

void SocketLoop::farewell() {
  Reply event;
  event.event = "shutdown";
  for (const auto& [client, peer] : peers_) answer(client, event);
}

std::string ServerHealth::json() const {
  nlohmann::json body = {{"status", status}};
  if (!degraded.empty()) body["degraded"] = degraded;
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ServerHealth Server::health() const {
  std::lock_guard lock(live_mu_);
  if (live_) return live_->health();
  return ServerHealth{.status = stopped_ ? "stopped" : "starting"};
}

std::string Server::metrics_text() const {
  PrometheusText out;
  std::lock_guard lock(live_mu_);
  const ServerHealth h = live_ ? live_->health() : ServerHealth{};
  out.family("kvtier_server_healthy", "gauge", "1 while GET /health answers 200.");
  out.sample("kvtier_server_healthy", uint64_t{h.http_status == 200 ? 1u : 0u});
  if (live_) live_->add_metrics(out);
  return out.text();
}

Server::Server(ServerOptions options) : options_(std::move(options)), boot_id_(random_boot_id()) {}
Server::~Server() = default;

Status Server::run() {
  // SIGINT/SIGTERM reach this thread only: every thread setup() starts (ZeroMQ's I/O threads,
  // the cache service, the device's copy threads, the tiers) inherits them blocked, so a stop
  // signal never interrupts a blocking call there. Here, it interrupts wait() at most.
  sigset_t stop_signals;
  sigset_t previous;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
  auto loop = SocketLoop::setup(options_, boot_id_);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (!loop) return std::unexpected(loop.error());
  {
    std::lock_guard lock(live_mu_);
    live_ = loop->get();
  }
  // Cleared before the loop is destroyed, however run() ends.
  struct Unpublish {
    Server& server;
    ~Unpublish() {
      std::lock_guard lock(server.live_mu_);
      server.live_ = nullptr;
      server.stopped_ = true;
    }
  } unpublish{*this};
  bool shutdown_begun = false;
  while (!(*loop)->drained()) {
    (*loop)->wait();
    if (stop_requested_.load() && !shutdown_begun) {
      shutdown_begun = true;
      (*loop)->begin_shutdown();
    }
    (*loop)->pump();
    (*loop)->reap(SteadyClock::instance().now());
  }
  (*loop)->farewell();
  // A client DEALER with ZMQ_IMMEDIATE (docs/protocol.md recommends it) discards the messages
  // it has not read yet once its connection closes, so closing the ROUTER right after the last
  // replies and the farewell loses them for a client a moment slow to read. The sockets stay
  // open one heartbeat interval more, served as before (the drained service refuses new work,
  // PING is answered): a live client reads its socket at least that often.
  const TimePoint linger_until = SteadyClock::instance().now() +
                                 seconds_to_duration(options_.config.server.heartbeat_interval_s);
  while (SteadyClock::instance().now() < linger_until) {
    (*loop)->wait();
    (*loop)->pump();
  }
  return {};
}

}  // namespace kvtier::server
