// CacheClient: the public calls and the I/O thread (requests, replies, deadlines). The
// heartbeat and registration logic is in client_heartbeat.cpp.
#include <sys/eventfd.h>
#include <unistd.h>

#include <random>

#include "client_impl.h"

namespace kvtier::server {
namespace {

std::string random_routing_id() {
  std::random_device rd;
  std::string id = "kvc-";
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", rd());
    id += buf;
  }
  return id;
}

TransferResult transfer_result(JobId job, Direction direction, Outcome outcome, std::string error) {
  return TransferResult{
      .job = job, .direction = direction, .outcome = outcome, .error = std::move(error)};
}

ErrorCode error_code_of(std::string_view code) {
  if (code == codes::kNotFound) return ErrorCode::kNotFound;
  if (code == codes::kResourceExhausted || code == codes::kLimitExceeded) {
    return ErrorCode::kResourceExhausted;
  }
  if (code == codes::kShuttingDown || code == codes::kNotRegistered) return ErrorCode::kUnavailable;
  if (code == codes::kInternal) return ErrorCode::kInternal;
  if (code == codes::kUnsealedMemory) return ErrorCode::kFailedPrecondition;
  return ErrorCode::kInvalidArgument;
}

}  // namespace

std::string_view to_string(ClientState state) {
  switch (state) {
    case ClientState::kOk:
      return "ok";
    case ClientState::kDegraded:
      return "degraded";
    case ClientState::kShutdown:
      return "shutdown";
  }
  return "?";
}

ClientOptions ClientOptions::from_config(const Config& config) {
  return ClientOptions{
      .endpoint = config.server.endpoint,
      .heartbeat_interval = seconds_to_duration(config.server.heartbeat_interval_s),
      .request_timeout = seconds_to_duration(config.server.request_timeout_s),
      .transfer_deadline = seconds_to_duration(config.transfer.transfer_deadline_s +
                                               config.transfer.completion_margin_s),
      .connect_timeout = seconds_to_duration(config.server.connect_timeout_s),
  };
}

// ---- Impl: API side -------------------------------------------------------------------------

