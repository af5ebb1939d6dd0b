#include "redis_connection.h"

#include <sys/time.h>

#include <algorithm>
#include <charconv>

namespace kvtier::tier_internal {
namespace {

// At least 1 ms: a zero timeval means "no timeout" to hiredis.
timeval remaining(TimePoint deadline) {
  const auto left =
      std::max<Duration>(deadline - SteadyClock::instance().now(), std::chrono::milliseconds(1));
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(left).count();
  return timeval{.tv_sec = static_cast<time_t>(us / 1'000'000),
                 .tv_usec = static_cast<suseconds_t>(us % 1'000'000)};
}

std::unexpected<Error> io_error(const RedisEndpoint& endpoint, std::string_view what,
                                TimePoint deadline) {
  const bool late = SteadyClock::instance().now() >= deadline;
  return make_error(late ? ErrorCode::kDeadlineExceeded : ErrorCode::kUnavailable,
                    "redis " + endpoint.to_string() + ": " + std::string(what));
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

Result<std::unique_ptr<RedisConnection>> RedisConnection::open(const RedisEndpoint& endpoint,
                                                               TimePoint deadline) {
  redisContext* context =
      redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, remaining(deadline));
  if (context == nullptr) return io_error(endpoint, "cannot allocate a context", deadline);
  if (context->err != 0) {
    const std::string message = std::string("connect: ") + context->errstr;
    redisFree(context);
    return io_error(endpoint, message, deadline);
  }
  return std::unique_ptr<RedisConnection>(new RedisConnection(context, endpoint));
}

RedisConnection::~RedisConnection() {
  redisFree(context_);
}

void RedisConnection::append(const std::vector<std::string_view>& args, std::string_view tail) {
  // RESP: *<argc>\r\n then $<len>\r\n<bytes>\r\n per argument.
  size_t bytes = 16 + tail.size();
  for (std::string_view a : args) bytes += a.size() + 24;
  std::string command;
  command.reserve(bytes);
  command += "*" + std::to_string(args.size()) + "\r\n";
  for (size_t i = 0; i < args.size(); ++i) {
    const bool last = i + 1 == args.size();
    command += "$" + std::to_string(args[i].size() + (last ? tail.size() : 0)) + "\r\n";
    command += args[i];
    if (last) command += tail;
    command += "\r\n";
  }
  if (redisAppendFormattedCommand(context_, command.data(), command.size()) != REDIS_OK) {
    broken_ = true;
  }
}

Result<RedisReplyPtr> RedisConnection::read_reply(TimePoint deadline) {
  if (broken_) return io_error(endpoint_, "connection broken", deadline);
  if (redisSetTimeout(context_, remaining(deadline)) != REDIS_OK) {
    broken_ = true;
    return io_error(endpoint_, "cannot set the timeout", deadline);
  }
  void* reply = nullptr;
  if (redisGetReply(context_, &reply) != REDIS_OK || reply == nullptr) {
    broken_ = true;
    return io_error(endpoint_, context_->errstr[0] ? context_->errstr : "no reply", deadline);
  }
  return RedisReplyPtr(static_cast<redisReply*>(reply));
}

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
  Result<std::unique_ptr<RedisConnection>> c = RedisConnection::open(endpoint_, deadline);
  if (!c) {
    std::lock_guard lock(mutex_);
    --open_;
    cv_.notify_one();
  }
  return c;
}

void RedisConnectionPool::give_back(std::unique_ptr<RedisConnection> connection) {
  {
    std::lock_guard lock(mutex_);
    if (connection->broken()) {
      --open_;
    } else {
      idle_.push_back(std::move(connection));
    }
  }
  cv_.notify_one();
  // A broken connection is closed here, outside the lock.
}

}  // namespace kvtier::tier_internal
