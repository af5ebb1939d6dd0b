// The Redis side of `kvtier bench server`: a redis-server child process on a unix socket, and
// hiredis connections to it. Every wait is bounded.
#pragma once

#include <hiredis.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kvtier/core/child_process.h"

namespace kvtier::bench {

struct RedisContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using RedisConnection = std::unique_ptr<redisContext, RedisContextFree>;

// A bare RESP connection over the unix socket: pipelines written with one call (writev straight
// from the caller's memory) and replies read in bulk, GET values straight into the caller's
// memory. What redis-benchmark does, without a client library's per-command cost or copies.
// Throws on any error; every read is bounded by a 10 s receive timeout.
class RawRedisConnection {
 public:
  explicit RawRedisConnection(const std::string& socket_path)
      : fd_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (fd_ < 0 || socket_path.size() >= sizeof addr.sun_path) fail("socket");
    std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail("connect");
    const timeval timeout{.tv_sec = 10, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  RawRedisConnection(RawRedisConnection&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  RawRedisConnection& operator=(RawRedisConnection&&) = delete;
  ~RawRedisConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n <= 0) fail("write");
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
  // Writes every piece, in order, with as few calls as the kernel allows (writev).
  void write(std::vector<iovec> pieces) {
    for (size_t i = 0; i < pieces.size();) {
      const int count = static_cast<int>(std::min<size_t>(pieces.size() - i, IOV_MAX));
      ssize_t n = ::writev(fd_, pieces.data() + i, count);
      if (n <= 0) fail("writev");
      while (n > 0) {
        const size_t used = std::min<size_t>(static_cast<size_t>(n), pieces[i].iov_len);
        pieces[i].iov_base = static_cast<char*>(pieces[i].iov_base) + used;
        pieces[i].iov_len -= used;
        n -= static_cast<ssize_t>(used);
        if (pieces[i].iov_len == 0) ++i;
      }
      while (i < pieces.size() && pieces[i].iov_len == 0) ++i;
    }
  }
  // A bulk string reply ("$<n>\r\n<n bytes>\r\n") of exactly `dest`'s total size, read
  // straight into the pieces of `dest` (what the read buffer already holds is copied).
  void read_bulk_into(std::span<const std::span<std::byte>> dest) {
    size_t total = 0;
    for (const auto& d : dest) total += d.size();
    const std::string header = read_line();
    if (header != "$" + std::to_string(total)) {
      throw std::runtime_error("redis: expected a bulk of " + std::to_string(total) + ", got " +
                               header.substr(0, 40));
    }
    for (const auto& d : dest) read_exact(d.data(), d.size());
    char crlf[2];
    read_exact(reinterpret_cast<std::byte*>(crlf), 2);
    if (crlf[0] != '\r' || crlf[1] != '\n') throw std::runtime_error("redis: bulk not ended");
  }
  // Reads `n` replies, each exactly `reply` (e.g. ":1\r\n").
  void expect_replies(size_t n, std::string_view reply) {
    std::vector<std::byte> got(n * reply.size());
    read_exact(got.data(), got.size());
    for (size_t i = 0; i < got.size(); i += reply.size()) {
      const std::string_view r(reinterpret_cast<const char*>(got.data()) + i, reply.size());
      if (r != reply) throw std::runtime_error("redis: unexpected reply " + std::string(r));
    }
  }

 private:
  // Exactly `n` bytes into `out`: first what the buffer holds, then straight from the socket.
  void read_exact(std::byte* out, size_t n) {
    const size_t buffered = std::min(n, end_ - begin_);
    std::memcpy(out, buffer_.data() + begin_, buffered);
    begin_ += buffered;
    for (size_t got = buffered; got < n;) {
      const ssize_t r = ::read(fd_, out + got, n - got);
      if (r <= 0) fail("read");
      got += static_cast<size_t>(r);
    }
  }
  // One line without its "\r\n", buffered (a small read: value bytes after it stay few).
  std::string read_line() {
    for (;;) {
      const std::string_view held(buffer_.data() + begin_, end_ - begin_);
      if (const size_t eol = held.find("\r\n"); eol != std::string_view::npos) {
        std::string line(held.substr(0, eol));
        begin_ += eol + 2;
        return line;
      }
      if (end_ - begin_ > 1024) throw std::runtime_error("redis: reply line too long");
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
      const ssize_t r = ::read(fd_, buffer_.data() + end_, 256);
      if (r <= 0) fail("read");
      end_ += static_cast<size_t>(r);
    }
  }
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(std::string("redis raw connection: ") + what + ": " +
                             std::strerror(errno));
  }
  int fd_;
  std::vector<char> buffer_ = std::vector<char>(2048);  // read_line's; [begin_, end_) held
  size_t begin_ = 0, end_ = 0;
};

class RedisProcess {
 public:
  explicit RedisProcess(const std::string& binary)
      : socket_("/tmp/kvtier-bench-redis-" + std::to_string(getpid()) + ".sock") {
    process_ = ChildProcess::spawn({binary, "--port", "0", "--unixsocket", socket_, "--save", "",
                                    "--appendonly", "no", "--loglevel", "warning"},
                                   {.search_path = true, .output_file = "/dev/null"});
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      context_ = redisConnectUnix(socket_.c_str());
      if (context_ && !context_->err) return;
      if (context_) redisFree(context_);
      context_ = nullptr;
      if (process_.poll_exit()) break;                             // it exited
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // waiting for its socket
    }
    stop();
    throw std::runtime_error("cannot start " + binary + " (is redis-server installed?)");
  }
  ~RedisProcess() { stop(); }
  redisContext* context() const { return context_; }
  const std::string& socket() const { return socket_; }
  // Another connection to the same server.
  RedisConnection connect() const {
    RedisConnection c(redisConnectUnix(socket_.c_str()));
    if (!c || c->err) throw std::runtime_error("cannot connect to redis-server at " + socket_);
    return c;
  }

 private:
  void stop() {
    if (context_) redisFree(context_);
    context_ = nullptr;
    process_.kill_and_reap();
    unlink(socket_.c_str());
  }
  std::string socket_;
  ChildProcess process_;
  redisContext* context_ = nullptr;
};

}  // namespace kvtier::bench
