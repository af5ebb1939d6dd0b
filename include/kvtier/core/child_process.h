// ChildProcess: a child process started with fork + exec, watched without blocking so that a
// death is seen within one poll, and killed and reaped when the object goes away. The one place
// where kvtier forks, signals and reaps: the processes of `kvtier serve` (engine cores started by
// the frontend, workers by an engine core), and the redis-server, kvtierd and `kvtier serve`
// processes that benchmarks and tests start.
//
// Never signals a pid <= 0 (kill(0, …) reaches the caller's process group, kill(-1, …) every
// process the user owns): a default-constructed or moved-from ChildProcess has pid -1 and every
// call on it is a no-op. Nor does it signal a child it has reaped: that pid may be another
// process's by then.
// Thread-safety: none; one thread drives each object.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/core/clock.h"

namespace kvtier {

struct SpawnOptions {
  // The child's death signal is SIGKILL should this process die first (PR_SET_PDEATHSIG): no
  // orphan outlives its parent. (Linux sends it when the *thread* that spawned the child ends.)
  bool die_with_parent = true;
  // execvp: argv[0] may be a program name found on PATH. Otherwise it is a path (execv).
  bool search_path = false;
  // The child's stdout / stderr: -1 inherits this process's; any other descriptor is dup2'd onto
  // it in the child (this process keeps its own copy).
  int stdout_fd = -1;
  int stderr_fd = -1;
  // When set, the child's stdout and stderr are both appended to this file (created 0644),
  // opened before the fork; it overrides stdout_fd and stderr_fd.
  std::filesystem::path output_file;
};

class ChildProcess {
 public:
  // fork + exec of argv (argv[0] is the program). Throws std::system_error when fork fails or
  // options.output_file cannot be opened. The child only makes system calls between fork and
  // exec (no allocation: another thread may hold malloc's lock); an exec that fails ends it
  // with status 127.
  static ChildProcess spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  // Kills and reaps the child this object held, if it still runs.
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills and reaps a child still running.
  ~ChildProcess();

  // -1 when this object holds no process (default-constructed, moved from).
  pid_t pid() const { return pid_; }
  // From spawn until this object saw the child end (poll_exit, wait_exit, kill_and_reap). Does
  // not poll.
  bool running() const { return pid_ > 0 && !exit_; }
  // nullopt while it runs; once it ended, how: "exited with status 1", "killed by signal 9".
  // Non-blocking (waitpid WNOHANG); the answer is kept.
  const std::optional<std::string>& poll_exit();
  // Waits up to `timeout` for the child to end; whether it has (poll_exit() then says how).
  bool wait_exit(Duration timeout);
  // The raw wait status (WIFEXITED, WEXITSTATUS, …) once the child was reaped, else nullopt.
  std::optional<int> wait_status() const { return wait_status_; }
  // Sends `signo` to a child still running (SIGSTOP / SIGCONT / SIGTERM …).
  void signal(int signo) const;
  // SIGKILL, then reap. Works on a stopped child too.
  void kill_and_reap();
  // SIGTERM, up to `grace` for the child to exit, then kill_and_reap().
  void stop(Duration grace);

 private:
  void record(int status);

  pid_t pid_ = -1;
  std::optional<std::string> exit_;
  std::optional<int> wait_status_;
};

// kill(pid, signo) for a pid > 0; false (and nothing sent) for pid <= 0 or when kill fails. For
// processes that are not this process's own children (a worker found through /proc).
bool send_signal(pid_t pid, int signo);

// The live (not zombie) children of `parent`, from /proc.
std::vector<pid_t> child_processes(pid_t parent);

// The path of the running executable (/proc/self/exe), to start processes of other roles.
std::string self_executable();

}  // namespace kvtier
