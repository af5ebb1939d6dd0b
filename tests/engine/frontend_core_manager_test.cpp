// CoreManager + FrontendServer against the scripted fake core (fake_core.cpp): routing of
// outputs, the HTTP API end to end, and the health rules the frontend enforces. Each wait polls
// observable state with a deadline.
#include <gtest/gtest.h>
#include <signal.h>

#include "engine/frontend_rig.h"
#include "kvtier/engine/byte_vocab.h"

namespace kvtier::test {
namespace {

// The fake core's answer: token i is 'a' + (prompt size + i) % 26.
std::string fake_text(size_t prompt_size, size_t tokens) {
  std::string text;
  for (size_t i = 0; i < tokens; ++i) text += static_cast<char>('a' + (prompt_size + i) % 26);
  return text;
}

nlohmann::json completion(const std::string& prompt, int max_tokens = 6, bool stream = false) {
  return {
      {"model", "kvtier-tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", stream}};
}

std::string health_reason(const FrontendRig& rig) {
  const nlohmann::json body = rig.get("/health").json();
  return body.is_object() ? body.value("reason", "") : "";
}

TEST(FrontendCoreManager, CompletionEndToEnd) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  const HttpReply reply = rig.post("/v1/completions", completion("hello", 7));
  ASSERT_EQ(reply.status, 200) << reply.body;
  const nlohmann::json body = reply.json();
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "kvtier-tiny");
  EXPECT_EQ(body["choices"][0]["text"], fake_text(5, 7));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["completion_tokens"], 7);
  EXPECT_EQ(body["usage"]["total_tokens"], 12);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  const std::string metrics = rig.get("/metrics").body;
  EXPECT_NE(metrics.find("\nkvtier_requests_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nkvtier_generation_tokens_total 7\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nkvtier_prompt_tokens_total 5\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nkvtier_cached_prompt_tokens_total 2\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nkvtier_requests_in_flight 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kvtier_core_requests{core=\"0\"}"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\n# TYPE kvtier_core_requests counter\n"), std::string::npos)
      << "the kind the core's heartbeat names\n"
      << metrics;
}

TEST(FrontendCoreManager, ChatEndToEnd) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  const nlohmann::json messages = {{{"role", "user"}, {"content", "hi"}}};
  const HttpReply reply =
      rig.post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 4}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const size_t prompt_size = std::string("<|user|>\nhi\n<|assistant|>\n").size();
  EXPECT_EQ(reply.json()["choices"][0]["message"]["content"], fake_text(prompt_size, 4));
  EXPECT_EQ(reply.json()["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(reply.json()["usage"]["prompt_tokens"], prompt_size);
}

TEST(FrontendCoreManager, CompletionStream) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  const SseStream stream = rig.stream("/v1/completions", completion("stream me", 5, true));
  EXPECT_EQ(stream.status, 200);
  EXPECT_TRUE(stream.done) << stream.raw;
  EXPECT_FALSE(stream.error);
  EXPECT_EQ(stream.text(), fake_text(9, 5));
  // Three chunks of text (2 + 2 + 1 tokens), then the final chunk with the finish reason; no
  // usage, which the request did not ask for.
  ASSERT_EQ(stream.events.size(), 4u) << stream.raw;
  const nlohmann::json last = stream.events.back().json();
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(last.contains("usage")) << stream.raw;
}

// stream_options.include_usage, as OpenAI's clients (and vLLM's benchmark) read it: after the
// finish_reason's chunk, one with the usage and an empty `choices`, then [DONE].
TEST(FrontendCoreManager, CompletionStreamWithUsage) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  nlohmann::json request = completion("stream me", 5, true);
  request["stream_options"] = {{"include_usage", true}};
  const SseStream stream = rig.stream("/v1/completions", request);
  EXPECT_TRUE(stream.done) << stream.raw;
  EXPECT_EQ(stream.text(), fake_text(9, 5));
  ASSERT_EQ(stream.events.size(), 5u) << stream.raw;
  EXPECT_EQ(stream.events[3].json()["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(stream.events[3].json().contains("usage"));
  const nlohmann::json usage = stream.events.back().json();
  EXPECT_EQ(usage["choices"], nlohmann::json::array());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 5);
}

