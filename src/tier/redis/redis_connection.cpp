#include "redis_connection.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>

namespace kvtier::tier_internal {
namespace {

constexpr size_t kInputBytes = size_t{64} << 10;     // the input buffer, to begin with
constexpr size_t kMaxInputBytes = size_t{64} << 20;  // a reply parsed from it, at most
constexpr size_t kDiscardBytes = size_t{64} << 10;   // a value read aside, per piece

bool late(TimePoint deadline) {
  return SteadyClock::instance().now() >= deadline;
}

std::unexpected<Error> io_error(const RedisEndpoint& endpoint, std::string_view what,
                                TimePoint deadline) {
  return make_error(late(deadline) ? ErrorCode::kDeadlineExceeded : ErrorCode::kUnavailable,
                    "redis " + endpoint.to_string() + ": " + std::string(what));
}

std::string errno_text(std::string_view call, int error) {
  return std::string(call) + ": " + std::strerror(error);
}

// Milliseconds poll() should wait for `deadline`: at least 1 while it has not passed.
int poll_ms(TimePoint deadline) {
  const Duration left = deadline - SteadyClock::instance().now();
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::clamp<long long>(ms, 0, INT_MAX));
}

// Waits for a non-blocking connect() to finish; 0 or the errno it failed with.
int finish_connect(int fd, TimePoint deadline) {
  pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
  for (;;) {
    const int rc = ::poll(&p, 1, poll_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return errno;
    if (rc == 0) return ETIMEDOUT;
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return errno;
    return error;
  }
}

void advance(iovec& v, size_t n) {
  v.iov_base = static_cast<char*>(v.iov_base) + n;
  v.iov_len -= n;
}

}  // namespace

Result<RedisEndpoint> parse_host_port(std::string_view text) {
  const size_t colon = text.rfind(':');
  RedisEndpoint endpoint{.host = std::string(text.substr(0, colon))};
  if (colon != std::string_view::npos) {
    const std::string_view port = text.substr(colon + 1);
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), endpoint.port);
    if (ec != std::errc() || end != port.data() + port.size() || endpoint.port <= 0 ||
        endpoint.port > 65535) {
      return make_error(ErrorCode::kInvalidArgument,
                        "redis address '" + std::string(text) + "': bad port");
    }
  }
  if (endpoint.host.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "redis address '" + std::string(text) + "': no host");
  }
  return endpoint;
}

Result<RedisEndpoint> parse_redis_url(std::string_view url) {
  std::string_view rest = url;
  if (rest.starts_with("redis://")) rest.remove_prefix(8);
  if (rest.find('/') != std::string_view::npos || rest.find('@') != std::string_view::npos) {
    return make_error(ErrorCode::kInvalidArgument,
                      "redis url '" + std::string(url) +
                          "': expected redis://host[:port] (no database, no credentials)");
  }
  return parse_host_port(rest);
}

// ---- connecting ----

Result<std::unique_ptr<RedisConnection>> RedisConnection::open(const RedisEndpoint& endpoint,
                                                               TimePoint deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const std::string port = std::to_string(endpoint.port);
  if (const int rc = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &addresses);
      rc != 0) {
    return io_error(endpoint, std::string("resolve: ") + ::gai_strerror(rc), deadline);
  }
  std::string failure = "connect: no address";
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      failure = errno_text("socket", errno);
      continue;
    }
    int error = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) error = finish_connect(fd, deadline);
    if (error == 0) {
      const int one = 1;  // a pipeline's last command must not wait for an ACK
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::freeaddrinfo(addresses);
      return std::unique_ptr<RedisConnection>(new RedisConnection(fd, endpoint));
    }
    ::close(fd);
    failure = errno_text("connect", error);
    if (late(deadline)) break;
  }
  ::freeaddrinfo(addresses);
  return io_error(endpoint, failure, deadline);
}

RedisConnection::~RedisConnection() {
  ::close(fd_);
}

// ---- queueing ----

