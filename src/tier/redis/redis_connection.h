// One hiredis connection, and a bounded pool of them per Redis node. Private to src/tier.
//
// Every connection is opened with a connect timeout and every batch sets the socket timeout to
// what is left of the call's deadline (redisSetTimeout), so no call blocks past its deadline by
// more than one socket operation. A connection that saw an IO or protocol error is closed, never
// returned to its pool.
#pragma once

#include <hiredis/hiredis.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/core/status.h"

namespace kvtier::tier_internal {

struct RedisEndpoint {
  std::string host;
  int port = 6379;

  std::string to_string() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const RedisEndpoint&, const RedisEndpoint&) = default;
};

// "redis://host:port", "redis://host" (port 6379) or "host:port". kInvalidArgument otherwise.
Result<RedisEndpoint> parse_redis_url(std::string_view url);
// "host:port" as in MOVED/ASK replies.
Result<RedisEndpoint> parse_host_port(std::string_view text);

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisConnection {
 public:
  // Connects within `deadline`. kUnavailable (or kDeadlineExceeded) naming the endpoint.
  static Result<std::unique_ptr<RedisConnection>> open(const RedisEndpoint& endpoint,
                                                       TimePoint deadline);
  ~RedisConnection();

  // Queues one command (arguments are binary-safe) without sending it. `tail` is sent right
  // after the last argument, as part of it: a record's payload after its header, so that the
  // two are never joined in memory first.
  void append(const std::vector<std::string_view>& args, std::string_view tail = {});
  // Sends what is queued (first call) and reads the next reply. Sets the socket timeout to
  // what is left until `deadline`. An error here breaks the connection (broken() is true).
  Result<RedisReplyPtr> read_reply(TimePoint deadline);
  bool broken() const { return broken_; }

 private:
  RedisConnection(redisContext* context, RedisEndpoint endpoint)
      : context_(context), endpoint_(std::move(endpoint)) {}
  redisContext* context_;
  RedisEndpoint endpoint_;
  bool broken_ = false;
};

class RedisConnectionPool {
 public:
  RedisConnectionPool(RedisEndpoint endpoint, size_t max_connections)
      : endpoint_(std::move(endpoint)), max_connections_(max_connections) {}

  // A connection of this pool's node: an idle one, a new one while fewer than max_connections
  // are open, or else the next one given back before the deadline (kDeadlineExceeded).
  Result<std::unique_ptr<RedisConnection>> borrow(TimePoint deadline);
  // Keeps it for reuse unless it is broken.
  void give_back(std::unique_ptr<RedisConnection> connection);
  const RedisEndpoint& endpoint() const { return endpoint_; }

 private:
  const RedisEndpoint endpoint_;
  const size_t max_connections_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
  size_t open_ = 0;  // idle + borrowed
};

}  // namespace kvtier::tier_internal
