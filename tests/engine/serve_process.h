// Test helpers for the HTTP side of `kvtier serve`: start it as a real process and read its
// port line, GET / POST JSON, read a server-sent-event stream, wait for a condition. Every wait
// has a deadline. Header-only; link PkgConfig::HTTPLIB.
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "kvtier/core/child_process.h"

namespace kvtier::test {

using namespace std::chrono_literals;
using TestClock = std::chrono::steady_clock;

// Polls `condition` every `interval` until it holds or `timeout` passes; returns the last value.
template <class Condition>
bool wait_until(Condition condition, std::chrono::milliseconds timeout,
                std::chrono::milliseconds interval = std::chrono::milliseconds(10)) {
  const auto deadline = TestClock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (TestClock::now() >= deadline) return false;
    std::this_thread::sleep_for(interval);  // polling pace, not a race fix
  }
}

struct HttpReply {
  int status = 0;  // 0: no answer (connection refused, timeout)
  std::string body;
  std::string content_type;
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
};

inline HttpReply to_reply(const httplib::Result& result) {
  if (!result) return {};
  return {result->status, result->body, result->get_header_value("Content-Type")};
}

inline httplib::Client client(const std::string& host, int port,
                              std::chrono::milliseconds timeout) {
  httplib::Client c(host, port);
  c.set_connection_timeout(timeout);
  c.set_read_timeout(timeout);
  c.set_write_timeout(timeout);
  return c;
}

inline HttpReply http_get(const std::string& host, int port, const std::string& path,
                          std::chrono::milliseconds timeout = 5000ms) {
  httplib::Client c = client(host, port, timeout);
  return to_reply(c.Get(path));
}

inline HttpReply http_post(const std::string& host, int port, const std::string& path,
                           const std::string& body, std::chrono::milliseconds timeout = 5000ms) {
  httplib::Client c = client(host, port, timeout);
  return to_reply(c.Post(path, body, "application/json"));
}

inline HttpReply http_post_json(const std::string& host, int port, const std::string& path,
                                const nlohmann::json& body,
                                std::chrono::milliseconds timeout = 5000ms) {
  return http_post(host, port, path, body.dump(), timeout);
}

// A server-sent-event stream as read: each event's name ("" for plain data) and data.
struct SseEvent {
  std::string event;
  std::string data;
  nlohmann::json json() const { return nlohmann::json::parse(data, nullptr, false); }
};
struct SseStream {
  int status = 0;
  std::vector<SseEvent> events;
  bool done = false;       // saw "data: [DONE]"
  bool error = false;      // saw an `error` event
  bool timed_out = false;  // the deadline passed before the stream ended
  std::string raw;         // everything received
  // The concatenated text of the chunks (completions: text; chat: delta.content).
  std::string text() const {
    std::string out;
    for (const SseEvent& e : events) {
      const nlohmann::json j = e.json();
      if (!e.event.empty() || !j.is_object() || !j.contains("choices")) continue;
      for (const nlohmann::json& c : j["choices"]) {  // none in the usage chunk
        if (c.contains("text")) out += c["text"].get<std::string>();
        if (c.contains("delta") && c["delta"].contains("content")) {
          out += c["delta"]["content"].get<std::string>();
        }
      }
    }
    return out;
  }
};

// POSTs `body` and reads the SSE answer until it ends or `timeout` passes. `on_event` (may be
// empty) sees each event as it arrives, e.g. to act once the stream is known to be in flight.
inline SseStream read_sse(const std::string& host, int port, const std::string& path,
                          const nlohmann::json& body, std::chrono::milliseconds timeout,
                          std::function<void(const SseEvent&)> on_event = nullptr) {
  SseStream stream;
  const auto deadline = TestClock::now() + timeout;
  std::string pending;
  httplib::Client c = client(host, port, timeout);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    stream.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    stream.raw.append(data, size);
    pending.append(data, size);
    for (size_t end = pending.find("\n\n"); end != std::string::npos; end = pending.find("\n\n")) {
      const std::string block = pending.substr(0, end);
      pending.erase(0, end + 2);
      SseEvent event;
      std::istringstream lines(block);
      for (std::string line; std::getline(lines, line);) {
        if (line.starts_with("event: ")) event.event = line.substr(7);
        if (line.starts_with("data: ")) event.data += line.substr(6);
      }
      if (event.data == "[DONE]") {
        stream.done = true;
        continue;
      }
      if (event.event == "error") stream.error = true;
      stream.events.push_back(event);
      if (on_event) on_event(event);
    }
    if (TestClock::now() >= deadline) {
      stream.timed_out = true;
      return false;
    }
    return true;
  };
  const httplib::Result result = c.send(req);
  if (!result && !stream.done && !stream.error) stream.timed_out = TestClock::now() >= deadline;
  if (result && stream.status == 0) stream.status = result->status;
  return stream;
}

