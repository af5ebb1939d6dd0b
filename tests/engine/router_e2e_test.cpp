// `kvtier router` end to end: real `kvtier serve` backends (frontend, engine core, worker
// processes) behind a real router process, over HTTP. Every wait has a deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <thread>

#include "engine/serve_rig.h"
#include "support/temp_dir.h"

namespace kvtier::test {
namespace {

// A folder for the backends' ipc:// event endpoints, removed at the end.
using EventDir = kvtier::testing::TempDir;

// Backend `n`'s settings: KV events on ipc endpoints in `dir`, a quick stall detection (H6).
std::vector<std::string> backend_sets(const EventDir& dir, int n,
                                      std::vector<std::string> extra = {}) {
  const std::string base = "ipc://" + dir.path().string() + "/";
  std::vector<std::string> sets = {"events.endpoint=" + base + "events-" + std::to_string(n),
                                   "events.replay_endpoint=" + base + "replay-" + std::to_string(n),
                                   "engine.stall_timeout_s=1"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return sets;
}

std::string url_of(const ServeProcess& serve) {
  return "http://" + serve.host() + ":" + std::to_string(serve.port());
}

std::optional<ServeProcess> start_router(const std::vector<std::string>& backends,
                                         const std::string& policy = "cache") {
  std::vector<std::string> argv = {KVTIER_EXE,          "router", "--port", "0", "--policy", policy,
                                   "--health-interval", "0.05"};
  for (const std::string& url : backends) argv.insert(argv.end(), {"--backend", url});
  return ServeProcess::start(argv, 20000ms);
}

// The sum of `name`'s samples for `backend` (and `extra_label`, e.g. medium="device").
double backend_metric(const ServeProcess& router, const std::string& name,
                      const std::string& backend, const std::string& extra_label = "") {
  const HttpReply m = router.get("/metrics");
  std::istringstream lines(m.body);
  double total = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(name + "{")) continue;
    if (line.find("backend=\"" + backend + "\"") == std::string::npos) continue;
    if (!extra_label.empty() && line.find(extra_label) == std::string::npos) continue;
    total += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return total;
}

bool in_rotation(const ServeProcess& router, const std::string& backend) {
  return backend_metric(router, "kvtier_router_in_rotation", backend) == 1;
}

// A completion through the router: the reply and the backend that served it.
struct Routed {
  int status = 0;
  std::string backend;  // X-Kvtier-Backend
  nlohmann::json body;
};
Routed post_routed(const ServeProcess& router, const nlohmann::json& body,
                   const std::string& path = "/v1/completions") {
  httplib::Client c = client(router.host(), router.port(), 60000ms);
  const httplib::Result r = c.Post(path, body.dump(), "application/json");
  if (!r) return {};
  return {r->status, r->get_header_value("X-Kvtier-Backend"),
          nlohmann::json::parse(r->body, nullptr, false)};
}

// `n` characters that differ for different seeds (no shared prefix between seeds).
std::string seeded_document(size_t n, int seed) {
  return std::to_string(seed) + ":" + prompt_text(n, seed * 5 + 1);
}

// Whether the router's index comes to hold at least `blocks` device blocks of `backend` (from
// its events) within 10 s.
bool indexed_on_device(const ServeProcess& router, const std::string& backend, double blocks) {
  return wait_until(
      [&] {
        return backend_metric(router, "kvtier_router_indexed_blocks", backend,
                              "medium=\"device\"") >= blocks;
      },
      10000ms);
}

TEST(RouterE2E, RequestsWithASharedPrefixGoToTheBackendWhoseEventsSayItHoldsIt) {
  EventDir dir;
  auto a = start_ready(backend_sets(dir, 0));
  auto b = start_ready(backend_sets(dir, 1));
  ASSERT_TRUE(a && b);
  auto router = start_router({url_of(*a), url_of(*b)});
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until(
      [&] { return in_rotation(*router, url_of(*a)) && in_rotation(*router, url_of(*b)); },
      10000ms));
  // B computes document x (sent to it directly); its events tell the router.
  const std::string x = seeded_document(640, 1);
  // A prefill of 640 tokens: the client waits as long as post_routed's (ThreadSanitizer on a
  // loaded machine takes more than the default 5 s).
  ASSERT_EQ(b->post("/v1/completions", {{"prompt", x + "\nQ1"}, {"max_tokens", 4}}, 60000ms).status,
            200);
  ASSERT_TRUE(indexed_on_device(*router, url_of(*b), 640 / 16));
  // With both idle, load alone would pick A (a tie goes to the first): the prefix picks B.
  const Routed hit = post_routed(*router, {{"prompt", x + "\nQ2"}, {"max_tokens", 4}});
  ASSERT_EQ(hit.status, 200) << hit.body;
  EXPECT_EQ(hit.backend, url_of(*b));
  EXPECT_GE(hit.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 624)
      << "B served the prefix from its cache";
  EXPECT_EQ(backend_metric(*router, "kvtier_router_routing_hits_total", url_of(*b)), 1);
  // And a document A holds goes to A.
  const std::string y = seeded_document(640, 2);
  ASSERT_EQ(a->post("/v1/completions", {{"prompt", y + "\nQ1"}, {"max_tokens", 4}}, 60000ms).status,
            200);
  ASSERT_TRUE(indexed_on_device(*router, url_of(*a), 640 / 16));
  const Routed other = post_routed(*router, {{"prompt", y + "\nQ2"}, {"max_tokens", 4}});
  ASSERT_EQ(other.status, 200);
  EXPECT_EQ(other.backend, url_of(*a));
  // The chat endpoint is keyed the same way (its template, then bytes).
  const Routed chat = post_routed(
      *router, {{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 4}},
      "/v1/chat/completions");
  EXPECT_EQ(chat.status, 200);
}

// The length of the streamed answer below: long enough that the backend is still generating
// when its first piece reaches the client (about a second in the plain build; ThreadSanitizer
// runs the model some 20 times slower, so fewer tokens last as long there).
#if defined(KVTIER_TSAN_BUILD)
constexpr int kStreamTokens = 500;
#else
constexpr int kStreamTokens = 2000;
#endif

TEST(RouterE2E, AStreamPassesThroughAsTheBackendProducesIt) {
  EventDir dir;
  auto a = start_ready(backend_sets(dir, 0));
  auto b = start_ready(backend_sets(dir, 1));
  ASSERT_TRUE(a && b);
  auto router = start_router({url_of(*a), url_of(*b)});
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until([&] { return router->get("/health").status == 200; }, 10000ms));
  const nlohmann::json body = {
      {"prompt", "stream me"}, {"max_tokens", kStreamTokens}, {"stream", true}};
  // When the first piece reaches the client, the backend is still generating the rest: the
  // router did not wait for the whole answer.
  std::optional<double> in_flight_at_first;
  const SseStream stream =
      router->stream("/v1/completions", body, 60000ms, [&](const SseEvent& event) {
        if (in_flight_at_first || event.json()["choices"][0].value("text", "").empty()) return;
        in_flight_at_first = metric(a->get("/metrics").body, "kvtier_requests_in_flight") +
                             metric(b->get("/metrics").body, "kvtier_requests_in_flight");
      });
  EXPECT_EQ(stream.status, 200);
  EXPECT_TRUE(stream.done) << stream.raw.substr(0, 500);
  EXPECT_FALSE(stream.error);
  ASSERT_TRUE(in_flight_at_first.has_value());
  EXPECT_EQ(*in_flight_at_first, 1);
  // The same text as the backend's own answer.
  const HttpReply direct =
      a->post("/v1/completions", {{"prompt", "stream me"}, {"max_tokens", kStreamTokens}}, 60000ms);
  ASSERT_EQ(direct.status, 200);
  EXPECT_EQ(stream.text(), direct.json()["choices"][0]["text"].get<std::string>());
}

