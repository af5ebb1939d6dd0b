// `kvtier serve` under device-memory pressure and with a scheduler that cannot progress (H8):
// real frontend, engine cores and worker processes over HTTP. Every wait has a deadline.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <mutex>
#include <thread>

#include "engine/serve_rig.h"

namespace kvtier::test {
namespace {

// A document of `n` characters; different seeds give different documents.
std::string document(size_t n, int seed) {
  std::string s;
  uint64_t x = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s.push_back(static_cast<char>('a' + x % 26));
  }
  return s;
}

// The length of the shared documents below, and how many requests a scenario sends at most.
// Under ThreadSanitizer the workers' model math runs some 20 times slower (one 2,500-token
// prefill took 25 s there): the scenarios' full instances took 167, 671 and 357 s under it (7.8,
// 20.5 and 12.6 s in the plain build), past ctest's 120 s, and in the second the last of 40
// requests had no answer within the client's 120 s. A bound on speed, not on correctness: so
// ThreadSanitizer runs them on documents and a device scaled down alike (device_blocks below)
// and 8 requests, one per client (28, 42 and 49 s there on a loaded machine). That keeps what
// it needs to see: the frontend and the engine core under 8 requests in flight at once on a
// device that holds little more than one of them.
#if defined(KVTIER_TSAN_BUILD)
constexpr size_t kDocumentChars = 640;
constexpr size_t kMaxRequests = 8;
#else
constexpr size_t kDocumentChars = 2500;
constexpr size_t kMaxRequests = SIZE_MAX;
#endif

// `count` prompts: one of `documents` documents of kDocumentChars and a short unique question.
std::vector<std::string> shared_prefix_prompts(size_t count, int documents) {
  std::vector<std::string> prompts;
  for (size_t i = 0; i < count; ++i) {
    prompts.push_back(document(kDocumentChars, static_cast<int>(i) % documents) + "\nQ" +
                      std::to_string(i) + ": what follows?");
  }
  return prompts;
}

struct Outcome {
  std::vector<std::string> texts;
  std::vector<int> statuses;
  bool always_healthy = true;
  std::string health_seen;
};

// Sends every prompt, `concurrency` at a time (max_tokens 12), and watches /health meanwhile.
Outcome run_concurrently(const ServeProcess& serve, const std::vector<std::string>& prompts,
                         size_t concurrency) {
  Outcome out;
  out.texts.resize(prompts.size());
  out.statuses.resize(prompts.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> finished{0};
  std::vector<std::thread> clients;
  for (size_t c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (size_t i = next++; i < prompts.size(); i = next++) {
        const HttpReply r =
            serve.post("/v1/completions", {{"prompt", prompts[i]}, {"max_tokens", 12}}, 120000ms);
        out.statuses[i] = r.status;
        out.texts[i] = r.status == 200 ? r.json()["choices"][0]["text"].get<std::string>() : r.body;
        ++finished;
      }
    });
  }
  while (finished < prompts.size()) {
    const HttpReply health = serve.get("/health");
    if (health.status != 200) {
      out.always_healthy = false;
      out.health_seen = health.body;
    }
    std::this_thread::sleep_for(50ms);  // polling pace
  }
  for (std::thread& t : clients) t.join();
  return out;
}

struct PressureCase {
  uint32_t world_size;
  uint32_t device_blocks;
  size_t requests;
  int documents;
  bool offload;  // connector.enabled
};

class ServeUnderMemoryPressure : public ::testing::TestWithParam<PressureCase> {};

