// `kvtier serve` end to end: the real frontend, engine cores and worker processes, driven over
// HTTP. Health tests carry the H rule they prove; every wait has a deadline.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>

#include "engine/serve_rig.h"

namespace kvtier::test {
namespace {

// The pid of the serve tree's process with `role` in its command line, e.g. {"worker", "0/1"}.
pid_t find_role(const ServeProcess& serve, const std::vector<std::string>& role) {
  return find_process(serve.pid(), role).value_or(-1);
}

nlohmann::json complete(const ServeProcess& serve, const std::string& prompt, int max_tokens) {
  const HttpReply r =
      serve.post("/v1/completions", {{"prompt", prompt}, {"max_tokens", max_tokens}}, 60000ms);
  EXPECT_EQ(r.status, 200) << r.body;
  return r.json();
}

// A, then B and C that push A out of a small device, then A again with a new suffix.
std::vector<nlohmann::json> shared_prefix_session(const ServeProcess& serve) {
  std::vector<nlohmann::json> out;
  const std::string a = prompt_text(400, 1), b = prompt_text(400, 2), c = prompt_text(400, 3);
  for (const std::string& p :
       {a, b, c, a + prompt_text(30, 9), b + prompt_text(30, 10), c + prompt_text(30, 11)}) {
    out.push_back(complete(serve, p, 8));
  }
  return out;
}

const std::vector<std::string> kSmallDevice = {"engine.device_blocks=40", "cache.host_bytes=64MiB"};

TEST(ServeE2E, SharedPrefixComesFromTheCacheWithTheSameOutputAndShowsInMetrics) {
  auto with = kSmallDevice, without = kSmallDevice;
  without.push_back("connector.enabled=false");
  auto on = start_ready(with);
  auto off = start_ready(without);
  ASSERT_TRUE(on && off);
  const auto on_out = shared_prefix_session(*on);
  const auto off_out = shared_prefix_session(*off);
  for (size_t i = 0; i < on_out.size(); ++i) {
    EXPECT_EQ(on_out[i]["choices"][0]["text"], off_out[i]["choices"][0]["text"]) << i;
  }
  EXPECT_GE(on_out[3]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 384);
  EXPECT_EQ(off_out[3]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  ASSERT_TRUE(wait_until(
      [&] {
        return metric(on->get("/metrics").body, "kvtier_core_kvtier_hit_tokens_total") >= 384;
      },
      5000ms))
      << on->get("/metrics").body;
}

TEST(ServeE2E, H1_FaultsInjectedThroughConfigLeaveOutputsIdenticalAndHealthy) {
  auto faulty_sets = kSmallDevice;
  faulty_sets.insert(faulty_sets.end(), {"engine.world_size=2", "faults.submit_failure_rate=0.3",
                                         "faults.latched_error_rate=0.2", "faults.delay_rate=0.2",
                                         "faults.direction=load"});
  auto clean_sets = kSmallDevice;
  clean_sets.push_back("engine.world_size=2");
  auto faulty = start_ready(faulty_sets);
  auto clean = start_ready(clean_sets);
  ASSERT_TRUE(faulty && clean);
  const auto a = shared_prefix_session(*faulty);
  const auto b = shared_prefix_session(*clean);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["choices"][0]["text"], b[i]["choices"][0]["text"]) << i;
  }
  EXPECT_EQ(faulty->get("/health").status, 200);
  const std::string metrics = faulty->get("/metrics").body;
  EXPECT_GT(metric(metrics, "kvtier_core_kvtier_loads_failed_total"), 0)
      << "loads failed, and were recomputed";
}

TEST(ServeE2E, H2_H5_KilledWorkerTurnsHealth503AndEndsTheStreamNamingIt) {
  auto serve = start_ready({"engine.world_size=2", "model.max_context=8192"});
  ASSERT_TRUE(serve);
  const pid_t worker = find_role(*serve, {"worker", "0/1"});
  ASSERT_GT(worker, 0);
  std::optional<TestClock::time_point> killed;
  std::optional<TestClock::time_point> health_503;
  std::thread watcher;
  const SseStream stream = serve->stream(
      "/v1/completions", {{"prompt", prompt_text(64, 4)}, {"max_tokens", 6000}, {"stream", true}},
      10000ms, [&](const SseEvent&) {
        if (killed) return;
        killed = TestClock::now();
        send_signal(worker, SIGKILL);
        watcher = std::thread([&] {
          if (wait_until([&] { return serve->get("/health", 1000ms).status == 503; }, 2000ms,
                         1ms)) {
            health_503 = TestClock::now();
          }
        });
      });
  const auto stream_ended = TestClock::now();
  if (watcher.joinable()) watcher.join();
  ASSERT_TRUE(killed.has_value());
  EXPECT_TRUE(stream.error) << stream.raw.substr(stream.raw.size() > 500 ? stream.raw.size() - 500
                                                                         : 0);
  EXPECT_LT(stream_ended - *killed, 1000ms) << "H5: the stream ends promptly";
  ASSERT_TRUE(health_503.has_value());
  EXPECT_LT(*health_503 - *killed, 1000ms) << "H2: 503 within a second";
  const HttpReply health = serve->get("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_NE(health.body.find("worker 0/1"), std::string::npos) << health.body;
  EXPECT_NE(stream.raw.find("worker 0/1"), std::string::npos)
      << "the stream's error names the worker";
}

TEST(ServeE2E, H6_StoppedWorkerTurnsHealth503WithinTheStallTimeout) {
  auto serve = start_ready({"engine.world_size=2", "engine.stall_timeout_s=1"});
  ASSERT_TRUE(serve);
  const pid_t worker = find_role(*serve, {"worker", "0/0"});
  ASSERT_GT(worker, 0);
  send_signal(worker, SIGSTOP);
  const auto stopped = TestClock::now();
  EXPECT_TRUE(wait_until([&] { return serve->get("/health", 1000ms).status == 503; }, 2000ms));
  EXPECT_LT(TestClock::now() - stopped, 2000ms);
  EXPECT_NE(serve->get("/health").body.find("stalled"), std::string::npos);
  send_signal(worker, SIGCONT);
}

// Whether a TCP connection to host:port completes within `timeout` (a non-blocking connect).
bool connects_within(const std::string& host, int port, std::chrono::milliseconds timeout,
                     std::vector<int>& open_fds) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  open_fds.push_back(fd);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return false;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return true;
  if (errno != EINPROGRESS) return false;
  pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
  int error = 0;
  socklen_t length = sizeof error;
  return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
}

// A burst of connections while the frontend does not accept (here: stopped) waits in the
// kernel's accept queue. cpp-httplib's own backlog is 5: past that, the kernel drops the SYNs
// and each client waits a 1 s retransmit (TTFT p99 +1 s at 32 concurrent clients).
TEST(ServeE2E, ABurstOfConnectionsWaitsInTheAcceptQueueInsteadOfBeingDropped) {
  auto serve = start_ready({});
  ASSERT_TRUE(serve);
  std::vector<int> fds;
  size_t connected = 0;
  send_signal(serve->pid(), SIGSTOP);
  for (int i = 0; i < 32; ++i)
    connected += connects_within(serve->host(), serve->port(), 300ms, fds);
  send_signal(serve->pid(), SIGCONT);
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(connected, 32u);
  EXPECT_EQ(serve->get("/health").status, 200);
}

// H1 (a /health that answers): the HTTP server gives each connection a thread of a fixed pool.
// With engine.max_requests_in_flight streams in flight, another completion is refused at once
// (429, overloaded) and /health and /metrics still answer: the pool keeps threads past the
// request threads for them.
TEST(ServeE2E, H1_HealthAnswersWhileTheMostRequestsAreInFlight) {
  auto serve = start_ready({"engine.max_requests_in_flight=2"});
  ASSERT_TRUE(serve);
  const std::string host = serve->host();
  const int port = serve->port();
  std::mutex m;
  std::condition_variable cv;
  int streaming = 0;
  std::vector<std::thread> streams;
  for (int i = 0; i < 2; ++i) {
    streams.emplace_back([&, i] {
      bool counted = false;
      read_sse(host, port, "/v1/completions",
               {{"prompt", prompt_text(50, i)}, {"max_tokens", 16000}, {"stream", true}}, 60000ms,
               [&](const SseEvent&) {
                 if (std::exchange(counted, true)) return;
                 std::lock_guard lock(m);
                 ++streaming;
                 cv.notify_all();
               });
    });
  }
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return streaming == 2; }));
  }
  const HttpReply refused =
      serve->post("/v1/completions", {{"prompt", "one more"}, {"max_tokens", 4}}, 2000ms);
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.json()["error"]["code"], "overloaded") << refused.body;
  EXPECT_EQ(serve->get("/health", 2000ms).status, 200);
  const HttpReply metrics = serve->get("/metrics", 2000ms);
  EXPECT_NE(metrics.body.find("kvtier_requests_refused_total 1\n"), std::string::npos)
      << metrics.body;
  serve.reset();  // SIGTERM: the streams end (H5)
  for (std::thread& t : streams) t.join();
}