TEST(RouterE2E, RequestsAreServedWhenABackendsEventStreamIsDown) {
  EventDir dir;
  // A publishes on sockets no router can reach any more (their files are gone); B publishes
  // nothing at all.
  auto a = start_ready(backend_sets(dir, 0));
  auto b = start_ready({"engine.stall_timeout_s=1"});
  ASSERT_TRUE(a && b);
  std::filesystem::remove(dir.path() / "events-0");
  std::filesystem::remove(dir.path() / "replay-0");
  auto router = start_router({url_of(*a), url_of(*b)});
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until(
      [&] { return in_rotation(*router, url_of(*a)) && in_rotation(*router, url_of(*b)); },
      10000ms));
  const std::string x = seeded_document(400, 3);
  const HttpReply direct =
      a->post("/v1/completions", {{"prompt", x + "\nQ"}, {"max_tokens", 6}}, 60000ms);
  ASSERT_EQ(direct.status, 200);
  for (int i = 0; i < 4; ++i) {
    const Routed r = post_routed(*router, {{"prompt", x + "\nQ"}, {"max_tokens", 6}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body["choices"][0]["text"], direct.json()["choices"][0]["text"]);
  }
  EXPECT_EQ(backend_metric(*router, "kvtier_router_event_batches_total", url_of(*a)), 0)
      << "A's events were unreachable";
}