// Both reported scenarios: a request spun forever (world size 1, 192 blocks: about one and a
// half requests), and a step scheduled a request with no blocks, killing every worker (world
// size 2, 512 blocks, six shared prefixes).
TEST_P(ServeUnderMemoryPressure, H8_EveryRequestCompletesWithTheOutputOfAnAmpleDevice) {
#if defined(KVTIER_SANITIZED) && !defined(KVTIER_TSAN_BUILD)
  // Hundreds of 2,500-token prefills take minutes in a Debug build under ASan; the scheduler's
  // memory safety under pressure is checked there by EngineScheduler.H8_Randomized….
  GTEST_SKIP() << "too slow under AddressSanitizer";
#endif
  const PressureCase p = GetParam();
  const std::vector<std::string> prompts =
      shared_prefix_prompts(std::min(p.requests, kMaxRequests), p.documents);
  const std::string ws = "engine.world_size=" + std::to_string(p.world_size);
  // A step of 8 long prefills may take seconds on a slow (sanitized, shared) machine: H6's stall
  // timeout is not what this test is about.
  const std::string stall = "engine.stall_timeout_s=60";
  std::vector<std::string> reference;
  {
    auto ample = start_ready({ws, stall});
    ASSERT_TRUE(ample);
    const Outcome r = run_concurrently(*ample, prompts, 8);
    for (size_t i = 0; i < prompts.size(); ++i) ASSERT_EQ(r.statuses[i], 200) << r.texts[i];
    reference = r.texts;
  }
  const size_t device_blocks = p.device_blocks * kDocumentChars / 2500;  // as documents scale
  auto small = start_ready({ws, stall, "engine.device_blocks=" + std::to_string(device_blocks),
                            "engine.progress_timeout_s=60",
                            std::string("connector.enabled=") + (p.offload ? "true" : "false")});
  ASSERT_TRUE(small);
  const Outcome r = run_concurrently(*small, prompts, 8);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(r.statuses[i], 200) << "request " << i << ": " << r.texts[i];
    EXPECT_EQ(r.texts[i], reference[i]) << "request " << i;
  }
  EXPECT_TRUE(r.always_healthy) << r.health_seen;
  EXPECT_EQ(small->get("/health").status, 200);
  // How hard the device was pressed depends on arrival timing; the seeded in-process test
  // (EngineScheduler.H8_Randomized…) is the deterministic reproduction.
  std::cout << "preemptions: "
            << metric(small->get("/metrics").body, "kvtier_core_preemptions_total") << "\n";
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ServeUnderMemoryPressure,
                         ::testing::Values(PressureCase{1, 192, 40, 3, true},
                                           PressureCase{1, 192, 40, 3, false},
                                           PressureCase{2, 512, 120, 6, true}),
                         [](const auto& info) {
                           return "WorldSize" + std::to_string(info.param.world_size) + "Blocks" +
                                  std::to_string(info.param.device_blocks) +
                                  (info.param.offload ? "Kvtier" : "NoOffload");
                         });