void RedisConnection::queue(std::span<const Queued> commands, size_t window_bytes) {
  window_limit_ = window_bytes;
  static const RedisCommand kAsking{.args = {"ASKING"}};
  // Every reply of the last run was read (or the connection broke and is not reused).
  in_begin_ = in_end_ = 0;
  replies_.clear();
  replies_.reserve(commands.size());
  expected_.clear();
  next_expected_ = 0;
  size_t owned = 0;
  for (const Queued& q : commands) {
    owned += resp_owned_bytes(*q.command) + 2 + (q.asking ? resp_owned_bytes(kAsking) : 0);
  }
  out_bytes_.clear();
  out_bytes_.reserve(owned);  // so that nothing below moves it
  // Pieces: runs of owned bytes, and tails between them.
  struct Piece {
    size_t offset = 0, size = 0;  // owned
    std::string_view tail;        // the caller's
  };
  std::vector<Piece> pieces;
  size_t run = 0;
  size_t tails = 0;  // bytes of the tails so far: out_bytes_.size() + tails is the stream's
  for (const Queued& q : commands) {
    const RedisCommand& c = *q.command;
    if (q.asking) {
      append_resp_command(kAsking, out_bytes_);
      expected_.push_back({.ends_at = out_bytes_.size() + tails});
    }
    append_resp_command(c, out_bytes_);
    if (tail_bytes(c) > 0) {
      pieces.push_back({.offset = run, .size = out_bytes_.size() - run});
      for (std::string_view piece : c.tail) {
        if (!piece.empty()) pieces.push_back({.tail = piece});
      }
      tails += tail_bytes(c);
      run = out_bytes_.size();
      out_bytes_ += "\r\n";
    }
    expected_.push_back({.command = &c,
                         .value_bytes = tail_bytes(c) + c.head.size() + c.body.size(),
                         .ends_at = out_bytes_.size() + tails});
  }
  pieces.push_back({.offset = run, .size = out_bytes_.size() - run});
  out_.clear();
  out_next_ = 0;
  sent_ = 0;
  released_ = 0;
  window_bytes_ = 0;
  for (const Piece& p : pieces) {
    if (!p.tail.empty()) {
      out_.push_back({const_cast<char*>(p.tail.data()), p.tail.size()});
    } else if (p.size > 0) {
      out_.push_back({out_bytes_.data() + p.offset, p.size});
    }
  }
  replies_pending_ = expected_.size();
  release();
}

void RedisConnection::release() {
  // At least one command is always out; more while their values fit the window.
  while (released_ < expected_.size() &&
         (released_ == next_expected_ || window_bytes_ < window_limit_)) {
    const Expected& e = expected_[released_++];
    window_bytes_ += e.value_bytes;
    if (e.command != nullptr && e.command->on_release) e.command->on_release();
  }
}

// ---- sending and reading ----

bool RedisConnection::fail(ErrorCode code, std::string what) {
  if (!broken_) {
    broken_ = true;
    error_ = Error{code, "redis " + endpoint_.to_string() + ": " + std::move(what)};
  }
  return false;
}

bool RedisConnection::wants_write() const {
  return released_ > 0 && sent_ < expected_[released_ - 1].ends_at;
}

bool RedisConnection::progress() {
  for (;;) {
    if (broken_) return false;
    if (wants_write() && !send_some()) return false;
    const size_t answered = next_expected_;
    if (!read_some()) return false;
    // Replies that arrived may have released more commands: send them now.
    if (next_expected_ == answered || !wants_write()) return true;
  }
}

bool RedisConnection::send_some() {
  while (wants_write()) {
    // The iovecs up to the end of the last released command; the last one cut there.
    size_t limit = expected_[released_ - 1].ends_at - sent_;
    size_t count = 0;
    size_t cut = 0;  // what the last iovec loses to the limit
    for (size_t k = out_next_; k < out_.size() && limit > 0 && count < IOV_MAX; ++k, ++count) {
      if (out_[k].iov_len >= limit) {
        cut = out_[k].iov_len - limit;
        ++count;
        break;
      }
      limit -= out_[k].iov_len;
    }
    msghdr message{};
    message.msg_iov = &out_[out_next_];
    message.msg_iovlen = count;
    iovec& last = out_[out_next_ + count - 1];
    last.iov_len -= cut;
    const ssize_t sent = ::sendmsg(fd_, &message, MSG_NOSIGNAL);
    last.iov_len += cut;
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      return fail(ErrorCode::kUnavailable, errno_text("send", errno));
    }
    sent_ += static_cast<size_t>(sent);
    auto left = static_cast<size_t>(sent);
    while (left > 0) {
      iovec& v = out_[out_next_];
      const size_t n = std::min(left, v.iov_len);
      advance(v, n);
      left -= n;
      if (v.iov_len == 0) ++out_next_;
    }
  }
  return true;
}

void RedisConnection::deliver(RedisReply reply) {
  const Expected& e = expected_[next_expected_++];
  --replies_pending_;
  window_bytes_ -= e.value_bytes;
  release();
  if (e.command == nullptr) return;  // ASKING's "+OK"
  if (e.command->on_reply) e.command->on_reply(reply);
  replies_.push_back(std::move(reply));
}