// H3 on the backend (a stalled engine core: 503) takes it out of the router's rotation; a
// backend whose /health answers 200 again (here: started again on the same port) is back in.
// A scripted backend for what a real `kvtier serve` does only in a narrow window: a real HTTP
// server in this process, answering /kvtier/routing with `routing` (a real backend's, without
// KV events) and /health and completions as the test sets them.
class StubBackend {
 public:
  explicit StubBackend(nlohmann::json routing) {
    routing["publishers"] = nlohmann::json::array();
    http_.Get("/kvtier/routing", [routing](const httplib::Request&, httplib::Response& res) {
      res.set_content(routing.dump(), "application/json");
    });
  }
  ~StubBackend() {
    http_.stop();
    if (thread_.joinable()) thread_.join();
  }
  httplib::Server& http() { return http_; }
  std::string start() {
    const int port = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    return "http://127.0.0.1:" + std::to_string(port);
  }

 private:
  httplib::Server http_;
  std::thread thread_;
};

// H3: a backend whose engine refuses a request (503 engine_unavailable, as `kvtier serve`
// answers once its engine failed or while it stops, before /health says so) computed nothing:
// the request goes to the next backend, and the refusing one leaves the rotation until its
// /health says otherwise.
TEST(RouterE2E, H3_ARequestABackendsEngineRefusedGoesToTheNextBackend) {
  EventDir dir;
  auto b = start_ready(backend_sets(dir, 1));
  ASSERT_TRUE(b);
  StubBackend refusing(nlohmann::json::parse(b->get("/kvtier/routing").body));
  std::atomic<int> refused{0};
  refusing.http().Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  refusing.http().Post("/v1/completions", [&](const httplib::Request&, httplib::Response& res) {
    ++refused;
    res.status = 503;
    res.set_content(R"({"error":{"message":"engine core 0 failed","type":"engine_error",)"
                    R"("param":null,"code":"engine_unavailable"}})",
                    "application/json");
  });
  const std::string a_url = refusing.start();
  auto router = start_router({a_url, url_of(*b)}, "load");
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until(
      [&] { return in_rotation(*router, a_url) && in_rotation(*router, url_of(*b)); }, 10000ms));
  for (int i = 0; i < 4; ++i) {
    // Both idle: load alone picks the first, the refusing one, whenever it is back in rotation.
    const Routed r =
        post_routed(*router, {{"prompt", "refused " + std::to_string(i)}, {"max_tokens", 4}});
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.backend, url_of(*b));
  }
  EXPECT_GE(refused.load(), 1) << "the refusing backend was never tried";
  EXPECT_GE(backend_metric(*router, "kvtier_router_request_failures_total", a_url), 1);
}

// A backend whose /health answer never ends (a body trickling in) costs its own check a bounded
// time: the others' checks go on, so a backend that dies still leaves the rotation.
TEST(RouterE2E, H3_ABackendTricklingAnEndlessHealthAnswerHoldsUpNoOtherCheck) {
  EventDir dir;
  auto a = start_ready(backend_sets(dir, 0));
  auto b = start_ready(backend_sets(dir, 1));
  ASSERT_TRUE(a && b);
  StubBackend trickling(nlohmann::json::parse(b->get("/kvtier/routing").body));
  trickling.http().Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("application/json", [](size_t, httplib::DataSink& sink) {
      std::this_thread::sleep_for(100ms);  // a slow backend, not a race
      return sink.write(" ", 1);
    });
  });
  const std::string t_url = trickling.start();
  auto router = start_router({t_url, url_of(*a), url_of(*b)}, "load");
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until(
      [&] { return in_rotation(*router, url_of(*a)) && in_rotation(*router, url_of(*b)); },
      10000ms));
  EXPECT_FALSE(in_rotation(*router, t_url));
  const std::string a_url = url_of(*a);
  a.reset();
  EXPECT_TRUE(wait_until([&] { return !in_rotation(*router, a_url); }, 10000ms))
      << "A left the rotation";
  EXPECT_EQ(post_routed(*router, {{"prompt", "to B"}, {"max_tokens", 4}}).backend, url_of(*b));
}