ClientImpl::ClientImpl(ClientOptions options, Registration registration)
    : options_(std::move(options)),
      registration_(std::move(registration)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      routing_id_(random_routing_id()) {
  if (wake_fd_ < 0) throw std::runtime_error("CacheClient: eventfd failed");
  health_.reason = "connecting to " + options_.endpoint;
  thread_ = std::thread([this] { run(); });
}

ClientImpl::~ClientImpl() {
  stop_.store(true);
  wake();
  thread_.join();
  close(wake_fd_);
}

void ClientImpl::wake() {
  const uint64_t one = 1;
  static_cast<void>(write(wake_fd_, &one, sizeof one));
}

void ClientImpl::enqueue(Call call) {
  if (call.needs_ok) {
    const ClientHealth h = health();
    if (h.state != ClientState::kOk) {  // H7: skipped, nothing sent
      call.on_end(End::kNotSent, nullptr,
                  "skipped: cache server " + std::string(to_string(h.state)) + ": " + h.reason);
      return;
    }
  }
  bool was_empty = false;
  {
    std::lock_guard lock(outbox_mu_);
    if (stop_.load()) {
      call.on_end(End::kLost, nullptr, "client is closing");
      return;
    }
    was_empty = outbox_.empty();
    outbox_.push_back(std::move(call));
  }
  // The I/O thread drains the eventfd before it takes the outbox, so one wake per batch.
  if (was_empty) wake();
}

ClientHealth ClientImpl::health() const {
  std::lock_guard lock(health_mu_);
  return health_;
}

bool ClientImpl::wait_until_ok(Duration timeout) const {
  std::unique_lock lock(health_mu_);
  return health_cv_.wait_for(lock, timeout, [&] { return health_.state == ClientState::kOk; });
}

ClientImpl::Call ClientImpl::transfer_call(Request request, JobId job, Direction direction,
                                           const std::shared_ptr<std::promise<TransferResult>>& p) {
  Call call;
  call.deadline = SteadyClock::instance().now() + options_.transfer_deadline;  // F8: from here
  call.needs_ok = true;
  call.transfer = true;
  call.request = std::move(request);
  call.on_end = [this, p, job, direction](End end, const Reply* reply, std::string why) {
    Outcome outcome = Outcome::kUnprovable;
    if (end == End::kReply) {
      if (reply->ok) {
        outcome = Outcome::kCompleted;
        why.clear();
      } else {
        outcome = reply->code == codes::kUnprovable ? Outcome::kUnprovable : Outcome::kFailed;
        why = reply->code + ": " + reply->message;
      }
    } else if (end == End::kNotSent) {
      outcome = Outcome::kFailed;  // nothing reached the server: no copy can run
    }
    if (outcome == Outcome::kUnprovable) mark_fail_stopped();  // F7
    p->set_value(transfer_result(job, direction, outcome, std::move(why)));
  };
  return call;
}

ClientImpl::Call ClientImpl::plain_call(Request request, Duration timeout, bool needs_ok,
                                        std::function<void(Result<Reply>)> done) {
  Call call;
  call.deadline = SteadyClock::instance().now() + timeout;
  call.needs_ok = needs_ok;
  call.request = std::move(request);
  call.on_end = [done = std::move(done)](End end, const Reply* reply, std::string why) {
    if (end == End::kReply && reply->ok) {
      done(*reply);
    } else if (end == End::kReply) {
      done(make_error(error_code_of(reply->code), reply->code + ": " + reply->message));
    } else {
      done(
          make_error(end == End::kDeadline ? ErrorCode::kDeadlineExceeded : ErrorCode::kUnavailable,
                     std::move(why)));
    }
  };
  return call;
}

void ClientImpl::mark_fail_stopped() {
  std::lock_guard lock(health_mu_);
  health_.fail_stopped = true;
}

// ---- Impl: I/O thread -----------------------------------------------------------------------

void ClientImpl::run() {
  zmq::socket_t dealer(context_, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::routing_id, routing_id_);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::immediate, 1);  // never queue for a server that is not connected
  const auto reconnect = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::min<Duration>(options_.heartbeat_interval / 4, std::chrono::milliseconds(100)));
  dealer.set(zmq::sockopt::reconnect_ivl, std::max<int>(1, static_cast<int>(reconnect.count())));
  dealer.connect(options_.endpoint);
  dealer_ = &dealer;

  while (!stop_.load()) {
    const TimePoint now = SteadyClock::instance().now();
    TimePoint next = std::min(next_ping_, now + std::chrono::milliseconds(50));
    for (const auto& [id, call] : outstanding_) next = std::min(next, call.deadline);
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now);
    zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
    zmq::poll(items, 2,
              std::max(std::chrono::milliseconds(0), wait + std::chrono::milliseconds(1)));
    uint64_t count;
    while (read(wake_fd_, &count, sizeof count) > 0) {
    }
    std::deque<Call> batch;
    {
      std::lock_guard lock(outbox_mu_);
      batch.swap(outbox_);
    }
    for (Call& call : batch) send(std::move(call));
    receive_all();
    expire(SteadyClock::instance().now());
    heartbeat(SteadyClock::instance().now());
  }
  {
    std::lock_guard lock(outbox_mu_);
    for (Call& call : outbox_) outstanding_.emplace(next_id_++, std::move(call));
    outbox_.clear();
  }
  lose_outstanding("client closed");
  dealer_ = nullptr;
}

void ClientImpl::send(Call call) {
  call.request.id = next_id_++;
  const std::string body = encode_request(call.request);
  bool sent = false;
  try {
    sent = dealer_->send(zmq::buffer(body), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    sent = false;  // a closed or broken socket: reported as not sent, below
  }
  if (!sent) {
    call.on_end(End::kNotSent, nullptr, "not sent: no connection to " + options_.endpoint);
    return;
  }
  outstanding_.emplace(call.request.id, std::move(call));
}

void ClientImpl::receive_all() {
  for (;;) {
    zmq::message_t msg;
    if (!dealer_->recv(msg, zmq::recv_flags::dontwait)) return;
    auto reply = decode_reply(as_bytes(msg.to_string_view()));
    if (!reply) continue;  // not a reply we can read: the request's deadline ends it
    if (!reply->event.empty()) {
      if (reply->event == "shutdown") on_shutdown_event();
      continue;
    }
    auto it = outstanding_.find(reply->id);
    if (it == outstanding_.end()) continue;  // late reply after its deadline
    Call call = std::move(it->second);
    outstanding_.erase(it);
    if (!reply->ok && reply->code == codes::kNotRegistered) on_registration_lost();
    call.on_end(End::kReply, &*reply, {});
  }
}

void ClientImpl::expire(TimePoint now) {
  // Collected first: an on_end may lose every outstanding request (heartbeat).
  std::vector<Call> expired;
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    if (it->second.deadline <= now) {
      expired.push_back(std::move(it->second));
      it = outstanding_.erase(it);
    } else {
      ++it;
    }
  }
  for (Call& call : expired) call.on_end(End::kDeadline, nullptr, "no reply by the deadline (F8)");
}