TEST(FrontendCoreManager, ChatStream) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  const nlohmann::json request = {
      {"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 3}, {"stream", true}};
  const SseStream stream = rig.stream("/v1/chat/completions", request);
  EXPECT_TRUE(stream.done) << stream.raw;
  ASSERT_FALSE(stream.events.empty());
  EXPECT_EQ(stream.events.front().json()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(stream.events.front().json()["object"], "chat.completion.chunk");
  const size_t prompt_size = std::string("<|user|>\nx\n<|assistant|>\n").size();
  EXPECT_EQ(stream.text(), fake_text(prompt_size, 3));
}

TEST(FrontendCoreManager, ModelsAndUnknownRoutes) {
  FrontendRig rig;
  const HttpReply models = rig.get("/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["data"][0]["id"], "kvtier-tiny");
  const HttpReply missing = rig.get("/v2/nothing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(missing.json().contains("error")) << missing.body;
}

TEST(FrontendCoreManager, BadRequestsGet400AndTheServerLivesOn) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  const HttpReply not_json = rig.post_raw("/v1/completions", "{\"prompt\": ");
  EXPECT_EQ(not_json.status, 400);
  EXPECT_EQ(not_json.json()["error"]["type"], "invalid_request_error");
  const HttpReply ill_typed =
      rig.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", "many"}});
  EXPECT_EQ(ill_typed.status, 400);
  EXPECT_EQ(ill_typed.json()["error"]["param"], "max_tokens");
  const HttpReply too_long = rig.post("/v1/completions", {{"prompt", std::string(300, 'x')}});
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.json()["error"]["param"], "prompt");
  const HttpReply bad_chat = rig.post("/v1/chat/completions", {{"messages", "hi"}});
  EXPECT_EQ(bad_chat.status, 400);
  EXPECT_EQ(bad_chat.json()["error"]["param"], "messages");
  EXPECT_EQ(rig.post("/v1/completions", completion("still here")).status, 200);
}

TEST(FrontendCoreManager, MalformedCoreMessagesAreIgnored) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  const HttpReply reply = rig.post("/v1/completions", completion("#garbage", 4));
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["choices"][0]["text"], fake_text(8, 4));
  EXPECT_EQ(rig.get("/health").status, 200);
}

TEST(FrontendCoreManager, CoreErrorEndsTheRequestWith503) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  const HttpReply reply = rig.post("/v1/completions", completion("#err"));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.json()["error"]["message"], "scripted error");
  EXPECT_EQ(rig.get("/health").status, 200);  // one request's error is not the engine's
}

TEST(FrontendCoreManager, LeastLoadedCoreGetsTheRequest) {
  FrontendRig rig({.cores = 2});
  ASSERT_TRUE(rig.health_becomes("ok"));
  auto first = rig.manager->submit(tokenize("#hang 1"), 4);
  auto second = rig.manager->submit(tokenize("#hang 2"), 4);
  ASSERT_TRUE(first && second);
  // Each core reports one request received.
  EXPECT_TRUE(wait_until(
      [&] {
        const std::string m = rig.get("/metrics").body;
        return m.find("kvtier_core_requests{core=\"0\"} 1\n") != std::string::npos &&
               m.find("kvtier_core_requests{core=\"1\"} 1\n") != std::string::npos;
      },
      5000ms))
      << rig.get("/metrics").body;
  rig.manager->abort((*first)->id());
  EXPECT_TRUE(wait_until(
      [&] {
        return rig.get("/metrics").body.find("kvtier_core_aborts{core=\"0\"} 1\n") !=
               std::string::npos;
      },
      5000ms));
}

TEST(FrontendCoreManager, StartingUntilHelloAndRequestsRefused) {
  FrontendRig rig({.fake_core_switches = {"--no-hello"}});
  const HttpReply health = rig.get("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.json()["status"], "starting");
  EXPECT_EQ(rig.post("/v1/completions", completion("x")).status, 503);
}

TEST(FrontendCoreManager, H2_FailedCoreStaysFailedWhileItKeepsHeartbeating) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  const HttpReply reply = rig.post("/v1/completions", completion("#fail"));
  EXPECT_EQ(reply.status, 503);
  EXPECT_NE(reply.json()["error"]["message"].get<std::string>().find("scripted failure"),
            std::string::npos)
      << reply.body;
  const HttpReply health = rig.get("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.json()["status"], "failed");
  EXPECT_EQ(health.json()["reason"], "engine core 0 failed: scripted failure");
  // The fake core goes on heartbeating: wait until the frontend has seen ten more, and the
  // failure is still there (sticky).
  auto heartbeats = [&] { return rig.manager->metrics().core_counters[0].at("heartbeats"); };
  const double seen = heartbeats();
  ASSERT_TRUE(wait_until([&] { return heartbeats() >= seen + 10; }, 5000ms));
  EXPECT_EQ(rig.get("/health").json()["status"], "failed");
  EXPECT_EQ(rig.post("/v1/completions", completion("x")).status, 503);
  EXPECT_NE(rig.get("/metrics").body.find("\nkvtier_engine_healthy 0\n"), std::string::npos);
}

TEST(FrontendCoreManager, H3_KilledCoreIs503NamingTheSignal) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  // The core's command line names its role (serve_process.h finds processes by role).
  const std::optional<pid_t> core = find_process(getpid(), {"engine-core", "0"});
  ASSERT_EQ(core, rig.manager->core_pid(0));
  send_signal(*core, SIGKILL);
  ASSERT_TRUE(rig.health_becomes("failed", 1000ms));
  EXPECT_EQ(rig.get("/health").status, 503);
  EXPECT_EQ(health_reason(rig), "engine core 0 killed by signal 9 (Killed)");
}