// H5 through the router: a backend that fails in the middle of an SSE event (its connection
// breaks after part of a `data:` line) still gives the client an `error` event of its own, not
// one glued to the broken event.
TEST(RouterE2E, H5_ABackendFailingInsideAnEventGivesTheClientAnErrorEventOfItsOwn) {
  EventDir dir;
  auto b = start_ready(backend_sets(dir, 1));
  ASSERT_TRUE(b);
  StubBackend breaking(nlohmann::json::parse(b->get("/kvtier/routing").body));
  breaking.http().Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  breaking.http().Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
      const std::string part = R"(data: {"choices":[{"text":"ab)";
      sink.write(part.data(), part.size());
      return false;  // the connection breaks
    });
  });
  const std::string url = breaking.start();
  auto router = start_router({url});
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until([&] { return in_rotation(*router, url); }, 10000ms));
  const SseStream stream = router->stream(
      "/v1/completions", {{"prompt", "break"}, {"max_tokens", 4}, {"stream", true}}, 10000ms);
  EXPECT_EQ(stream.status, 200);
  EXPECT_TRUE(stream.error) << stream.raw;
  EXPECT_FALSE(stream.done) << stream.raw;
  ASSERT_FALSE(stream.events.empty()) << stream.raw;
  EXPECT_EQ(stream.events.back().event, "error") << stream.raw;
  EXPECT_EQ(stream.events.back().json()["error"]["code"], "backend_failed") << stream.raw;
}

// A backend that comes back into rotation (here a new process on the same port and event
// endpoints) is indexed afresh: nothing its old process held is routed to it.
TEST(RouterE2E, ABackendBackInRotationIsIndexedAfresh) {
  EventDir dir;
  auto a = start_ready(backend_sets(dir, 0));
  auto b = start_ready(backend_sets(dir, 1));
  ASSERT_TRUE(a && b);
  const std::string a_url = url_of(*a);
  const int a_port = a->port();
  auto router = start_router({a_url, url_of(*b)});
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until([&] { return in_rotation(*router, a_url); }, 10000ms));
  ASSERT_EQ(a->post("/v1/completions",
                    {{"prompt", seeded_document(640, 3) + "\nQ1"}, {"max_tokens", 4}}, 60000ms)
                .status,
            200);
  ASSERT_TRUE(indexed_on_device(*router, a_url, 640 / 16));
  a.reset();
  ASSERT_TRUE(wait_until([&] { return !in_rotation(*router, a_url); }, 10000ms));
  auto a2 = start_ready(backend_sets(dir, 0, {"engine.port=" + std::to_string(a_port)}));
  ASSERT_TRUE(a2);
  ASSERT_TRUE(wait_until([&] { return in_rotation(*router, a_url); }, 10000ms));
  EXPECT_TRUE(wait_until(
      [&] { return backend_metric(*router, "kvtier_router_indexed_blocks", a_url) == 0; }, 5000ms))
      << "still indexed: " << backend_metric(*router, "kvtier_router_indexed_blocks", a_url)
      << " blocks";
}

TEST(RouterE2E, H3_ABackendAnswering503LeavesTheRotationAndReturnsAt200) {
  EventDir dir;
  auto a = start_ready(backend_sets(dir, 0));
  auto b = start_ready(backend_sets(dir, 1));
  ASSERT_TRUE(a && b);
  const std::string a_url = url_of(*a);
  const std::string b_url = url_of(*b);
  const int a_port = a->port();
  auto router = start_router({a_url, b_url});
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until([&] { return in_rotation(*router, a_url) && in_rotation(*router, b_url); },
                         10000ms));
  const pid_t a_core = find_process(a->pid(), {"engine-core", "0"}).value_or(-1);
  ASSERT_GT(a_core, 0);
  send_signal(a_core, SIGSTOP);
  ASSERT_TRUE(wait_until([&] { return a->get("/health", 1000ms).status == 503; }, 5000ms));
  ASSERT_TRUE(wait_until([&] { return !in_rotation(*router, a_url); }, 5000ms));
  EXPECT_EQ(router->get("/health").status, 200) << "B still serves";
  for (int i = 0; i < 4; ++i) {
    const Routed r =
        post_routed(*router, {{"prompt", "skip A " + std::to_string(i)}, {"max_tokens", 4}});
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.backend, b_url);
  }
  // A's failure stays (H2): a new A on the same port is healthy.
  send_signal(a_core, SIGCONT);
  a.reset();
  auto a2 = start_ready(backend_sets(dir, 0, {"engine.port=" + std::to_string(a_port)}));
  ASSERT_TRUE(a2);
  ASSERT_EQ(url_of(*a2), a_url);
  ASSERT_TRUE(wait_until([&] { return in_rotation(*router, a_url); }, 10000ms));
  // With B out in turn, A serves.
  const pid_t b_core = find_process(b->pid(), {"engine-core", "0"}).value_or(-1);
  ASSERT_GT(b_core, 0);
  send_signal(b_core, SIGSTOP);
  ASSERT_TRUE(wait_until([&] { return !in_rotation(*router, b_url); }, 5000ms));
  const Routed r = post_routed(*router, {{"prompt", "back to A"}, {"max_tokens", 4}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.backend, a_url);
  send_signal(b_core, SIGCONT);
}

