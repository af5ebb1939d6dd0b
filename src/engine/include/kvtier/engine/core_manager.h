// CoreManager: the frontend's side of its engine cores (docs/engine.md "Engine core ↔ frontend").
//
// It binds a ROUTER at ipc://<run_dir>/frontend.ipc, then spawns the engine-core processes, and
// runs one I/O thread that every poll interval (≤ 10 ms, sooner when a request is submitted):
//   - sends queued `add` / `abort` / `shutdown` messages (only this thread touches the socket),
//   - receives `hello`, `hb`, `out`, `err`, `failed` and routes outputs to request streams,
//   - watches every core's process (ChildProcess::poll_exit) and its heartbeat age.
// A core's `failed` message, its death or its stall (no message for engine.stall_timeout_s, H6)
// is recorded once and stays (H2); every request in flight on that core ends at once with an
// error (H5). While any core is failed, stalled or starting, or the engine is closed, new
// requests are refused with the /health reason.
//
// Routing (docs/engine.md "Routing"): by default a request goes to the serving core with the
// fewest requests in flight. With `routing` set (routing.policy cache, several cores), the I/O
// thread also subscribes to every core's KV events and keeps a PrefixIndex, and a request goes
// to the core choose_core() picks: the longest cached prefix against the work in flight. The
// index is a hint: with no events (a core that publishes none, a stream that is down) the
// choice falls back to the load alone, and a request is served the same.
//
// Thread-safety: submit(), abort(), health(), metrics() and shutdown() may be called from any
// thread (HTTP handler threads). A malformed message from a core is logged and ignored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/config.h"
#include "kvtier/core/status.h"
#include "kvtier/engine/engine_health.h"
#include "kvtier/engine/metrics_text.h"
#include "kvtier/engine/prefix_index.h"
#include "kvtier/engine/request_stream.h"

namespace kvtier {

struct CoreManagerOptions {
  uint32_t engine_cores = 1;
  Duration stall_timeout = std::chrono::seconds(5);
  // shutdown(): how long cores get to exit after the `shutdown` message before SIGKILL.
  Duration shutdown_grace = std::chrono::seconds(5);
  std::filesystem::path run_dir;  // holds frontend.ipc; must exist
  bool remove_run_dir = true;     // shutdown() removes it
  // The command line of engine core n (tests substitute a scripted fake core).
  std::function<std::vector<std::string>(uint32_t core)> core_argv;

  // Routing by cache: where core n publishes its KV events and answers replays, and how a
  // prompt is keyed (as the cores key their caches). Unset: routing by load.
  struct Routing {
    std::vector<std::string> events;  // core n's PUB endpoint
    std::vector<std::string> replay;  // core n's replay endpoint
    PromptKeying keying;
  };
  std::optional<Routing> routing;

  // `engine_cores`, `stall_timeout` from `config.engine`, and the real command line
  // [exe, "engine-core", "<n>", "--run-dir", run_dir, "--config", run_dir/config.yaml].
  static CoreManagerOptions from_config(const Config& config, const std::filesystem::path& run_dir,
                                        const std::string& exe);
};

class CoreManager {
 public:
  // Binds, spawns every core and starts the I/O thread. Errors: the socket cannot be bound, a
  // process cannot be spawned.
  static Result<std::unique_ptr<CoreManager>> start(CoreManagerOptions options);
  // shutdown().
  ~CoreManager();
  CoreManager(const CoreManager&) = delete;
  CoreManager& operator=(const CoreManager&) = delete;

  // Dispatches a request to a serving core (see Routing above). kUnavailable (with the /health
  // reason) while the engine is not healthy or is closed.
  Result<std::shared_ptr<RequestStream>> submit(std::vector<TokenId> prompt, uint32_t max_tokens);
  // The client went away: tells the core, forgets the request. Unknown ids are ignored.
  void abort(const std::string& id);

  HealthReport health() const;
  EngineMetrics metrics() const;
  // The routing index's view of core n: blocks it holds on `medium` (0 without routing).
  size_t indexed_blocks(uint32_t core, std::string_view medium) const;
  // The core each request went to, by id (tests).
  std::optional<uint32_t> core_of(const std::string& id) const;
  // pid of engine core n (tests signal it).
  pid_t core_pid(uint32_t core) const;

  // Graceful stop; idempotent, bounded by shutdown_grace: /health turns 503 "closed" at once,
  // requests in flight end with an error, each core gets `shutdown`, cores still running after
  // the grace period are killed, the I/O thread stops, the run dir is removed.
  void shutdown();

 private:
  struct Impl;
  explicit CoreManager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
