// CacheClient: the public calls and the I/O thread (requests, replies, deadlines). The
// heartbeat and registration logic is in client_heartbeat.cpp.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <stdexcept>

#include "client_impl.h"
#include "lookup_frames.h"

namespace kvtier::server {
namespace {

// Makes a ZeroMQ call on the I/O thread again when a signal handled on that thread (the host
// process's, e.g. Python's) interrupted it: EINTR, which libzmq returns from a send or receive
// even with dontwait (it first checks its command mailbox) as well as from a poll. Any other
// error is the caller's.
template <class Call>
auto again_on_eintr(Call call) {
  for (;;) {
    try {
      return call();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

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
  if (code == codes::kResourceExhausted || code == codes::kLimitExceeded ||
      code == codes::kQuotaExceeded) {
    return ErrorCode::kResourceExhausted;
  }
  if (code == codes::kShuttingDown || code == codes::kNotRegistered) return ErrorCode::kUnavailable;
  if (code == codes::kInternal) return ErrorCode::kInternal;
  if (code == codes::kUnsealedMemory) return ErrorCode::kFailedPrecondition;
  if (code == codes::kPermissionDenied) return ErrorCode::kPermissionDenied;
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
  CurveKeyPair keys;
  if (!config.server.curve_server_key.empty()) {
    if (!valid_curve_key(config.server.curve_server_key)) {
      throw std::invalid_argument("server.curve_server_key: not a Z85 CURVE public key");
    }
    auto read = read_curve_key_pair(config.server.curve_key_file);
    if (!read) throw std::invalid_argument("server.curve_key_file: " + read.error().message);
    keys = std::move(*read);
  }
  return ClientOptions{
      .endpoint = config.server.endpoint,
      .heartbeat_interval = seconds_to_duration(config.server.heartbeat_interval_s),
      .request_timeout = seconds_to_duration(config.server.request_timeout_s),
      .transfer_deadline = seconds_to_duration(config.transfer.transfer_deadline_s +
                                               config.transfer.completion_margin_s),
      .connect_timeout = seconds_to_duration(config.server.connect_timeout_s),
      .curve_server_key = config.server.curve_server_key,
      .curve_keys = std::move(keys),
  };
}

// ---- Impl: API side -------------------------------------------------------------------------

ClientImpl::ClientImpl(ClientOptions options, Registration registration)
    : options_(std::move(options)),
      registration_(std::move(registration)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      routing_id_(random_routing_id()) {
  if (wake_fd_ < 0) throw std::runtime_error("CacheClient: eventfd failed");
  if (!options_.curve_server_key.empty() && !(valid_curve_key(options_.curve_server_key) &&
                                              valid_curve_key(options_.curve_keys.public_key) &&
                                              valid_curve_key(options_.curve_keys.secret_key))) {
    ::close(wake_fd_);
    throw std::invalid_argument("CacheClient: curve_server_key and curve_keys must be Z85 keys");
  }
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
  std::vector<Call> one;
  one.push_back(std::move(call));
  enqueue_all(std::move(one));
}

void ClientImpl::enqueue_all(std::vector<Call> calls) {
  const auto end_all = [](Call& call, End end, const std::string& why) {
    for (size_t i = 0; i < call.size(); ++i) call.on_end(i, end, nullptr, why);
  };
  if (std::ranges::any_of(calls, [](const Call& c) { return c.needs_ok; })) {
    const ClientHealth h = health();
    if (h.state != ClientState::kOk) {  // H7: skipped, nothing sent
      const std::string why =
          "skipped: cache server " + std::string(to_string(h.state)) + ": " + h.reason;
      for (Call& call : calls) end_all(call, End::kNotSent, why);
      return;
    }
  }
  if (fail_stopped()) {
    // F7: an Unprovable transfer's server copies may still read or write the memory a new
    // transfer would name (a RETRIEVE into blocks a lost STORE still reads): none is sent.
    std::vector<Call> kept;
    for (Call& call : calls) {
      if (call.moves_data) {
        end_all(call, End::kNotSent, "skipped: this client fail-stopped (F7)");
      } else {
        kept.push_back(std::move(call));
      }
    }
    calls = std::move(kept);
    if (calls.empty()) return;
  }
  bool was_empty = false;
  {
    std::lock_guard lock(outbox_mu_);
    if (stop_.load()) {
      for (Call& call : calls) end_all(call, End::kNotSent, "client is closing");
      return;
    }
    was_empty = outbox_.empty();
    for (Call& call : calls) outbox_.push_back(std::move(call));
  }
  // The I/O thread drains the eventfd before it takes the outbox, so one wake per batch.
  if (was_empty) wake();
}

ClientHealth ClientImpl::health() const {
  std::lock_guard lock(health_mu_);
  return health_;
}

bool ClientImpl::fail_stopped() const {
  std::lock_guard lock(health_mu_);
  return health_.fail_stopped;
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
  call.moves_data = true;
  call.requests.push_back(std::move(request));
  call.on_end = [this, p, job, direction](size_t, End end, Reply* reply, std::string why) {
    Outcome outcome = Outcome::kUnprovable;
    if (end == End::kReply) {
      if (reply->ok) {
        outcome = Outcome::kCompleted;
        why.clear();
      } else {
        outcome = reply->code == codes::kUnprovable ? Outcome::kUnprovable : Outcome::kFailed;
        why = reply->code + ": " + reply->message;
      }
    } else if (end == End::kNotSent || end == End::kNotStarted) {
      outcome = Outcome::kFailed;  // nothing reached the server, or it ran no copy
    }
    if (outcome == Outcome::kUnprovable) mark_fail_stopped();  // F7
    p->set_value(transfer_result(job, direction, outcome, std::move(why)));
  };
  return call;
}

Result<Reply> ClientImpl::result_of(End end, Reply* reply, std::string why) {
  if (end == End::kReply && reply->ok) return std::move(*reply);
  if (end == End::kReply) {
    return make_error(error_code_of(reply->code), reply->code + ": " + reply->message);
  }
  return make_error(end == End::kDeadline ? ErrorCode::kDeadlineExceeded : ErrorCode::kUnavailable,
                    std::move(why));
}

ClientImpl::Call ClientImpl::plain_call(Request request, Duration timeout, bool needs_ok,
                                        std::function<void(Result<Reply>)> done) {
  Call call;
  call.deadline = SteadyClock::instance().now() + timeout;
  call.needs_ok = needs_ok;
  call.requests.push_back(std::move(request));
  call.on_end = [done = std::move(done)](size_t, End end, Reply* reply, std::string why) {
    done(result_of(end, reply, std::move(why)));
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
  // A connected server is never refused a frame for a full queue: a send that fails means no
  // connection (each queued request has its deadline; what is queued is what callers asked).
  dealer.set(zmq::sockopt::sndhwm, 0);
  const auto reconnect = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::min<Duration>(options_.heartbeat_interval / 4, std::chrono::milliseconds(100)));
  dealer.set(zmq::sockopt::reconnect_ivl, std::max<int>(1, static_cast<int>(reconnect.count())));
  if (!options_.curve_server_key.empty()) {
    dealer.set(zmq::sockopt::curve_serverkey, options_.curve_server_key);
    dealer.set(zmq::sockopt::curve_publickey, options_.curve_keys.public_key);
    dealer.set(zmq::sockopt::curve_secretkey, options_.curve_keys.secret_key);
  }
  dealer.connect(options_.endpoint);
  dealer_ = &dealer;

  while (!stop_.load()) {
    const TimePoint now = SteadyClock::instance().now();
    TimePoint next = std::min(next_ping_, now + std::chrono::milliseconds(50));
    if (!deadlines_.empty()) next = std::min(next, deadlines_.begin()->first);
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now);
    zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
    // Anything but EINTR is a broken socket, which no retry mends.
    again_on_eintr([&] {
      return zmq::poll(items, 2,
                       std::max(std::chrono::milliseconds(0), wait + std::chrono::milliseconds(1)));
    });
    uint64_t count;
    while (read(wake_fd_, &count, sizeof count) > 0) {
    }
    std::deque<Call> batch;
    {
      std::lock_guard lock(outbox_mu_);
      batch.swap(outbox_);
    }
    send_all(batch);
    receive_all();
    expire(SteadyClock::instance().now());
    heartbeat(SteadyClock::instance().now());
  }
  std::deque<Call> unsent;
  {
    std::lock_guard lock(outbox_mu_);
    unsent.swap(outbox_);
  }
  lose_outstanding("client closed");
  for (Call& call : unsent) {
    for (size_t i = 0; i < call.size(); ++i) {
      call.on_end(i, End::kNotSent, nullptr, "client closed");
    }
  }
  dealer_ = nullptr;
}

void ClientImpl::send(Call call) {
  std::deque<Call> one;
  one.push_back(std::move(call));
  send_all(one);
}

void ClientImpl::send_all(std::deque<Call>& calls) {
  // The requests of the frame being built (in frame_): (first id of their call, index in it).
  std::vector<std::pair<uint64_t, size_t>> members;
  // Requests not sent (their frame could not be, or they were refused here), with the reason;
  // ended after the loop (an on_end may change sent_).
  struct Unsent {
    uint64_t first;
    size_t index;
    std::string why;
  };
  std::vector<Unsent> failed;
  // F7: a transfer queued before this client fail-stopped is not sent either.
  const bool stopped = fail_stopped();
  frame_.clear();
  const auto flush = [&] {
    if (members.empty()) return;
    bool sent = false;
    try {
      const std::string_view frame =
          members.size() > 1 ? frame_.batch(members.size()) : frame_.body();
      sent = again_on_eintr([&] {
               return dealer_->send(zmq::buffer(frame), zmq::send_flags::dontwait);
             }).has_value();
    } catch (const zmq::error_t&) {
      sent = false;  // a closed or broken socket: reported as not sent, below
    }
    if (!sent) {
      for (const auto& [first, index] : members) {
        failed.push_back({first, index, "not sent: no connection to " + options_.endpoint});
      }
    }
    members.clear();
    frame_.clear();
  };
  for (Call& call : calls) {
    const uint64_t first = next_id_;
    const size_t n = call.size();
    next_id_ += n;
    Sent& sent =
        sent_
            .emplace(first,
                     Sent{.call = std::move(call), .first = first, .ended = {}, .remaining = n})
            .first->second;
    sent.ended.assign(n, false);
    deadlines_.emplace(sent.call.deadline, first);
    for (size_t i = 0; i < n; ++i) {
      if (stopped && sent.call.moves_data) {
        failed.push_back({first, i, "skipped: this client fail-stopped (F7)"});
        continue;
      }
      std::string& bytes = frame_.bytes;
      const size_t before = bytes.size();
      if (sent.call.requests.empty()) {
        append_lookup_request(bytes, first + i, sent.call.lookups[i], sent.call.lock_ms);
      } else {
        Request& request = sent.call.requests[i];
        request.id = first + i;
        append_request(bytes, request);
      }
      // The server answers a frame over its limit too_large without reading the id: refused
      // here, the request ends now instead of at its deadline (a transfer Unprovable then).
      if (const size_t size = bytes.size() - before;
          max_frame_bytes_ > 0 && size > max_frame_bytes_) {
        bytes.resize(before);
        failed.push_back({first, i,
                          "not sent: the request's " + std::to_string(size) +
                              " bytes exceed the server's max_frame_bytes (" +
                              std::to_string(max_frame_bytes_) + "): split it"});
        continue;
      }
      if (!members.empty() && (members.size() >= max_batch_ ||
                               frame_.body_size() + BatchFrame::kHeaderRoom > max_frame_bytes_)) {
        std::string mine = bytes.substr(before);
        bytes.resize(before);
        flush();
        bytes += mine;
      }
      members.emplace_back(first, i);
    }
  }
  flush();
  for (Unsent& unsent : failed) {
    auto it = sent_.find(unsent.first);
    if (it == sent_.end()) continue;  // lost meanwhile (ended as such)
    end_request(it->second, unsent.index, End::kNotSent, nullptr, std::move(unsent.why));
  }
}

// The on_end of a call with several requests (lookup_many's) must not send or lose requests:
// it runs while its call stays in sent_.
ClientImpl::Call* ClientImpl::settle(Sent& sent, size_t index, std::optional<Sent>& done) {
  if (sent.ended[index]) return nullptr;
  sent.ended[index] = true;
  if (--sent.remaining > 0) return &sent.call;
  auto it = sent_.find(sent.first);
  deadlines_.erase({it->second.call.deadline, it->first});
  done.emplace(std::move(it->second));
  sent_.erase(it);
  return &done->call;
}

void ClientImpl::end_request(Sent& sent, size_t index, End end, Reply* reply, std::string why) {
  std::optional<Sent> done;
  if (Call* call = settle(sent, index, done)) call->on_end(index, end, reply, std::move(why));
}

std::pair<ClientImpl::Sent*, size_t> ClientImpl::find_sent(uint64_t id) {
  auto it = sent_.upper_bound(id);
  if (it == sent_.begin()) return {nullptr, 0};
  --it;
  const uint64_t index = id - it->first;
  if (index >= it->second.call.size()) return {nullptr, 0};
  return {&it->second, index};
}

void ClientImpl::end_lookup(const LookupReplyItem& reply) {
  auto [sent, index] = find_sent(reply.id);
  if (!sent) return;
  if (!sent->call.on_lookup) {  // a LOOKUP sent as a Request (CacheClient::call)
    Reply r = reply.to_reply();
    end_request(*sent, index, End::kReply, &r, {});
    return;
  }
  std::optional<Sent> done;
  if (Call* call = settle(*sent, index, done)) {
    call->on_lookup(
        index, LookupReply{.hits = reply.hits, .pending = reply.pending != 0, .lock = reply.lock});
  }
}

void ClientImpl::receive_all() {
  for (;;) {
    zmq::message_t msg;
    if (!again_on_eintr([&] { return dealer_->recv(msg, zmq::recv_flags::dontwait); })) return;
    const std::span<const std::byte> frame = as_bytes(msg.to_string_view());
    if (read_lookup_replies(frame, lookup_replies_)) {
      for (const LookupReplyItem& reply : lookup_replies_) end_lookup(reply);
      continue;
    }
    auto replies = decode_replies(frame);
    if (!replies) continue;  // not a reply we can read: the requests' deadlines end them
    for (Reply& reply : *replies) {
      if (!reply.event.empty()) {
        if (reply.event == "shutdown") on_shutdown_event();
        continue;
      }
      auto [sent, index] = find_sent(reply.id);
      if (!sent) continue;  // late reply after its deadline
      if (!reply.ok && reply.code == codes::kNotRegistered) on_registration_lost();
      end_request(*sent, index, End::kReply, &reply, {});
    }
  }
}

void ClientImpl::expire(TimePoint now) {
  // Collected first: an on_end may lose every outstanding request (heartbeat).
  std::vector<Sent> expired;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto it = sent_.find(deadlines_.begin()->second);
    deadlines_.erase(deadlines_.begin());
    expired.push_back(std::move(it->second));
    sent_.erase(it);
  }
  end_every(expired, End::kDeadline, "no reply by the deadline (F8)");
}

void ClientImpl::lose_outstanding(const std::string& why, End end) {
  std::vector<Sent> lost;  // in the order they were sent
  lost.reserve(sent_.size());
  for (auto& [first, sent] : sent_) lost.push_back(std::move(sent));
  sent_.clear();
  deadlines_.clear();
  end_every(lost, end, why);
}

void ClientImpl::end_every(std::vector<Sent>& calls, End end, const std::string& why) {
  for (Sent& sent : calls) {
    for (size_t i = 0; i < sent.ended.size(); ++i) {
      if (!sent.ended[i]) sent.call.on_end(i, end, nullptr, why);
    }
  }
}

// ---- CacheClient ----------------------------------------------------------------------------

CacheClient::CacheClient(ClientOptions options, Registration registration)
    : impl_(std::make_unique<ClientImpl>(std::move(options), std::move(registration))) {}
CacheClient::~CacheClient() = default;

ClientHealth CacheClient::health() const {
  return impl_->health();
}
bool CacheClient::fail_stopped() const {
  return impl_->fail_stopped();
}
bool CacheClient::wait_until_ok(Duration timeout) const {
  return impl_->wait_until_ok(timeout);
}

namespace {

uint64_t lock_ms_of(Duration lock_for) {
  return static_cast<uint64_t>(std::chrono::ceil<std::chrono::milliseconds>(lock_for).count());
}

Result<LookupReply> lookup_result(ClientImpl::End end, Reply* reply, std::string why) {
  Result<Reply> got = ClientImpl::result_of(end, reply, std::move(why));
  if (!got) return std::unexpected(std::move(got.error()));
  return LookupReply{.hits = got->field("hits"),
                     .pending = got->field("pending") != 0,
                     .lock = got->field("lock")};
}

// A call of `lookups`: done(i, result) once for each, on the I/O thread (or on the caller's
// when skipped).
template <class Done>
ClientImpl::Call lookup_call(const ClientOptions& options, LookupBatch lookups, Duration lock_for,
                             const Done& done) {
  ClientImpl::Call call;
  call.deadline = SteadyClock::instance().now() + options.request_timeout;
  call.needs_ok = true;
  call.lookups = std::move(lookups);
  call.lock_ms = lock_ms_of(lock_for);
  call.on_lookup = [done](size_t i, const LookupReply& reply) { done(i, reply); };
  call.on_end = [done](size_t i, ClientImpl::End end, Reply* reply, std::string why) {
    done(i, lookup_result(end, reply, std::move(why)));
  };
  return call;
}

}  // namespace

std::future<Result<LookupReply>> CacheClient::lookup(std::vector<ChunkKey> keys,
                                                     Duration lock_for) {
  auto p = std::make_shared<std::promise<Result<LookupReply>>>();
  auto future = p->get_future();
  LookupBatch one;
  one.keys = std::move(keys);
  one.ends = {one.keys.size()};
  impl_->enqueue(lookup_call(impl_->options(), std::move(one), lock_for,
                             [p](size_t, Result<LookupReply> r) { p->set_value(std::move(r)); }));
  return future;
}

std::future<std::vector<Result<LookupReply>>> CacheClient::lookup_many(LookupBatch lookups,
                                                                       Duration lock_for) {
  // One call of several requests: each ends exactly once (on the I/O thread, or on this one
  // when skipped); the last one resolves the future.
  struct Group {
    std::vector<Result<LookupReply>> results;
    size_t remaining = 0;
    std::promise<std::vector<Result<LookupReply>>> done;
  };
  auto group = std::make_shared<Group>();
  auto future = group->done.get_future();
  if (lookups.size() == 0) {
    group->done.set_value({});
    return future;
  }
  group->results.resize(lookups.size());  // each set by its request's end
  group->remaining = lookups.size();
  impl_->enqueue(lookup_call(impl_->options(), std::move(lookups), lock_for,
                             [group](size_t i, Result<LookupReply> r) {
                               group->results[i] = std::move(r);
                               if (--group->remaining == 0)
                                 group->done.set_value(std::move(group->results));
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

std::future<Result<Reply>> CacheClient::pin(std::vector<ChunkKey> keys, Duration ttl) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count();
  return call(Request{.op = Op::kPin,
                      .keys = std::move(keys),
                      .ttl_ms = ms > 0 ? static_cast<uint64_t>(ms) : 0},
              impl_->options().request_timeout);
}

std::future<Result<Reply>> CacheClient::unpin(std::vector<ChunkKey> keys) {
  return call(Request{.op = Op::kUnpin, .keys = std::move(keys)}, impl_->options().request_timeout);
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
