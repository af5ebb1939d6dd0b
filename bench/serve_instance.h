// ServeInstance: one `kvtier serve` process tree started by a benchmark, its output in a file of
// its own temporary folder, driven over HTTP: /health, /metrics, and completions (whole or
// streamed, optionally hung up on mid-stream). Every call has a deadline. Used by `kvtier bench
// workload` and `kvtier bench chaos`.
// Thread-safety: the HTTP calls may be made from several threads at once; start / stop / the
// destructor from one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/core/child_process.h"

namespace kvtier::bench {

using BenchClock = std::chrono::steady_clock;

// Milliseconds from t0 to now.
double ms_since(BenchClock::time_point t0);

struct HttpAnswer {
  int status = 0;  // 0: no answer (refused, timed out)
  std::string body;
};

// How a streamed completion ended.
struct StreamResult {
  int status = 0;                 // HTTP status; 0: no answer
  bool done = false;              // `data: [DONE]` arrived and no `error` event
  bool error_event = false;       // the server ended the stream with an SSE `error` event
  bool hung_up = false;           // this client disconnected on purpose (hang_up_after)
  std::string text;               // the generated text received
  std::optional<double> ttft_ms;  // time to the first generated text
  size_t pieces = 0;              // data events that carried generated text
  double last_piece_ms = 0;       // time to the last of them
  double wall_ms = 0;             // from the request to its end
  // The final chunk's usage: prompt tokens, and those of them served from a cache.
  std::optional<size_t> prompt_tokens;
  std::optional<size_t> cached_tokens;
};

// Samples of `name` in a /metrics text, summed over their labels (0 when there is none).
double metric_sum(const std::string& metrics_text, const std::string& name);

// What the ServeInstance constructor throws when the process ended before it was ready.
class ServeExited : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ServeInstance {
 public:
  // Starts `exe serve --set s...` and waits (up to `ready_timeout`) for its port line and for
  // /health to answer 200. Throws std::runtime_error naming the log when it does not (ServeExited
  // when the process ended meanwhile).
  ServeInstance(const std::string& exe, const std::vector<std::string>& sets,
                std::chrono::milliseconds ready_timeout = std::chrono::seconds(120));
  // Any command that prints "serving … on http://host:port" and answers /health (e.g.
  // `kvtier router`): `argv` as given, the same wait.
  ServeInstance(const std::vector<std::string>& argv, std::chrono::milliseconds ready_timeout);
  // SIGTERM with a grace period (its run dir is removed), then SIGKILL; removes the folder.
  ~ServeInstance();
  ServeInstance(const ServeInstance&) = delete;
  ServeInstance& operator=(const ServeInstance&) = delete;

  HttpAnswer get(const std::string& path,
                 std::chrono::milliseconds timeout = std::chrono::seconds(1)) const;
  int health() const { return get("/health").status; }
  // http://host:port
  std::string url() const { return "http://" + host_ + ":" + std::to_string(port_); }

  // A streamed /v1/completions request (greedy). With `hang_up_after` = n, the client closes
  // the connection after its n-th data event. `timeout`: the client's read timeout, and the
  // longest it waits for the whole stream (then it hangs up; wall_ms tells).
  StreamResult stream(const std::string& prompt, size_t max_tokens,
                      std::chrono::milliseconds timeout,
                      std::optional<size_t> hang_up_after = std::nullopt) const;
  // A streamed completion that must succeed: (TTFT ms, text); throws std::runtime_error.
  std::pair<double, std::string> complete(const std::string& prompt, size_t max_tokens) const;

  // The frontend's pid (`kvtier serve` execs into it); its children are the engine cores, and
  // theirs the workers.
  pid_t pid() const { return process_.pid(); }
  // Whether the frontend still runs (polls).
  bool running();
  // How the frontend ended ("killed by signal 11 (…)", "exited with status 1"); nullopt while
  // it runs. Polls.
  std::optional<std::string> ended() { return process_.poll_exit(); }
  // The last `bytes` of the instance's output, for error messages.
  std::string log_tail(size_t bytes = 2000) const;

 private:
  // Waits for the port line and /health 200 (the constructor's wait).
  void wait_ready(std::chrono::milliseconds ready_timeout);

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  ChildProcess process_;
  std::string host_;
  int port_ = 0;
};

}  // namespace kvtier::bench
