// `kvtier serve` as a real process: flags, the re-exec as `kvtier frontend`, the port line,
// graceful shutdown. Until the engine-core role exists its cores exit at once, so /health may
// say "failed"; these tests check what the frontend owns either way.
#include <gtest/gtest.h>

#include <cstdio>

#include "engine/serve_process.h"

namespace kvtier::test {
namespace {

// Runs a shell command, returns its stdout+stderr and exit status.
std::pair<std::string, int> run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {"", -1};
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(FrontendServeProcess, ServeReexecsAsFrontendPrintsItsPortAndClosesOnSigterm) {
  // The environment says one model name, --set another: the frontend serves the --set one
  // (the resolved configuration is not overlaid with KVTIER_* again after the re-exec).
  setenv("KVTIER_ENGINE_MODEL_NAME", "from-env", 1);
  auto serve = ServeProcess::start(
      {KVTIER_EXE, "serve", "--set", "engine.port=0", "--set", "engine.model_name=from-set"});
  unsetenv("KVTIER_ENGINE_MODEL_NAME");
  ASSERT_TRUE(serve.has_value());
  EXPECT_EQ(serve->model(), "from-set");
  EXPECT_GT(serve->port(), 0);
  const std::vector<std::string> argv = command_line_of(serve->pid());
  ASSERT_GE(argv.size(), 6u);
  EXPECT_EQ(argv[1], "frontend");
  EXPECT_EQ(argv[2], "--run-dir");
  const std::filesystem::path run_dir = argv[3];
  EXPECT_TRUE(std::filesystem::exists(run_dir / "config.yaml"));
  const HttpReply models = serve->get("/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["data"][0]["id"], "from-set");
  const nlohmann::json health = serve->get("/health").json();
  ASSERT_TRUE(health.is_object());
  EXPECT_TRUE(health.contains("status"));
  serve->signal(SIGTERM);
  const std::optional<int> status = serve->wait_exit(10000ms);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_FALSE(std::filesystem::exists(run_dir));
}

TEST(FrontendServeProcess, ServeRejectsAModelThatTheWorldSizeCannotSplit) {
  const auto [output, status] = run_command(std::string(KVTIER_EXE) + " serve --world-size 3");
  EXPECT_EQ(status, 2) << output;
  EXPECT_NE(output.find("model.kv_heads"), std::string::npos) << output;
}

TEST(FrontendServeProcess, ServeRejectsBadFlagValues) {
  const auto [output, status] = run_command(std::string(KVTIER_EXE) + " serve --port 70000");
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find("--port"), std::string::npos) << output;
}

// CLI11's Range lets "nan" through (every comparison with it is false); a seconds flag of nan
// would reach a duration conversion, which is undefined for it.
TEST(FrontendServeProcess, SecondsFlagsRefuseWhatIsNotAFiniteNumber) {
  for (const std::string args : {" router --backend http://127.0.0.1:1 --health-timeout nan",
                                 " router --backend http://127.0.0.1:1 --request-timeout inf",
                                 " admin --interval nan", " bench chaos --minutes nan"}) {
    const auto [output, status] = run_command(std::string(KVTIER_EXE) + args);
    EXPECT_NE(status, 0) << args << "\n" << output;
    EXPECT_NE(output.find("must be a number in"), std::string::npos) << args << "\n" << output;
  }
}

// An empty --config (an unset variable in a script) is an error, not "no file".
TEST(FrontendServeProcess, AnEmptyConfigPathIsAnError) {
  const auto [output, status] = run_command(std::string(KVTIER_EXE) + " config --config ''");
  EXPECT_NE(status, 0) << output;
  EXPECT_NE(output.find("--config needs a file's path"), std::string::npos) << output;
}

TEST(FrontendServeProcess, ServeHelpExplainsEachFlag) {
  const auto [output, status] = run_command(std::string(KVTIER_EXE) + " serve --help");
  EXPECT_EQ(status, 0);
  for (const char* flag : {"--host", "--port", "--engine-cores", "--world-size", "--set"}) {
    EXPECT_NE(output.find(flag), std::string::npos) << flag << "\n" << output;
  }
}

}  // namespace
}  // namespace kvtier::test
