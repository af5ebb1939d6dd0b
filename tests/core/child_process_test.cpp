// ChildProcess: the one fork/exec/signal/reap of kvtier. How a child ended is reported, every
// wait is bounded, and nothing is ever signalled through a pid <= 0.
#include "kvtier/core/child_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <string>

#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

ChildProcess shell(const std::string& script, SpawnOptions options = {}) {
  return ChildProcess::spawn({"/bin/sh", "-c", script}, options);
}

// A shell that runs `setup`, says "ready" on a pipe, then runs `rest`; returned once it said
// it (so a trap in `setup` is set before the test signals).
ChildProcess after_ready(const std::string& setup, const std::string& rest) {
  int ready[2];
  EXPECT_EQ(pipe2(ready, O_CLOEXEC), 0);
  ChildProcess child = shell(setup + "; echo ready; " + rest, {.stdout_fd = ready[1]});
  close(ready[1]);
  pollfd item{ready[0], POLLIN, 0};
  char line[6] = {};
  EXPECT_EQ(::poll(&item, 1, 10000), 1);
  EXPECT_EQ(read(ready[0], line, 5), 5);
  close(ready[0]);
  EXPECT_STREQ(line, "ready");
  return child;
}

TEST(ChildProcess, ReportsTheExitStatus) {
  ChildProcess child = shell("exit 3");
  EXPECT_GT(child.pid(), 0);
  ASSERT_TRUE(child.wait_exit(seconds(10)));
  EXPECT_FALSE(child.running());
  EXPECT_EQ(child.poll_exit(), "exited with status 3");
  ASSERT_TRUE(child.wait_status().has_value());
  EXPECT_TRUE(WIFEXITED(*child.wait_status()));
  EXPECT_EQ(WEXITSTATUS(*child.wait_status()), 3);
}

TEST(ChildProcess, ReportsTheSignalThatEndedIt) {
  ChildProcess child = shell("kill -TERM $$; sleep 30");
  ASSERT_TRUE(child.wait_exit(seconds(10)));
  EXPECT_EQ(child.poll_exit(), "killed by signal 15 (Terminated)");
}

TEST(ChildProcess, WaitExitIsBoundedAndPollDoesNotBlock) {
  ChildProcess child = shell("exec sleep 30");
  EXPECT_FALSE(child.poll_exit().has_value());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(child.wait_exit(milliseconds(50)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  EXPECT_TRUE(child.running());
}

TEST(ChildProcess, KillAndReapEndsAStoppedChild) {
  ChildProcess child = shell("exec sleep 30");
  child.signal(SIGSTOP);
  child.kill_and_reap();
  EXPECT_FALSE(child.running());
  EXPECT_EQ(child.poll_exit(), "killed by its parent");
  ASSERT_TRUE(child.wait_status().has_value());
  EXPECT_EQ(WTERMSIG(*child.wait_status()), SIGKILL);
}

TEST(ChildProcess, StopIsSigtermThenSigkillAfterTheGrace) {
  ChildProcess polite = after_ready("trap 'exit 0' TERM", "while :; do sleep 0.01; done");
  polite.stop(seconds(10));
  ASSERT_TRUE(polite.wait_status().has_value());
  EXPECT_TRUE(WIFEXITED(*polite.wait_status())) << "exited on SIGTERM, not killed";

  ChildProcess stubborn = after_ready("trap '' TERM", "exec sleep 30");
  stubborn.stop(milliseconds(100));
  EXPECT_FALSE(stubborn.running());
  EXPECT_EQ(stubborn.poll_exit(), "killed by its parent");
}

// A process that takes its stop signals with StopSignals blocks them in every thread; the
// programs it starts (engine cores, workers, redis-server) must still get them.
TEST(ChildProcess, AChildGetsSigtermThoughTheParentBlocksIt) {
  sigset_t term;
  sigset_t previous;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &previous), 0);
  ChildProcess child = shell("exec sleep 30");
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  child.stop(seconds(10));
  EXPECT_EQ(child.poll_exit(), "killed by signal 15 (Terminated)");
}

TEST(ChildProcess, OutputFileTakesStdoutAndStderr) {
  TempDir dir;
  const auto log = dir.path() / "out.log";
  ChildProcess child = shell("echo out; echo err >&2", {.output_file = log});
  ASSERT_TRUE(child.wait_exit(seconds(10)));
  std::ifstream file(log);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_EQ(text.str(), "out\nerr\n");
}

TEST(ChildProcess, SearchPathFindsAProgramByName) {
  ChildProcess found = ChildProcess::spawn({"sh", "-c", "exit 0"}, {.search_path = true});
  ASSERT_TRUE(found.wait_exit(seconds(10)));
  EXPECT_EQ(found.poll_exit(), "exited with status 0");
  // Without it, "sh" is a path relative to the working directory: exec fails, status 127.
  TempDir dir;
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  ChildProcess missing = ChildProcess::spawn({"sh", "-c", "exit 0"});
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(missing.wait_exit(seconds(10)));
  EXPECT_EQ(missing.poll_exit(), "exited with status 127");
}

TEST(ChildProcess, AnEmptyOrMovedFromProcessIsANoOp) {
  ChildProcess none;
  EXPECT_EQ(none.pid(), -1);
  EXPECT_FALSE(none.running());
  EXPECT_FALSE(none.poll_exit().has_value());
  EXPECT_FALSE(none.wait_exit(milliseconds(1)));
  none.signal(0);
  none.kill_and_reap();
  ChildProcess child = shell("exec sleep 30");
  const pid_t pid = child.pid();
  ChildProcess moved = std::move(child);
  EXPECT_EQ(moved.pid(), pid);
  EXPECT_EQ(child.pid(), -1);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_FALSE(child.running());
  const auto children = child_processes(getpid());
  EXPECT_NE(std::find(children.begin(), children.end(), pid), children.end());
}

TEST(ChildProcess, SendSignalNeverReachesPidZeroOrBelow) {
  // Signal 0 only checks: kill(0, 0) and kill(-1, 0) would succeed, so a true here would mean
  // a real signal would have gone to the process group or to every process of the user.
  EXPECT_FALSE(send_signal(0, 0));
  EXPECT_FALSE(send_signal(-1, 0));
  EXPECT_TRUE(send_signal(getpid(), 0));
}

}  // namespace
}  // namespace kvtier::testing