// A port nothing listens on (bound, then closed).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(RouterE2E, H1_RouterHealthIs503UntilABackendIsInRotation) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  auto router = start_router({"http://127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(router);
  const HttpReply health = router->get("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.json()["reason"], "no backend in rotation (none answers /health 200)");
  const Routed refused = post_routed(*router, {{"prompt", "hello"}, {"max_tokens", 4}});
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.body["error"]["code"], "no_backend") << refused.body;
  EXPECT_EQ(router->post("/v1/completions", nlohmann::json("not an object")).status, 400);
  EventDir dir;
  auto backend = start_ready(backend_sets(dir, 0, {"engine.port=" + std::to_string(port)}));
  ASSERT_TRUE(backend);
  EXPECT_TRUE(wait_until([&] { return router->get("/health").status == 200; }, 10000ms));
  EXPECT_EQ(post_routed(*router, {{"prompt", "hello"}, {"max_tokens", 4}}).status, 200);
}

TEST(RouterE2E, BadInputGetsA4xxAndAClientThatHangsUpEndsItsBackendRequest) {
  EventDir dir;
  auto backend = start_ready(backend_sets(dir, 0));
  ASSERT_TRUE(backend);
  auto router = start_router({url_of(*backend)});
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until([&] { return router->get("/health").status == 200; }, 10000ms));
  EXPECT_EQ(router->post("/v1/completions", nlohmann::json::array()).status, 400);
  EXPECT_EQ(http_post(router->host(), router->port(), "/v1/completions", "{garbage").status, 400);
  const HttpReply not_string = router->post("/v1/completions", {{"prompt", 3}});
  EXPECT_EQ(not_string.status, 400);
  EXPECT_EQ(not_string.json()["error"]["param"], "prompt");
  EXPECT_EQ(router->post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 0}}).status, 400);
  EXPECT_EQ(router->post("/v1/completions", {{"prompt", "x"}, {"model", "nope"}}).status, 404);
  EXPECT_EQ(router->post("/v1/chat/completions", {{"messages", 1}}).status, 400);
  EXPECT_EQ(router->get("/nowhere").status, 404);
  // A client that hangs up early in a long stream (16,000 tokens: some 10 s): the backend's
  // request ends.
  bool hung_up = false;
  (void)router->stream("/v1/completions",
                       {{"prompt", "hang up"}, {"max_tokens", 16000}, {"stream", true}}, 500ms,
                       [&](const SseEvent&) { hung_up = true; });
  ASSERT_TRUE(hung_up);
  EXPECT_TRUE(wait_until(
      [&] { return metric(backend->get("/metrics").body, "kvtier_requests_in_flight") == 0; },
      5000ms))
      << "the backend's request was aborted";
  // And one that hangs up on a whole answer it waits for (nothing comes from the backend until
  // the end): the router notices the closed connection, not only a failed write.
  const HttpReply gave_up =
      router->post("/v1/completions", {{"prompt", "hang up"}, {"max_tokens", 16000}}, 500ms);
  EXPECT_EQ(gave_up.status, 0) << gave_up.body;
  EXPECT_TRUE(wait_until(
      [&] { return metric(backend->get("/metrics").body, "kvtier_requests_in_flight") == 0; },
      5000ms))
      << "the backend's request was aborted";
  EXPECT_EQ(router->get("/health").status, 200);
  EXPECT_EQ(post_routed(*router, {{"prompt", "still here"}, {"max_tokens", 4}}).status, 200);
  // SIGTERM: the router stops and exits 0.
  router->signal(SIGTERM);
  const std::optional<int> status = router->wait_exit(5000ms);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
}

}  // namespace
}  // namespace kvtier::test