TEST(ServeLiveness, H8_SpinningSchedulerTurnsHealth503AndEndsTheStuckRequest) {
  auto serve = start_ready({"faults.stall_scheduler=true", "engine.progress_timeout_s=1"});
  ASSERT_TRUE(serve);
  std::optional<TestClock::time_point> first_token;
  std::optional<TestClock::time_point> unhealthy;
  int health_half_way = 0;
  std::thread watcher;
  const SseStream stream =
      serve->stream("/v1/completions", {{"prompt", "spin"}, {"max_tokens", 8}, {"stream", true}},
                    10000ms, [&](const SseEvent& e) {
                      if (first_token || e.event == "error") return;
                      first_token = TestClock::now();
                      watcher = std::thread([&] {
                        wait_until(
                            [&] {
                              if (!health_half_way && TestClock::now() - *first_token > 500ms) {
                                health_half_way = serve->get("/health").status;
                              }
                              if (serve->get("/health").status != 503) return false;
                              unhealthy = TestClock::now();
                              return true;
                            },
                            5000ms);
                      });
                    });
  if (watcher.joinable()) watcher.join();
  ASSERT_TRUE(first_token) << stream.raw;
  // The request ends with an error naming the rule, instead of hanging.
  EXPECT_TRUE(stream.error) << stream.raw;
  EXPECT_FALSE(stream.timed_out);
  EXPECT_NE(stream.raw.find("no progress (H8)"), std::string::npos) << stream.raw;
  EXPECT_EQ(health_half_way, 200) << "not before progress_timeout_s";
  ASSERT_TRUE(unhealthy) << "/health never turned 503";
  EXPECT_LT(*unhealthy - *first_token, 2000ms) << "within progress_timeout_s + 1 s";
  const HttpReply health = serve->get("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_NE(health.body.find("no progress (H8): request r0"), std::string::npos) << health.body;
}

// A load whose copies never complete, computed in the step it starts (connector.load_in_step,
// the default): the worker's forward pass waits for the load (F10), so the step never ends and
// no worker reports the job's verdict. Its deadline (F8) must still fail the engine core, at
// transfer_deadline_s + completion_margin_s, instead of leaving /health at 200 and the request
// waiting for its request_timeout_s (600 s).
TEST(ServeLiveness, F8_ALoadThatNeverCompletesFailsTheCoreAtItsDeadline) {
  auto serve = start_ready({"engine.device_blocks=40", "cache.host_bytes=64MiB",
                            "faults.hang_rate=1", "faults.direction=load",
                            "transfer.transfer_deadline_s=1", "transfer.completion_margin_s=0.5"});
  ASSERT_TRUE(serve);
  // A, then B and C that push A out of the small device: A's chunks are in the host cache only.
  const std::string a = document(400, 1);
  for (const std::string& p : {a, document(400, 2), document(400, 3)}) {
    const HttpReply r = serve->post("/v1/completions", {{"prompt", p}, {"max_tokens", 4}}, 60000ms);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  ASSERT_EQ(serve->get("/health").status, 200);
  const auto sent = TestClock::now();
  const HttpReply again =
      serve->post("/v1/completions", {{"prompt", a + "\nagain"}, {"max_tokens", 4}}, 30000ms);
  const auto answered = TestClock::now();
  EXPECT_EQ(again.status, 503) << again.body;
  EXPECT_NE(again.body.find("fail-stop (F8)"), std::string::npos) << again.body;
  EXPECT_LT(answered - sent, 10000ms) << "ended by the job's deadline, not the request's";
  const HttpReply health = serve->get("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_NE(health.body.find("fail-stop (F8)"), std::string::npos) << health.body;
}

TEST(ServeLiveness, H8_RequestThatCanNeverFitTheDeviceIsRejectedWith400) {
  // 8 blocks of 16 tokens: a request's prompt + max_tokens may be 129 at most.
  auto serve = start_ready({"engine.device_blocks=8"});
  ASSERT_TRUE(serve);
  const HttpReply long_prompt = serve->post("/v1/completions", {{"prompt", prompt_text(200, 1)}});
  EXPECT_EQ(long_prompt.status, 400) << long_prompt.body;
  EXPECT_EQ(long_prompt.json()["error"]["param"], "prompt");
  EXPECT_NE(long_prompt.body.find("engine.device_blocks"), std::string::npos) << long_prompt.body;
  const HttpReply too_many = serve->post(
      "/v1/completions", {{"prompt", prompt_text(100, 1)}, {"max_tokens", 40}, {"stream", true}});
  EXPECT_EQ(too_many.status, 400) << too_many.body;
  EXPECT_EQ(too_many.json()["error"]["param"], "max_tokens");
  // The default length is cut to what fits; what fits runs.
  const HttpReply fits = serve->post("/v1/completions", {{"prompt", prompt_text(100, 1)}}, 30000ms);
  ASSERT_EQ(fits.status, 200) << fits.body;
  EXPECT_EQ(fits.json()["usage"]["completion_tokens"], 29);
  EXPECT_EQ(serve->get("/health").status, 200);
}

TEST(ServeLiveness, H8_RequestPastItsDeadlineEndsWith504) {
  auto serve = start_ready({"faults.stall_scheduler=true", "engine.request_timeout_s=1"});
  ASSERT_TRUE(serve);
  const auto sent = TestClock::now();
  const HttpReply r =
      serve->post("/v1/completions", {{"prompt", "stuck"}, {"max_tokens", 4}}, 10000ms);
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_EQ(r.json()["error"]["code"], "request_timeout") << r.body;
  EXPECT_LT(TestClock::now() - sent, 3000ms);
  EXPECT_TRUE(wait_until(
      [&] { return metric(serve->get("/metrics").body, "kvtier_core_requests_running") == 0; },
      5000ms))
      << "the core still runs the request";
}

TEST(ServeLiveness, H8_ClientThatHangsUpEndsItsNonStreamingRequest) {
  auto serve = start_ready({"faults.stall_scheduler=true"});
  ASSERT_TRUE(serve);
  // The client gives up after 1 s and closes its connection.
  const HttpReply gave_up =
      serve->post("/v1/completions", {{"prompt", "abandoned"}, {"max_tokens", 4}}, 1000ms);
  EXPECT_EQ(gave_up.status, 0);
  EXPECT_TRUE(wait_until(
      [&] {
        const std::string m = serve->get("/metrics").body;
        return metric(m, "kvtier_requests_in_flight") == 0 &&
               metric(m, "kvtier_core_requests_running") == 0;
      },
      3000ms))
      << serve->get("/metrics").body;
  EXPECT_EQ(serve->get("/health").status, 200);
}

// The same while the request yields tokens steadily (16,000 of them: some 10 s), so that the
// frontend's waits for them never time out: it still notices the client that hung up.
TEST(ServeLiveness, H8_ClientThatHangsUpWhileTokensFlowEndsItsNonStreamingRequest) {
  auto serve = start_ready({});
  ASSERT_TRUE(serve);
  const HttpReply gave_up =
      serve->post("/v1/completions", {{"prompt", "abandoned"}, {"max_tokens", 16000}}, 500ms);
  EXPECT_EQ(gave_up.status, 0);
  EXPECT_TRUE(wait_until(
      [&] { return metric(serve->get("/metrics").body, "kvtier_requests_in_flight") == 0; },
      3000ms))
      << serve->get("/metrics").body;
}

}  // namespace
}  // namespace kvtier::test
