// BackendPool (the router's view of its backends) against a scripted backend: an in-process HTTP
// server whose /health and /kvtier/routing answers each test sets. Every wait has a deadline.
#include "kvtier/engine/backend_pool.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "kvtier/engine/http_endpoint.h"
#include "kvtier/engine/routing_info.h"
#include "support/poll_until.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;

// A backend that answers /health with `health` and /kvtier/routing with `routing` (or, with
// routing_status other than 200, an error), counting the health checks it answered.
class ScriptedBackend {
 public:
  ScriptedBackend() {
    server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.status = health_.load();
      res.set_content("{}", "application/json");
      ++checks_;
    });
    server_.Get("/kvtier/routing", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard lock(mutex_);
      res.status = routing_status_;
      res.set_content(routing_.dump(), "application/json");
    });
    port_ = endpoint_.bind("127.0.0.1", 0, "test").value();
    thread_ = std::thread([this] { endpoint_.run(); });
  }
  ~ScriptedBackend() {
    endpoint_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void set_health(int status) { health_ = status; }
  void set_routing(int status, const RoutingInfo& info) {
    std::lock_guard lock(mutex_);
    routing_status_ = status;
    routing_ = info.to_json();
  }
  uint64_t checks() const { return checks_; }

 private:
  httplib::Server server_;
  HttpEndpoint endpoint_{server_, 4};
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> health_{200};
  std::atomic<uint64_t> checks_{0};
  std::mutex mutex_;
  int routing_status_ = 200;
  nlohmann::json routing_;
};

// A backend that accepts connections (the kernel does, into the listen queue) and never answers.
class SilentBackend {
 public:
  SilentBackend() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
      ADD_FAILURE() << "cannot listen";
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentBackend() { ::close(fd_); }
  SilentBackend(const SilentBackend&) = delete;
  SilentBackend& operator=(const SilentBackend&) = delete;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

RoutingInfo info_with_context(uint32_t max_context) {
  Config config;
  config.model.max_context = max_context;
  return RoutingInfo::of(config);
}

template <class Pred>
bool wait_until(Pred done) {
  return kvtier::testing::poll_until(done, 10s);
}

std::unique_ptr<BackendPool> pool_of(const ScriptedBackend& backend) {
  auto address = parse_backend_url(backend.url());
  EXPECT_TRUE(address) << address.error().to_string();
  auto pool = BackendPool::start(
      {.backends = {*address}, .policy = "load", .health_interval = 10ms, .health_timeout = 2s});
  EXPECT_TRUE(pool) << pool.error().to_string();
  return pool ? std::move(*pool) : nullptr;
}

// A backend that comes back after an outage is routed to only once it has described itself
// again: until then the router would check requests by what it said before (it may have been
// restarted with other limits), and if that read failed it would keep the old description.
TEST(BackendPool, ABackendThatReturnsIsRoutedToOnlyWithItsNewDescription) {
  ScriptedBackend backend;
  backend.set_routing(200, info_with_context(1000));
  const auto pool = pool_of(backend);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(wait_until([&] { return pool->in_rotation(0); }));
  ASSERT_EQ(pool->limits()->max_context, 1000u);

  backend.set_health(503);
  ASSERT_TRUE(wait_until([&] { return !pool->in_rotation(0); }));
  // It comes back, restarted with other limits, and cannot describe itself yet.
  backend.set_routing(500, info_with_context(2000));
  backend.set_health(200);
  const uint64_t seen = backend.checks();
  ASSERT_TRUE(wait_until([&] { return backend.checks() >= seen + 5; }));
  EXPECT_FALSE(pool->in_rotation(0)) << "in rotation without a description read since it returned";
  EXPECT_FALSE(pool->limits());
  EXPECT_FALSE(pool->pick("a prompt", 4));

  backend.set_routing(200, info_with_context(2000));
  ASSERT_TRUE(wait_until([&] { return pool->in_rotation(0); }));
  ASSERT_TRUE(pool->limits());
  EXPECT_EQ(pool->limits()->max_context, 2000u);
}

// Backends that accept and never answer cost a round of health checks their health_timeout once,
// together: the backends after them are checked at the pace set, not once per silent backend's
// timeout each.
TEST(BackendPool, H3_ABackendThatNeverAnswersDoesNotSlowTheOthersHealthChecks) {
  std::vector<std::unique_ptr<SilentBackend>> silent;
  BackendPoolOptions options{.policy = "load", .health_interval = 10ms, .health_timeout = 500ms};
  for (int i = 0; i < 6; ++i) {
    silent.push_back(std::make_unique<SilentBackend>());
    options.backends.push_back(*parse_backend_url(silent.back()->url()));
  }
  ScriptedBackend answering;  // checked last in each round
  answering.set_routing(200, info_with_context(1000));
  options.backends.push_back(*parse_backend_url(answering.url()));
  auto pool = BackendPool::start(options);
  ASSERT_TRUE(pool) << pool.error().to_string();
  ASSERT_TRUE(wait_until([&] { return (*pool)->in_rotation(6); }));
  // Checked one after another, a round takes 6 x 500 ms: one check of the answering backend in
  // 3 s. Together, a round takes 500 ms.
  const uint64_t seen = answering.checks();
  const auto window_end = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < window_end) std::this_thread::sleep_for(50ms);
  EXPECT_GE(answering.checks(), seen + 4);
  EXPECT_FALSE((*pool)->in_rotation(0));
}

}  // namespace
}  // namespace kvtier