// The command line of process `pid` (empty when it is gone).
inline std::vector<std::string> command_line_of(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  for (std::string arg; std::getline(file, arg, '\0');) args.push_back(arg);
  return args;
}

// A descendant of `root` whose command line holds `role` as consecutive arguments, e.g.
// {"engine-core", "0"} or {"worker", "0/1"}; waits up to `timeout` for it to appear.
inline std::optional<pid_t> find_process(pid_t root, const std::vector<std::string>& role,
                                         std::chrono::milliseconds timeout = 5000ms) {
  std::optional<pid_t> found;
  wait_until(
      [&] {
        std::vector<pid_t> pending = {root};
        while (!pending.empty() && !found) {
          const pid_t pid = pending.back();
          pending.pop_back();
          const std::vector<std::string> args = command_line_of(pid);
          if (pid != root &&
              std::search(args.begin(), args.end(), role.begin(), role.end()) != args.end()) {
            found = pid;
          }
          for (pid_t child : child_processes(pid)) pending.push_back(child);
        }
        return found.has_value();
      },
      timeout);
  return found;
}

// `kvtier serve …` (or any command printing "… on http://<host>:<port>") as a child process.
// Its stdout is a pipe read for the port line; stderr is inherited. The destructor stops a
// process still running: SIGTERM (graceful: its run dir is removed), SIGKILL after 5 s. Should
// the test process die first (a failed assertion's abort, ctest's timeout), the child gets
// SIGKILL and its engine cores and workers follow it (their own die_with_parent): no serve tree
// outlives a test, holding ctest's output pipe open until the test's timeout. Start it from the
// test's own thread (the death signal follows the thread that spawned it).
class ServeProcess {
 public:
  // Starts argv and waits up to `timeout` for the serving line. nullopt (and the process
  // killed) if it does not come.
  static std::optional<ServeProcess> start(const std::vector<std::string>& argv,
                                           std::chrono::milliseconds timeout = 20000ms) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
    ServeProcess process(out[0]);
    try {
      process.process_ = ChildProcess::spawn(argv, {.die_with_parent = true, .stdout_fd = out[1]});
    } catch (const std::system_error&) {
      close(out[1]);
      return std::nullopt;
    }
    close(out[1]);
    const auto deadline = TestClock::now() + timeout;
    static const std::regex line_re(R"(serving (\S+) on http://([^:\s]+):(\d+))");
    while (TestClock::now() < deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - TestClock::now());
      pollfd fd{process.stdout_fd_, POLLIN, 0};
      if (::poll(&fd, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
      char buffer[512];
      const ssize_t n = read(process.stdout_fd_, buffer, sizeof buffer);
      if (n <= 0) break;  // exited before serving
      process.output_.append(buffer, static_cast<size_t>(n));
      std::smatch match;
      if (std::regex_search(process.output_, match, line_re)) {
        process.model_ = match[1];
        process.host_ = match[2];
        process.port_ = std::stoi(match[3]);
        return process;
      }
    }
    return std::nullopt;
  }

  ServeProcess(ServeProcess&& other) noexcept
      : process_(std::move(other.process_)),
        stdout_fd_(std::exchange(other.stdout_fd_, -1)),
        output_(std::move(other.output_)),
        model_(std::move(other.model_)),
        host_(std::move(other.host_)),
        port_(other.port_) {}
  ServeProcess& operator=(ServeProcess&&) = delete;
  ~ServeProcess() {
    process_.stop(5000ms);
    if (stdout_fd_ >= 0) close(stdout_fd_);
  }

  pid_t pid() const { return process_.pid(); }
  const std::string& host() const { return host_; }
  int port() const { return port_; }
  const std::string& model() const { return model_; }
  // A no-op once the process ended, or on a moved-from process (ChildProcess never signals
  // pid <= 0).
  void signal(int signo) const { process_.signal(signo); }

  HttpReply get(const std::string& path, std::chrono::milliseconds timeout = 5000ms) const {
    return http_get(host_, port_, path, timeout);
  }
  HttpReply post(const std::string& path, const nlohmann::json& body,
                 std::chrono::milliseconds timeout = 5000ms) const {
    return http_post_json(host_, port_, path, body, timeout);
  }
  SseStream stream(const std::string& path, const nlohmann::json& body,
                   std::chrono::milliseconds timeout = 5000ms,
                   std::function<void(const SseEvent&)> on_event = nullptr) const {
    return read_sse(host_, port_, path, body, timeout, std::move(on_event));
  }

  // The wait status once the process exited within `timeout`, else nullopt.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    if (!process_.wait_exit(timeout)) return std::nullopt;
    return process_.wait_status();
  }

 private:
  explicit ServeProcess(int stdout_fd) : stdout_fd_(stdout_fd) {}

  ChildProcess process_;
  int stdout_fd_ = -1;
  std::string output_;
  std::string model_;
  std::string host_;
  int port_ = 0;
};

}  // namespace kvtier::test
