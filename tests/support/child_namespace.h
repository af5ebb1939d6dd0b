// What a test must not do to its own process, done in a forked child: run_in_child, and a small
// tmpfs of its own (a real file system that fills up) mounted in a child's private user and
// mount namespaces, which needs no privileges.
#pragma once

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace kvtier::testing {

// Runs body in a forked child (single-threaded, so it may unshare namespaces or install a
// seccomp filter) and returns its exit status: 0 when body raised no gtest failure, 1 when it
// did (the child prints its failures), or whatever the body _exit()ed with.
inline int run_in_child(const std::function<void()>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    std::fflush(stdout);
    ::_exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The exit status of run_with_small_tmpfs when this machine has no user namespaces.
inline constexpr int kNoUserNamespaces = 77;

// Runs body in a child whose `mount_point` (an existing directory) is a tmpfs of `size` (e.g.
// "4m"), mounted in the child's own user and mount namespaces; the child's uid and gid map to
// the caller's. Processes the body starts see the same mount. Returns run_in_child's status, or
// kNoUserNamespaces.
inline int run_with_small_tmpfs(const std::filesystem::path& mount_point, const std::string& size,
                                const std::function<void()>& body) {
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  auto write_file = [](const char* path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    f.flush();
    return static_cast<bool>(f);
  };
  return run_in_child([&] {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) ::_exit(kNoUserNamespaces);
    write_file("/proc/self/setgroups", "deny");
    if (!write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1") ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("kvtier-test", mount_point.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      ::_exit(kNoUserNamespaces);
    }
    body();
  });
}

}  // namespace kvtier::testing
