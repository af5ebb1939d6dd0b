// One TCP connection to a Redis node, a bounded pool of them per node, and run_pipelines(),
// which runs the commands queued on several connections at once. Private to src/tier.
//
// Zero copies of chunk bytes on either side: a command goes out with one sendmsg() of iovecs
// (its RESP header from an owned buffer, a SET's chunk from the caller's memory), and a GET's
// reply is read with readv() straight into the command's head and body (redis_reply.h).
//
// Pipelines are windowed: the commands out at once carry about 4 MiB of values at most (a
// SET's chunk, a GET's record; see kWindowBytes), the next one leaving as a reply arrives.
//
// Sockets are non-blocking. run_pipelines() sends and reads on every connection it is given,
// in one poll() loop, until each has read a reply to every command queued on it, failed, or
// reached the deadline: one node that hangs does not hold up the others. A connection that saw
// an IO or protocol error, or the deadline, is broken: it is closed, never reused.
#pragma once

#include <sys/uio.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/core/status.h"
#include "redis_reply.h"

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

class RedisConnection {
 public:
  // Connects within `deadline`. kUnavailable (or kDeadlineExceeded) naming the endpoint.
  static Result<std::unique_ptr<RedisConnection>> open(const RedisEndpoint& endpoint,
                                                       TimePoint deadline);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // The window of a connection that serves a call alone: two chunks of 2 MiB out at once,
  // sixteen of 256 KiB. A server sent 16 GETs of 2 MiB at once copies every value into its
  // output buffers before the first is read, out of the CPU's caches: measured here, GETs of
  // 2 MiB in windows of 1-4 chunks ran 1.3-1.7x faster than 16 at once (SETs a little
  // faster). Two chunks in flight keep a network link busy while the next reply crosses it.
  static constexpr size_t kWindowBytes = size_t{4} << 20;

  struct Queued {
    const RedisCommand* command;
    bool asking = false;  // sent after ASKING (a redirection by ASK)
  };
  // Queues commands for the next run_pipelines(), to go out in windows of `window_bytes` of
  // values (see kWindowBytes). Their arguments, tails and buffers must stay valid until it
  // returns. Replaces what the last run left (replies()).
  void queue(std::span<const Queued> commands, size_t window_bytes = kWindowBytes);
  // After run_pipelines(): one reply per queued command, in order (an ASKING's own reply is
  // dropped); fewer when the connection failed (error()).
  std::vector<RedisReply>& replies() { return replies_; }
  // Why the last run stopped early; only when broken().
  const Error& error() const { return error_; }
  bool broken() const { return broken_; }
  const RedisEndpoint& endpoint() const { return endpoint_; }

 private:
  friend void run_pipelines(std::span<RedisConnection* const> connections, TimePoint deadline);

  RedisConnection(int fd, RedisEndpoint endpoint) : fd_(fd), endpoint_(std::move(endpoint)) {}
  bool done() const { return broken_ || replies_pending_ == 0; }
  // Released commands not wholly sent yet.
  bool wants_write() const;
  // Lets out the next commands while the values of those out fit the window.
  void release();
  // Sends and reads what it can without blocking. False once broken.
  bool progress();
  bool send_some();
  bool read_some();
  // Parses what the input buffer holds; false when broken.
  bool parse_buffered();
  void deliver(RedisReply reply);
  // The streamed bulk string's current place is full: the next one, or the scratch buffer
  // again while a value read aside has bytes left (discard_left_).
  void next_stream_place();
  bool fail(ErrorCode code, std::string what);

  struct Expected {
    const RedisCommand* command = nullptr;  // null: the reply of an ASKING, dropped
    size_t value_bytes = 0;                 // a SET's tail, a GET's record size
    size_t ends_at = 0;                     // where its command ends in the output stream
  };

  int fd_;
  RedisEndpoint endpoint_;
  bool broken_ = false;
  Error error_;

  // Output: the iovecs of every queued command; owned bytes live in out_bytes_. A command is
  // sent once released: the commands out at once carry less than window_limit_ bytes of
  // values, or one more.
  size_t window_limit_ = kWindowBytes;
  std::string out_bytes_;
  std::vector<iovec> out_;
  size_t out_next_ = 0;      // first iovec not wholly sent (advanced in place when partly sent)
  size_t sent_ = 0;          // bytes of the stream sent
  size_t released_ = 0;      // expected_[0, released_) may be sent
  size_t window_bytes_ = 0;  // value bytes of the released, unanswered commands

  // Input.
  std::vector<Expected> expected_;
  size_t next_expected_ = 0;
  size_t replies_pending_ = 0;
  std::vector<RedisReply> replies_;
  std::vector<char> in_;  // [in_begin_, in_end_) received, not parsed yet
  size_t in_begin_ = 0, in_end_ = 0;
  // A top-level bulk string being streamed: up to three places, then its "\r\n". A value of
  // another size than the record its command reads is read aside: its first place is a
  // scratch buffer, filled again while discard_left_ bytes of it remain.
  bool streaming_ = false;
  RedisReply streamed_;
  iovec stream_[4] = {};
  size_t stream_next_ = 0, stream_count_ = 0;
  char stream_crlf_[2] = {};
  size_t discard_left_ = 0;
  std::unique_ptr<std::byte[]> discard_;
};

// Runs the commands queued on each connection (see the top of this file). Returns when every
// connection has all its replies or is broken; at `deadline` the unfinished ones break with
// kDeadlineExceeded.
void run_pipelines(std::span<RedisConnection* const> connections, TimePoint deadline);

class RedisConnectionPool {
 public:
  RedisConnectionPool(RedisEndpoint endpoint, size_t max_connections)
      : endpoint_(std::move(endpoint)), max_connections_(max_connections) {}

  // A connection of this pool's node: an idle one, a new one while fewer than max_connections
  // are open, or else the next one given back before the deadline (kDeadlineExceeded).
  Result<std::unique_ptr<RedisConnection>> borrow(TimePoint deadline);
  // An idle connection, or a new one while fewer than max_connections are open and it connects
  // before the deadline; null otherwise, without waiting for one to be given back.
  std::unique_ptr<RedisConnection> try_borrow(TimePoint deadline);
  // Keeps it for reuse unless it is broken; a broken one closes the idle ones too.
  void give_back(std::unique_ptr<RedisConnection> connection);
  const RedisEndpoint& endpoint() const { return endpoint_; }

 private:
  // Connects the connection reserved in open_; the reservation is given up when that fails.
  Result<std::unique_ptr<RedisConnection>> open_reserved(TimePoint deadline);

  const RedisEndpoint endpoint_;
  const size_t max_connections_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
  size_t open_ = 0;  // idle + borrowed
};

}  // namespace kvtier::tier_internal
