#include "redis_process.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <random>
#include <system_error>
#include <thread>

namespace kvtier::bench {
namespace {

bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

bool program_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    if (::access((dirs.substr(start, end - start) + "/" + name).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// Starts a program found on PATH with its stdout and stderr appended to `log`.
ChildProcess spawn_logged(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  return ChildProcess::spawn(argv,
                             {.die_with_parent = false, .search_path = true, .output_file = log});
}

// Runs a program to its end, at most `timeout`; its exit status, -1 if it cannot run, is killed
// or does not end in time.
int run_program(const std::vector<std::string>& argv, const std::filesystem::path& log,
                Duration timeout) {
  try {
    ChildProcess child = spawn_logged(argv, log);
    if (!child.wait_exit(timeout)) return -1;  // killed and reaped by ~ChildProcess
    const std::optional<int> status = child.wait_status();
    return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  } catch (const std::system_error&) {
    return -1;
  }
}

timeval to_timeval(Duration d) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return timeval{.tv_sec = static_cast<time_t>(us / 1'000'000),
                 .tv_usec = static_cast<suseconds_t>(us % 1'000'000)};
}

}  // namespace

int free_loopback_port() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, 50000);
  for (;;) {
    const int port = pick(rng);
    if (port_is_free(port) && port_is_free(port + 10000)) return port;
  }
}

Result<std::unique_ptr<RedisServerProcess>> RedisServerProcess::start(Options options,
                                                                      Duration ready_timeout) {
  if (!program_on_path("redis-server")) {
    return make_error(ErrorCode::kUnavailable,
                      "redis-server is not installed (scripts/setup installs it)");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.directory, ec);
  if (ec) return make_error(ErrorCode::kUnavailable, "cannot create " + options.directory.string());
  const bool pick_port = options.port == 0;
  std::unique_ptr<RedisServerProcess> server(new RedisServerProcess(std::move(options)));
  // A picked port may be taken between the check and the bind: try a few.
  for (int attempt = 0;; ++attempt) {
    if (pick_port) server->options_.port = free_loopback_port();
    Status ok = server->spawn(ready_timeout);
    if (ok) return server;
    if (!pick_port || attempt == 3) return std::unexpected(ok.error());
  }
}

RedisServerProcess::~RedisServerProcess() = default;  // ~ChildProcess kills and reaps

Status RedisServerProcess::spawn(Duration ready_timeout) {
  const std::filesystem::path log = options_.directory / "redis.log";
  std::vector<std::string> argv = {"redis-server",
                                   "--port",
                                   std::to_string(options_.port),
                                   "--bind",
                                   "127.0.0.1",
                                   "--dir",
                                   options_.directory.string(),
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--protected-mode",
                                   "no"};
  argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  try {
    process_ = spawn_logged(argv, log);
    killed_ = false;
  } catch (const std::system_error& e) {
    return make_error(ErrorCode::kUnavailable,
                      std::string("cannot start redis-server: ") + e.what());
  }
  const TimePoint deadline = SteadyClock::instance().now() + ready_timeout;
  while (SteadyClock::instance().now() < deadline) {
    if (process_.poll_exit()) {
      return make_error(ErrorCode::kUnavailable, "redis-server on port " +
                                                     std::to_string(options_.port) +
                                                     " exited at start; see " + log.string());
    }
    if (Result<std::string> pong = command({"PING"}, std::chrono::milliseconds(200));
        pong && *pong == "PONG") {
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a process start
  }
  kill();
  return make_error(ErrorCode::kUnavailable,
                    "redis-server on port " + std::to_string(options_.port) +
                        " did not answer PING in time; see " + log.string());
}

void RedisServerProcess::kill() {
  process_.kill_and_reap();
  killed_ = true;
}

std::optional<std::string> RedisServerProcess::crashed() {
  if (killed_ || process_.pid() < 0) return std::nullopt;
  return process_.poll_exit();
}

void RedisServerProcess::pause() {
  process_.signal(SIGSTOP);
}

void RedisServerProcess::resume() {
  process_.signal(SIGCONT);
}

Status RedisServerProcess::restart(Duration ready_timeout) {
  kill();
  return spawn(ready_timeout);
}

Result<std::string> RedisServerProcess::command(const std::vector<std::string>& args,
                                                Duration timeout) const {
  redisContext* c = redisConnectWithTimeout("127.0.0.1", options_.port, to_timeval(timeout));
  if (c == nullptr || c->err != 0) {
    const std::string message = c ? c->errstr : "no context";
    if (c) redisFree(c);
    return make_error(ErrorCode::kUnavailable, "redis: " + message);
  }
  redisSetTimeout(c, to_timeval(timeout));
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  if (reply == nullptr) {
    const std::string message = c->errstr;
    redisFree(c);
    return make_error(ErrorCode::kUnavailable, "redis: " + message);
  }
  Result<std::string> out;
  switch (reply->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out = std::string(reply->str, reply->len);
      break;
    case REDIS_REPLY_INTEGER:
      out = std::to_string(reply->integer);
      break;
    case REDIS_REPLY_NIL:
      out = std::string();
      break;
    case REDIS_REPLY_ERROR:
      out = make_error(ErrorCode::kInternal, std::string(reply->str, reply->len));
      break;
    default:
      out = std::string("(array)");
      break;
  }
  freeReplyObject(reply);
  redisFree(c);
  return out;
}

Result<std::unique_ptr<RedisClusterProcess>> RedisClusterProcess::start(
    const std::filesystem::path& directory, Duration ready_timeout) {
  if (!program_on_path("redis-cli")) {
    return make_error(ErrorCode::kUnavailable, "redis-cli is not installed");
  }
  auto cluster = std::make_unique<RedisClusterProcess>();
  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (int i = 0; i < 3; ++i) {
    const std::filesystem::path dir = directory / ("node" + std::to_string(i));
    Result<std::unique_ptr<RedisServerProcess>> node = RedisServerProcess::start(
        {.directory = dir,
         .extra_args = {"--cluster-enabled", "yes", "--cluster-config-file",
                        (dir / "nodes.conf").string(), "--cluster-node-timeout", "2000",
                        "--cluster-require-full-coverage", "no"}},
        ready_timeout);
    if (!node) return std::unexpected(node.error());
    create.push_back((*node)->address());
    cluster->nodes_.push_back(std::move(*node));
  }
  create.insert(create.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  const std::filesystem::path log = directory / "cluster-create.log";
  if (run_program(create, log, ready_timeout) != 0) {
    return make_error(ErrorCode::kUnavailable,
                      "redis-cli --cluster create failed; see " + log.string());
  }
  const TimePoint deadline = SteadyClock::instance().now() + ready_timeout;
  for (auto& node : cluster->nodes_) {
    const Duration left = std::max<Duration>(deadline - SteadyClock::instance().now(), {});
    if (Status ok = wait_serving(*node, left); !ok) return std::unexpected(ok.error());
  }
  return cluster;
}

Status RedisClusterProcess::wait_serving(const RedisServerProcess& node, Duration timeout) {
  const TimePoint deadline = SteadyClock::instance().now() + timeout;
  for (;;) {
    Result<std::string> info = node.command({"CLUSTER", "INFO"}, std::chrono::milliseconds(500));
    if (info && info->find("cluster_state:ok") != std::string::npos) return {};
    if (SteadyClock::instance().now() >= deadline) {
      return make_error(ErrorCode::kUnavailable,
                        "cluster node " + node.address() + " never reached cluster_state:ok");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling cluster convergence
  }
}

}  // namespace kvtier::bench