TEST(ServeE2E, H3_KilledEngineCoreTurnsHealth503) {
  auto serve = start_ready({});
  ASSERT_TRUE(serve);
  const pid_t core = find_role(*serve, {"engine-core", "0"});
  ASSERT_GT(core, 0);
  send_signal(core, SIGKILL);
  EXPECT_TRUE(wait_until([&] { return serve->get("/health", 1000ms).status == 503; }, 2000ms));
  EXPECT_NE(serve->get("/health").body.find("engine core 0"), std::string::npos)
      << serve->get("/health").body;
  // A new request on the dead engine is refused, not left hanging (H5).
  EXPECT_EQ(serve->post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 4}}, 5000ms).status,
            503);
}

// As EngineCoreHealth.H4_UnprovableTransferFailStopsTheEngine: the fail-stop comes in the
// request's only step, so it is the engine core's check after that step that must report it.
TEST(ServeE2E, H4_FailStopTurnsTheEngineFailed) {
  auto serve = start_ready({"faults.record_failure_rate=1"});
  ASSERT_TRUE(serve);
  const HttpReply r =
      serve->post("/v1/completions", {{"prompt", prompt_text(200, 5)}, {"max_tokens", 1}}, 10000ms);
  (void)r;  // the request may finish or fail; the engine must turn FAILED either way
  ASSERT_TRUE(wait_until([&] { return serve->get("/health").status == 503; }, 5000ms));
  EXPECT_NE(serve->get("/health").body.find("fail-stop"), std::string::npos)
      << serve->get("/health").body;
}