void RedisConnection::next_stream_place() {
  if (discard_left_ > 0) {  // the next piece of a value read aside, into the same scratch
    const size_t piece = std::min(discard_left_, kDiscardBytes);
    stream_[stream_next_] = {discard_.get(), piece};
    discard_left_ -= piece;
    return;
  }
  ++stream_next_;
}

bool RedisConnection::parse_buffered() {
  while (replies_pending_ > 0) {
    if (streaming_) {
      while (stream_next_ < stream_count_ && in_begin_ < in_end_) {
        iovec& v = stream_[stream_next_];
        const size_t n = std::min(v.iov_len, in_end_ - in_begin_);
        std::memcpy(v.iov_base, in_.data() + in_begin_, n);
        advance(v, n);
        in_begin_ += n;
        if (v.iov_len == 0) next_stream_place();
      }
      if (stream_next_ < stream_count_) return true;  // the rest comes from the socket
      streaming_ = false;
      if (std::memcmp(stream_crlf_, "\r\n", 2) != 0) {
        return fail(ErrorCode::kUnavailable, "protocol error: a bulk string not ended by CRLF");
      }
      deliver(std::move(streamed_));
      continue;
    }
    if (in_begin_ == in_end_) return true;
    const std::string_view in(in_.data() + in_begin_, in_end_ - in_begin_);
    size_t used = 0;
    if (in.front() == '$') {
      // A top-level bulk string: streamed, never held whole in the input buffer.
      long long length = 0;
      const ParseStatus status = parse_bulk_header(in, length, used);
      if (status == ParseStatus::kNeedMore) return true;
      if (status == ParseStatus::kBad) {
        return fail(ErrorCode::kUnavailable, "protocol error: a bad bulk string header");
      }
      in_begin_ += used;
      if (length < 0) {
        deliver(RedisReply{.type = RedisReply::Type::kNil});
        continue;
      }
      const auto n = static_cast<size_t>(length);
      const RedisCommand* c = expected_[next_expected_].command;
      const std::span<std::byte> head = c ? c->head : std::span<std::byte>();
      const std::span<std::byte> body = c ? c->body : std::span<std::byte>();
      streamed_ = RedisReply{.type = RedisReply::Type::kString};
      stream_next_ = stream_count_ = 0;
      const bool into_buffers = !head.empty() || !body.empty();
      if (into_buffers && n == head.size() + body.size()) {
        streamed_.in_buffers = true;
        if (!head.empty()) stream_[stream_count_++] = {head.data(), head.size()};
        if (!body.empty()) stream_[stream_count_++] = {body.data(), body.size()};
      } else if (into_buffers && n > 0) {
        // Not the record the command reads (kCorrupt to its caller): read aside piece by piece,
        // never held whole, whatever size the server names.
        if (!discard_) discard_ = std::make_unique<std::byte[]>(kDiscardBytes);
        const size_t piece = std::min(n, kDiscardBytes);
        stream_[stream_count_++] = {discard_.get(), piece};
        discard_left_ = n - piece;
      } else if (n > kMaxInputBytes) {
        return fail(ErrorCode::kUnavailable, "protocol error: a reply over 64 MiB");
      } else if (n > 0) {
        streamed_.text.resize(n);
        stream_[stream_count_++] = {streamed_.text.data(), n};
      }
      stream_[stream_count_++] = {stream_crlf_, 2};
      streaming_ = true;
      continue;
    }
    RedisReply reply;
    const ParseStatus status = parse_reply(in, reply, used);
    if (status == ParseStatus::kNeedMore) return true;
    if (status == ParseStatus::kBad) {
      return fail(ErrorCode::kUnavailable, "protocol error: " + reply.text);
    }
    in_begin_ += used;
    deliver(std::move(reply));
  }
  return true;
}

