#include "kvtier/core/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

namespace kvtier {
namespace {

// Closes a descriptor this process opened for the child, once the child has its copy.
struct OwnedFd {
  int fd = -1;
  ~OwnedFd() {
    if (fd >= 0) ::close(fd);
  }
};

// A pidfd for `pid` (readable once the process ended), or -1 where the kernel has none.
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv,
                                 const SpawnOptions& options) {
  // Everything the child needs is prepared here: between fork and exec it only makes system
  // calls.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  OwnedFd output;
  int out_fd = options.stdout_fd;
  int err_fd = options.stderr_fd;
  if (!options.output_file.empty()) {
    output.fd =
        ::open(options.output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (output.fd < 0) {
      throw std::system_error(errno, std::generic_category(),
                              "open " + options.output_file.string());
    }
    out_fd = err_fd = output.fd;
  }
  // The child starts with no signal blocked: the exec'd program must get SIGTERM even where
  // this process blocks it in every thread (StopSignals).
  sigset_t no_signals;
  sigemptyset(&no_signals);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before prctl
    }
    if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    if (options.search_path) {
      execvp(args[0], args.data());
    } else {
      execv(args[0], args.data());
    }
    _exit(127);
  }
  ChildProcess child;
  child.pid_ = pid;
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      exit_(std::exchange(other.exit_, std::nullopt)),
      wait_status_(std::exchange(other.wait_status_, std::nullopt)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    exit_ = std::exchange(other.exit_, std::nullopt);
    wait_status_ = std::exchange(other.wait_status_, std::nullopt);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  kill_and_reap();
}

void ChildProcess::record(int status) {
  wait_status_ = status;
  if (WIFSIGNALED(status)) {
    exit_ = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
            strsignal(WTERMSIG(status)) + ")";
  } else {
    exit_ = "exited with status " + std::to_string(WEXITSTATUS(status));
  }
}

const std::optional<std::string>& ChildProcess::poll_exit() {
  if (!running()) return exit_;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    record(status);
  } else if (r < 0 && errno == ECHILD) {
    exit_ = "gone (not a child of this process)";
  }
  return exit_;
}

bool ChildProcess::wait_exit(Duration timeout) {
  if (!running() || poll_exit()) return exit_.has_value();
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = timeout >= std::chrono::steady_clock::time_point::max() - now
                            ? std::chrono::steady_clock::time_point::max()
                            : now + timeout;
  OwnedFd pidfd{open_pidfd(pid_)};
  while (!poll_exit()) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= Duration::zero()) break;
    if (pidfd.fd >= 0) {
      // Readable once the child ended; a signal (EINTR) only sends us round again.
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
      pollfd item{pidfd.fd, POLLIN, 0};
      ::poll(&item, 1, static_cast<int>(std::min<int64_t>(ms, INT32_MAX)));
    } else {
      // No pidfd (a kernel before 5.3): poll the child's state.
      std::this_thread::sleep_for(std::min<Duration>(left, std::chrono::milliseconds(1)));
    }
  }
  return exit_.has_value();
}

void ChildProcess::signal(int signo) const {
  if (running()) send_signal(pid_, signo);
}

void ChildProcess::kill_and_reap() {
  if (!running()) return;
  send_signal(pid_, SIGKILL);
  int status = 0;
  pid_t r;
  while ((r = waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
  }
  if (r == pid_) wait_status_ = status;
  exit_ = "killed by its parent";
}

void ChildProcess::stop(Duration grace) {
  signal(SIGTERM);
  wait_exit(grace);
  kill_and_reap();
}

bool send_signal(pid_t pid, int signo) {
  return pid > 0 && ::kill(pid, signo) == 0;
}

std::vector<pid_t> child_processes(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid …: comm may hold spaces, so parse after the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') children.push_back(std::stoi(name));
  }
  return children;
}

std::string self_executable() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

}  // namespace kvtier