void ClientImpl::lose_outstanding(const std::string& why) {
  auto lost = std::move(outstanding_);
  outstanding_.clear();
  for (auto& [id, call] : lost) call.on_end(End::kLost, nullptr, why);
}

// ---- CacheClient ----------------------------------------------------------------------------

CacheClient::CacheClient(ClientOptions options, Registration registration)
    : impl_(std::make_unique<ClientImpl>(std::move(options), std::move(registration))) {}
CacheClient::~CacheClient() = default;

ClientHealth CacheClient::health() const {
  return impl_->health();
}
bool CacheClient::fail_stopped() const {
  return impl_->health().fail_stopped;
}
bool CacheClient::wait_until_ok(Duration timeout) const {
  return impl_->wait_until_ok(timeout);
}

std::future<Result<LookupReply>> CacheClient::lookup(std::vector<ChunkKey> keys,
                                                     Duration lock_for) {
  Request r{.op = Op::kLookup};
  r.keys = std::move(keys);
  r.lock_ms = static_cast<uint64_t>(std::chrono::ceil<std::chrono::milliseconds>(lock_for).count());
  auto p = std::make_shared<std::promise<Result<LookupReply>>>();
  auto future = p->get_future();
  impl_->enqueue(impl_->plain_call(std::move(r), impl_->options().request_timeout, true,
                                   [p](Result<Reply> got) {
                                     if (!got) {
                                       p->set_value(std::unexpected(got.error()));
                                       return;
                                     }
                                     p->set_value(LookupReply{.hits = got->field("hits"),
                                                              .pending = got->field("pending") != 0,
                                                              .lock = got->field("lock")});
                                   }));
  return future;
}

std::future<TransferResult> CacheClient::store(JobId job, uint32_t group,
                                               std::vector<ChunkKey> keys,
                                               std::vector<std::vector<uint32_t>> blocks,
                                               TestHook hook) {
  Request r{.op = Op::kStore, .hook = hook};
  r.group = group;
  r.keys = std::move(keys);
  r.blocks = std::move(blocks);
  auto p = std::make_shared<std::promise<TransferResult>>();
  auto future = p->get_future();
  impl_->enqueue(impl_->transfer_call(std::move(r), job, Direction::kStore, p));
  return future;
}

std::future<TransferResult> CacheClient::retrieve(JobId job, uint32_t group,
                                                  std::vector<ChunkKey> keys,
                                                  std::vector<std::vector<uint32_t>> blocks,
                                                  uint64_t lock, TestHook hook) {
  Request r{.op = Op::kRetrieve, .hook = hook};
  r.group = group;
  r.keys = std::move(keys);
  r.blocks = std::move(blocks);
  r.lock = lock;
  auto p = std::make_shared<std::promise<TransferResult>>();
  auto future = p->get_future();
  impl_->enqueue(impl_->transfer_call(std::move(r), job, Direction::kLoad, p));
  return future;
}

std::future<Result<Reply>> CacheClient::call(Request request, Duration timeout) {
  auto p = std::make_shared<std::promise<Result<Reply>>>();
  auto future = p->get_future();
  impl_->enqueue(impl_->plain_call(std::move(request), timeout, false,
                                   [p](Result<Reply> r) { p->set_value(std::move(r)); }));
  return future;
}

std::future<Status> CacheClient::status_call(Request request) {
  auto p = std::make_shared<std::promise<Status>>();
  auto future = p->get_future();
  impl_->enqueue(impl_->plain_call(std::move(request), impl_->options().request_timeout, false,
                                   [p](Result<Reply> r) {
                                     if (r) {
                                       p->set_value({});
                                     } else {
                                       p->set_value(std::unexpected(r.error()));
                                     }
                                   }));
  return future;
}

std::future<Status> CacheClient::release(uint64_t lock, TestHook hook) {
  Request r{.op = Op::kRelease, .hook = hook};
  r.lock = lock;
  return status_call(std::move(r));
}

std::future<Status> CacheClient::unregister() {
  auto p = std::make_shared<std::promise<Status>>();
  auto future = p->get_future();
  impl_->enqueue(impl_->unregister_call([p](Result<Reply> r) {
    if (r) {
      p->set_value({});
    } else {
      p->set_value(std::unexpected(r.error()));
    }
  }));
  return future;
}

std::future<Result<Reply>> CacheClient::stats() {
  return call(Request{.op = Op::kStats}, impl_->options().request_timeout);
}

std::future<Result<Reply>> CacheClient::ping() {
  return call(Request{.op = Op::kPing}, impl_->options().request_timeout);
}

std::future<Status> CacheClient::shutdown_server() {
  return status_call(Request{.op = Op::kShutdown});
}

}  // namespace kvtier::server