// The README's main job with a disk tier: what one `kvtier serve` wrote is served by the next.
TEST(ServeE2E, DiskTierChunksAreFoundAgainAfterARestartOfKvtierServe) {
  char dir_template[] = "/tmp/kvtier-serve-disk-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::filesystem::path disk = dir_template;
  auto sets = kSmallDevice;
  sets.push_back("tiers.disk_path=" + disk.string());
  const std::string a = prompt_text(400, 1);
  {
    auto first = start_ready(sets);
    ASSERT_TRUE(first);
    complete(*first, a, 8);
    ASSERT_TRUE(wait_until(
        [&] {
          return metric(first->get("/metrics").body,
                        "kvtier_core_kvtier_tier_chunks_demoted_total") >= 6;
        },
        20000ms))
        << "A's 6 chunks reach the disk tier: " << first->get("/metrics").body;
    first->signal(SIGTERM);
    ASSERT_TRUE(first->wait_exit(20000ms).has_value());
  }
  auto without = kSmallDevice;
  without.push_back("connector.enabled=false");
  auto second = start_ready(sets);
  auto reference = start_ready(without);
  ASSERT_TRUE(second && reference);
  const nlohmann::json again = complete(*second, a + prompt_text(30, 9), 8);
  EXPECT_EQ(again["choices"][0]["text"],
            complete(*reference, a + prompt_text(30, 9), 8)["choices"][0]["text"]);
  EXPECT_GE(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 384)
      << "A's prefix comes from the disk tier the first instance wrote";
  EXPECT_TRUE(wait_until(
      [&] {
        return metric(second->get("/metrics").body, "kvtier_core_kvtier_tier_disk_hits_total") >= 6;
      },
      5000ms));
  std::filesystem::remove_all(disk);
}

TEST(ServeE2E, H3_GracefulShutdownAnswersClosed) {
  auto serve = start_ready({});
  ASSERT_TRUE(serve);
  serve->signal(SIGTERM);
  // Until it has exited, /health answers 503 "closed" (or nothing once the socket is gone).
  bool saw_closed = false;
  wait_until(
      [&] {
        const HttpReply h = serve->get("/health", 500ms);
        if (h.status == 503 && h.body.find("closed") != std::string::npos) saw_closed = true;
        return h.status == 0 || saw_closed;
      },
      5000ms, 1ms);
  EXPECT_TRUE(saw_closed);
  const auto status = serve->wait_exit(10000ms);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

}  // namespace
}  // namespace kvtier::test
