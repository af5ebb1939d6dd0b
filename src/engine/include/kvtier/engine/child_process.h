// ChildProcess: a process of `kvtier serve` started by its parent (engine cores by the frontend,
// workers by an engine core), watched without blocking so that a death is seen within one poll.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace kvtier {

class ChildProcess {
 public:
  // fork + execv(argv[0], argv). Throws std::system_error when fork fails. The child's death
  // signal is SIGKILL should this process die first (PR_SET_PDEATHSIG): no orphan outlives
  // its parent.
  static ChildProcess spawn(const std::vector<std::string>& argv);

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills and reaps a child still running.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // nullopt while it runs; once it ended, how: "exited with status 1", "killed by signal 9".
  // Non-blocking (waitpid WNOHANG); the answer is kept.
  const std::optional<std::string>& poll_exit();
  void signal(int signo) const;
  // SIGKILL, then reap.
  void kill_and_reap();

 private:
  pid_t pid_ = -1;
  std::optional<std::string> exit_;
};

// The live (not zombie) children of `parent`, from /proc.
std::vector<pid_t> child_processes(pid_t parent);

// The path of the running executable (/proc/self/exe), to start processes of other roles.
std::string self_executable();

}  // namespace kvtier