TEST(FrontendCoreManager, H3_ExitedCoreIs503) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  const HttpReply reply = rig.post("/v1/completions", completion("#exit"));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(health_reason(rig), "engine core 0 exited with status 3");
}

TEST(FrontendCoreManager, H5_StreamInFlightEndsWithAnErrorEventWhenTheCoreDies) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  // The request hangs in the core; once the frontend counts it in flight, kill the core.
  std::thread killer([&] {
    if (wait_until([&] { return rig.manager->metrics().requests_in_flight == 1; }, 5000ms)) {
      send_signal(rig.manager->core_pid(0), SIGKILL);
    }
  });
  const auto start = TestClock::now();
  const SseStream stream = rig.stream("/v1/completions", completion("#hang", 6, true));
  const auto took = TestClock::now() - start;
  killer.join();
  EXPECT_EQ(stream.status, 200);
  EXPECT_TRUE(stream.error) << stream.raw;
  EXPECT_FALSE(stream.done);
  EXPECT_FALSE(stream.timed_out);
  ASSERT_FALSE(stream.events.empty());
  const nlohmann::json error = stream.events.back().json();
  EXPECT_NE(error["error"]["message"].get<std::string>().find("engine core 0 killed"),
            std::string::npos)
      << stream.raw;
  EXPECT_LT(took, 2000ms);
}

TEST(FrontendCoreManager, H5_RequestInFlightEndsWith503WhenTheCoreFails) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  // A request hangs in the core; once it is in flight, another request makes the core fail.
  HttpReply failing;
  std::thread failer([&] {
    if (wait_until([&] { return rig.manager->metrics().requests_in_flight == 1; }, 5000ms)) {
      failing = rig.post("/v1/completions", completion("#fail"));
    }
  });
  const auto start = TestClock::now();
  const HttpReply hanging = rig.post("/v1/completions", completion("#hang"));
  const auto took = TestClock::now() - start;
  failer.join();
  EXPECT_EQ(hanging.status, 503) << hanging.body;
  EXPECT_EQ(hanging.json()["error"]["message"], "engine core 0 failed: scripted failure");
  EXPECT_EQ(failing.status, 503);
  EXPECT_LT(took, 2000ms);
  EXPECT_EQ(rig.manager->metrics().requests_in_flight, 0u);
}

TEST(FrontendCoreManager, H6_SilentCoreIsStalledAndItsRequestsEnd) {
  FrontendRig rig({.stall_timeout_s = 0.3});
  ASSERT_TRUE(rig.health_becomes("ok"));
  const auto start = TestClock::now();
  const HttpReply reply = rig.post("/v1/completions", completion("#stall"));
  const auto took = TestClock::now() - start;
  EXPECT_EQ(reply.status, 503);
  EXPECT_NE(reply.json()["error"]["message"].get<std::string>().find("engine core 0 stalled"),
            std::string::npos)
      << reply.body;
  EXPECT_LT(took, 300ms + 1000ms);
  const HttpReply health = rig.get("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.json()["status"], "stalled");
}

TEST(FrontendCoreManager, H7_DegradedCoreAnswers200AndNamesIt) {
  FrontendRig rig({.fake_core_switches = {"--degraded", "host tier"}});
  ASSERT_TRUE(rig.health_becomes("degraded"));
  HttpReply health = rig.get("/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json()["degraded"], nlohmann::json({"host tier"}));
  EXPECT_EQ(rig.post("/v1/completions", completion("#degraded")).status, 200);
  ASSERT_TRUE(
      wait_until([&] { return rig.get("/health").json()["degraded"].size() == 2; }, 5000ms));
  EXPECT_EQ(rig.post("/v1/completions", completion("#recover")).status, 200);
  EXPECT_TRUE(rig.health_becomes("ok"));
}

TEST(FrontendCoreManager, H3_ShutdownTurnsHealthClosedAndEndsStreams) {
  FrontendRig rig;
  ASSERT_TRUE(rig.health_becomes("ok"));
  std::thread closer([&] {
    if (wait_until([&] { return rig.manager->metrics().requests_in_flight == 1; }, 5000ms)) {
      rig.manager->shutdown();
    }
  });
  const SseStream stream = rig.stream("/v1/completions", completion("#hang", 4, true));
  closer.join();
  EXPECT_TRUE(stream.error) << stream.raw;
  const HttpReply health = rig.get("/health");
  ASSERT_EQ(health.status, 503);  // fatal: a request accepted after shutdown would never end
  EXPECT_EQ(health.json()["status"], "closed");
  EXPECT_EQ(rig.post("/v1/completions", completion("x")).status, 503);
  // Shutdown removed the run dir.
  EXPECT_FALSE(std::filesystem::exists(rig.run_dir));
}

}  // namespace
}  // namespace kvtier::test