bool RedisConnection::read_some() {
  for (;;) {
    if (!parse_buffered()) return false;
    if (replies_pending_ == 0) return true;
    // Room at the end of the input buffer.
    if (in_begin_ == in_end_) in_begin_ = in_end_ = 0;
    if (in_.size() - in_end_ < kInputBytes / 4) {
      if (in_begin_ > 0) {
        std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
        in_end_ -= in_begin_;
        in_begin_ = 0;
      }
      if (in_.size() - in_end_ < kInputBytes / 4) {
        if (in_.size() >= kMaxInputBytes) {
          return fail(ErrorCode::kUnavailable, "protocol error: a reply over 64 MiB");
        }
        in_.resize(std::max(kInputBytes, in_.size() * 2));
      }
    }
    // A streamed bulk string's places first, then the input buffer: one readv() takes the
    // rest of a chunk and the start of the next reply.
    iovec places[5];
    int count = 0;
    if (streaming_ && discard_left_ > 0) {
      places[count++] = stream_[stream_next_];  // what follows is more of the discarded value
    } else {
      if (streaming_) {
        for (size_t k = stream_next_; k < stream_count_; ++k) places[count++] = stream_[k];
      }
      places[count++] = {in_.data() + in_end_, in_.size() - in_end_};
    }
    const ssize_t got = ::readv(fd_, places, count);
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      return fail(ErrorCode::kUnavailable, errno_text("read", errno));
    }
    if (got == 0) return fail(ErrorCode::kUnavailable, "connection closed by the server");
    auto left = static_cast<size_t>(got);
    while (streaming_ && left > 0 && stream_next_ < stream_count_) {
      iovec& v = stream_[stream_next_];
      const size_t n = std::min(left, v.iov_len);
      advance(v, n);
      left -= n;
      if (v.iov_len == 0) next_stream_place();
    }
    in_end_ += left;
  }
}

void run_pipelines(std::span<RedisConnection* const> connections, TimePoint deadline) {
  for (RedisConnection* c : connections) c->progress();
  std::vector<pollfd> fds;
  std::vector<RedisConnection*> waiting;
  for (;;) {
    fds.clear();
    waiting.clear();
    for (RedisConnection* c : connections) {
      if (c->done()) continue;
      waiting.push_back(c);
      const short events = POLLIN | (c->wants_write() ? POLLOUT : 0);
      fds.push_back({.fd = c->fd_, .events = events, .revents = 0});
    }
    if (waiting.empty()) return;
    if (late(deadline)) {
      for (RedisConnection* c : waiting) c->fail(ErrorCode::kDeadlineExceeded, "no reply in time");
      return;
    }
    const int rc = ::poll(fds.data(), fds.size(), poll_ms(deadline));
    if (rc < 0 && errno != EINTR) {
      const std::string what = errno_text("poll", errno);
      for (RedisConnection* c : waiting) c->fail(ErrorCode::kUnavailable, what);
      return;
    }
    for (size_t i = 0; i < fds.size() && rc > 0; ++i) {
      if (fds[i].revents != 0) waiting[i]->progress();
    }
  }
}

// ---- pool ----

Result<std::unique_ptr<RedisConnection>> RedisConnectionPool::borrow(TimePoint deadline) {
  {
    std::unique_lock lock(mutex_);
    const auto steady_deadline = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            deadline.time_since_epoch()));
    if (!cv_.wait_until(lock, steady_deadline,
                        [&] { return !idle_.empty() || open_ < max_connections_; })) {
      return make_error(ErrorCode::kDeadlineExceeded,
                        "redis " + endpoint_.to_string() + ": no free connection in time");
    }
    if (!idle_.empty()) {
      std::unique_ptr<RedisConnection> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
    ++open_;  // reserved; connected below without the lock
  }
  return open_reserved(deadline);
}

std::unique_ptr<RedisConnection> RedisConnectionPool::try_borrow(TimePoint deadline) {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<RedisConnection> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
    if (open_ >= max_connections_) return nullptr;
    ++open_;  // reserved; connected below without the lock
  }
  Result<std::unique_ptr<RedisConnection>> c = open_reserved(deadline);
  return c ? std::move(*c) : nullptr;
}

Result<std::unique_ptr<RedisConnection>> RedisConnectionPool::open_reserved(TimePoint deadline) {
  Result<std::unique_ptr<RedisConnection>> c = RedisConnection::open(endpoint_, deadline);
  if (!c) {
    std::lock_guard lock(mutex_);
    --open_;
    cv_.notify_one();
  }
  return c;
}

void RedisConnectionPool::give_back(std::unique_ptr<RedisConnection> connection) {
  std::vector<std::unique_ptr<RedisConnection>> closing;
  {
    std::lock_guard lock(mutex_);
    if (connection->broken()) {
      // The idle ones are likely broken too (a server that restarted): closed with it, so
      // that the next call (or probe) connects afresh.
      closing.swap(idle_);
      open_ -= 1 + closing.size();
      closing.push_back(std::move(connection));
    } else {
      idle_.push_back(std::move(connection));
    }
  }
  cv_.notify_all();
  // Broken connections are closed here, outside the lock.
}

}  // namespace kvtier::tier_internal
