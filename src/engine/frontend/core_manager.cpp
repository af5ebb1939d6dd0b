#include "kvtier/engine/core_manager.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "kvtier/core/child_process.h"
#include "kvtier/core/kv_event_subscriber.h"
#include "kvtier/core/log.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/engine/wire.h"

namespace kvtier {

CoreManagerOptions CoreManagerOptions::from_config(const Config& config,
                                                   const std::filesystem::path& run_dir,
                                                   const std::string& exe) {
  CoreManagerOptions options;
  options.engine_cores = config.engine.engine_cores;
  options.stall_timeout = seconds_to_duration(config.engine.stall_timeout_s);
  options.run_dir = run_dir;
  options.core_argv = [exe, run_dir](uint32_t core) {
    return std::vector<std::string>{exe,
                                    "engine-core",
                                    std::to_string(core),
                                    "--run-dir",
                                    run_dir.string(),
                                    "--config",
                                    (run_dir / "config.yaml").string()};
  };
  if (routes_by_cache(config)) {
    Routing routing{.keying = prompt_keying(engine_shape(config))};
    for (uint32_t n = 0; n < options.engine_cores; ++n) {
      routing.events.push_back(events_endpoint(run_dir.string(), n));
      routing.replay.push_back(events_replay_endpoint(run_dir.string(), n));
    }
    options.routing = std::move(routing);
  }
  return options;
}

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(10);
// How long the I/O thread waits for a dead core's last messages before it records the death.
constexpr auto kExitDrain = std::chrono::milliseconds(20);

// zmq::poll that treats a signal's interruption (SIGTERM reaching this thread) as a timeout.
void poll_for(zmq::pollitem_t* items, size_t count, std::chrono::milliseconds timeout) {
  try {
    zmq::poll(items, count, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
  }
}

struct InFlight {
  uint32_t core = 0;
  std::shared_ptr<RequestStream> stream;
  bool prompt_counted = false;
  uint64_t work = 0;  // what it adds to its core's work in flight (routing by cache)
};

}  // namespace

struct CoreManager::Impl {
  CoreManagerOptions options;
  const Clock& clock = SteadyClock::instance();
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::router};
  int wake_fd = -1;
  std::vector<ChildProcess> cores;  // touched by the I/O thread only, until it is joined
  std::vector<pid_t> pids;
  std::thread io_thread;
  std::atomic<bool> stop{false};

  // Guards everything below.
  mutable std::mutex mutex;
  std::condition_variable core_exited;
  EngineHealth health;
  std::vector<bool> exited;
  bool closing = false;
  std::map<std::string, InFlight> requests;
  std::vector<uint32_t> load;  // requests in flight per core
  std::vector<uint64_t> work;  // per core: uncached prompt + max_tokens of its requests
  PrefixIndex index;           // routing by cache: the cores' KV events
  // Routing by cache: core n's events (the I/O thread's; null where it could not connect).
  std::vector<std::unique_ptr<KvEventSubscriber>> subscribers;
  std::vector<std::pair<std::string, nlohmann::json>> outbox;  // (peer, message)
  EngineMetrics counters;
  uint64_t next_id = 0;

  std::mutex shutdown_mutex;
  bool shut_down = false;

  explicit Impl(CoreManagerOptions o)
      : options(std::move(o)),
        health(options.engine_cores, options.stall_timeout),
        exited(options.engine_cores, false),
        load(options.engine_cores, 0),
        work(options.engine_cores, 0),
        index(options.engine_cores) {
    counters.core_counters.resize(options.engine_cores);
  }

  ~Impl() {
    if (wake_fd >= 0) close(wake_fd);
  }

  void wake() const {
    const uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof one);
  }

  // Ends one request (mutex held): pushes the final event, forgets it.
  void end_request(std::map<std::string, InFlight>::iterator it, StreamEvent event) {
    if (event.kind == StreamEvent::Kind::kError) ++counters.request_errors_total;
    it->second.stream->push(std::move(event));
    --load[it->second.core];
    work[it->second.core] -= it->second.work;
    requests.erase(it);
  }

  // H5: every request in flight on `core` (or on every core) ends with `message`. Mutex held.
  void end_requests_of(std::optional<uint32_t> core, const std::string& message) {
    for (auto it = requests.begin(); it != requests.end();) {
      auto current = it++;
      if (core && current->second.core != *core) continue;
      StreamEvent error;
      error.kind = StreamEvent::Kind::kError;
      error.error = message;
      end_request(current, std::move(error));
    }
  }

  // Mutex held. H2: the first failure stays; its requests end at once.
  void record_failure(uint32_t core, CoreFailure kind, const std::string& reason) {
    if (!health.fail(core, kind, reason)) return;
    log_error(reason, {{"core", std::to_string(core)}});
    end_requests_of(core, reason);
  }

  static std::optional<uint32_t> core_of_peer(const std::string& peer, uint32_t cores) {
    if (!peer.starts_with("core-")) return std::nullopt;
    try {
      size_t used = 0;
      const unsigned long n = std::stoul(peer.substr(5), &used);
      if (used + 5 != peer.size() || n >= cores) return std::nullopt;
      return static_cast<uint32_t>(n);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  // One message from a core. Mutex held. Throws nlohmann::json::exception on an ill-typed
  // field (the caller logs and ignores the message).
  void handle(uint32_t core, const nlohmann::json& body) {
    const std::string& type = body.at("t").get_ref<const std::string&>();
    const TimePoint now = clock.now();
    if (type == "hello") {
      health.hello(core, now);
    } else if (type == "hb") {
      std::vector<std::string> degraded;
      if (body.contains("degraded")) degraded = body["degraded"].get<std::vector<std::string>>();
      std::map<std::string, double> core_counters;
      if (body.contains("counters")) {
        for (const auto& [name, value] : body["counters"].items()) {
          core_counters[name] = value.get<double>();
        }
      }
      std::map<std::string, CounterKind> kinds;  // an unknown kind leaves the name untyped
      if (body.contains("kinds")) {
        for (const auto& [name, kind] : body["kinds"].items()) {
          for (CounterKind k : {CounterKind::kCounter, CounterKind::kGauge}) {
            if (kind.get_ref<const std::string&>() == to_string(k)) kinds[name] = k;
          }
        }
      }
      // Counters stay current after a failure too, for /metrics.
      counters.core_counters[core] = std::move(core_counters);
      counters.core_kinds.merge(kinds);
      health.heartbeat(core, now, std::move(degraded));
    } else if (type == "out") {
      auto it = requests.find(body.at("id").get<std::string>());
      if (it == requests.end()) return;  // aborted or already ended
      StreamEvent event;
      event.tokens = body.at("tokens").get<std::vector<TokenId>>();
      event.prompt_tokens = body.value("prompt_tokens", 0u);
      event.cached_tokens = body.value("cached_tokens", 0u);
      if (!it->second.prompt_counted) {
        it->second.prompt_counted = true;
        counters.cached_prompt_tokens_total += event.cached_tokens;
      }
      counters.generation_tokens_total += event.tokens.size();
      if (!body.value("done", false)) {
        it->second.stream->push(std::move(event));
        return;
      }
      event.kind = StreamEvent::Kind::kDone;
      const auto& reason = body.contains("finish_reason") ? body["finish_reason"] : nullptr;
      event.finish_reason = reason.is_string() ? reason.get<std::string>() : "stop";
      end_request(it, std::move(event));
    } else if (type == "err") {
      auto it = requests.find(body.at("id").get<std::string>());
      if (it == requests.end()) return;
      StreamEvent event;
      event.kind = StreamEvent::Kind::kError;
      event.error = body.value("message", std::string("engine error"));
      event.http_status = body.value("status", 503);
      end_request(it, std::move(event));
    } else if (type == "failed") {
      record_failure(core, CoreFailure::kFailed,
                     "engine core " + std::to_string(core) +
                         " failed: " + body.value("reason", std::string("no reason given")));
    } else {
      log_warning("ignored message '" + type + "' from engine core " + std::to_string(core),
                  {{"core", std::to_string(core)}});
    }
  }

  void receive_all() {
    // Bounded per poll so that process watching and stall checks keep their pace.
    for (int i = 0; i < 1024; ++i) {
      auto received = try_receive(socket, true);
      if (!received) return;
      if (!*received) {
        log_warning(received->error().message);
        continue;
      }
      const Envelope& envelope = **received;
      const auto core = core_of_peer(envelope.peer, options.engine_cores);
      if (!core) {
        log_warning("message from unknown peer '" + envelope.peer + "'");
        continue;
      }
      std::lock_guard lock(mutex);
      try {
        handle(*core, envelope.body);
      } catch (const nlohmann::json::exception& e) {
        log_warning("malformed '" + envelope.body["t"].get<std::string>() + "' from engine core " +
                        std::to_string(*core) + ": " + e.what(),
                    {{"core", std::to_string(*core)}});
      }
    }
  }

  void send_outbox() {
    std::vector<std::pair<std::string, nlohmann::json>> pending;
    {
      std::lock_guard lock(mutex);
      pending.swap(outbox);
    }
    for (const auto& [peer, message] : pending) send_message_to(socket, peer, message);
  }

  void watch_processes() {
    for (uint32_t n = 0; n < cores.size(); ++n) {
      const auto& exit = cores[n].poll_exit();
      if (!exit) continue;
      {
        std::lock_guard lock(mutex);
        if (exited[n]) continue;
      }
      // A dying core reports its failure first (H2: `failed` naming the worker, its requests'
      // `err`s). Those messages left it before it exited; give them one short poll to arrive so
      // that its own reason, not just the exit status, names the failure.
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      poll_for(&item, 1, kExitDrain);
      receive_all();
      std::lock_guard lock(mutex);
      if (exited[n]) continue;
      exited[n] = true;
      core_exited.notify_all();
      // An exit while closing is the expected end, not a failure.
      if (!closing) {
        record_failure(n, CoreFailure::kFailed, "engine core " + std::to_string(n) + " " + *exit);
      }
    }
    std::lock_guard lock(mutex);
    for (uint32_t n : health.check_stalls(clock.now())) {
      const std::string reason = health.core(n).failure_reason;
      log_error(reason, {{"core", std::to_string(n)}});
      end_requests_of(n, reason);
    }
  }

  void run() {
    while (!stop.load()) {
      zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, wake_fd, ZMQ_POLLIN, 0}};
      poll_for(items, 2, kPollInterval);
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t count = 0;
        (void)!read(wake_fd, &count, sizeof count);
      }
      send_outbox();
      receive_all();
      receive_events();
      watch_processes();
    }
  }

  // Routing by cache: what the cores' KV events say, into the index. Never blocks.
  void receive_events() {
    for (uint32_t n = 0; n < subscribers.size(); ++n) {
      if (!subscribers[n]) continue;
      std::vector<KvEventBatch> batches = subscribers[n]->poll(Duration::zero());
      if (batches.empty()) continue;
      std::lock_guard lock(mutex);
      for (const KvEventBatch& b : batches) index.apply(n, b);
    }
  }
};

CoreManager::CoreManager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CoreManager::~CoreManager() {
  shutdown();
}

Result<std::unique_ptr<CoreManager>> CoreManager::start(CoreManagerOptions options) {
  if (!options.core_argv || options.engine_cores == 0) {
    return make_error(ErrorCode::kInvalidArgument, "core manager: no engine cores to start");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0) return make_error(ErrorCode::kInternal, "eventfd failed");
  const std::string endpoint = "ipc://" + (impl->options.run_dir / "frontend.ipc").string();
  try {
    impl->socket.set(zmq::sockopt::linger, 0);
    lossless_queues(impl->socket);
    impl->socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, "cannot bind " + endpoint + ": " + e.what());
  }
  if (const auto& routing = impl->options.routing) {
    for (uint32_t n = 0; n < impl->options.engine_cores; ++n) {
      try {
        impl->subscribers.push_back(std::make_unique<KvEventSubscriber>(KvEventSubscriberOptions{
            .endpoint = routing->events.at(n), .replay_endpoint = routing->replay.at(n)}));
      } catch (const std::runtime_error& e) {
        // A hint only: this core is routed to by load.
        log_warning("routing without engine core " + std::to_string(n) + "'s KV events",
                    {{"error", e.what()}});
        impl->subscribers.push_back(nullptr);
      }
    }
  }
  // Bound before spawning: a core's first message cannot miss the socket.
  for (uint32_t n = 0; n < impl->options.engine_cores; ++n) {
    try {
      impl->cores.push_back(ChildProcess::spawn(impl->options.core_argv(n)));
    } catch (const std::system_error& e) {
      return make_error(ErrorCode::kUnavailable,
                        "cannot start engine core " + std::to_string(n) + ": " + e.what());
    }
    impl->pids.push_back(impl->cores.back().pid());
  }
  Impl* raw = impl.get();
  impl->io_thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<CoreManager>(new CoreManager(std::move(impl)));
}

Result<std::shared_ptr<RequestStream>> CoreManager::submit(std::vector<TokenId> prompt,
                                                           uint32_t max_tokens) {
  Impl& m = *impl_;
  std::shared_ptr<RequestStream> stream;
  // Keyed outside the lock: hashing a long prompt is the costly part of routing.
  std::optional<PromptKeys> keys;
  if (const auto& routing = m.options.routing) keys = routing->keying.keys(prompt);
  {
    std::lock_guard lock(m.mutex);
    const HealthReport report = m.health.report();
    if (!report.healthy()) {
      return make_error(ErrorCode::kUnavailable,
                        "engine " + report.body.value("status", std::string()) + ": " +
                            report.body.value("reason", std::string()));
    }
    std::vector<CoreLoad> cores;
    cores.reserve(m.load.size());
    for (uint32_t n = 0; n < m.load.size(); ++n) {
      cores.push_back({.serving = m.health.serving(n),
                       .cached = keys ? m.index.cached_tokens(n, *keys) : 0.0,
                       .work = m.work[n],
                       .requests = m.load[n]});
    }
    const std::optional<uint32_t> core =
        keys ? choose_core(cores, prompt.size()) : least_loaded(cores);
    uint64_t work = 0;
    if (core && keys) work = request_work(prompt.size(), cores[*core].cached, max_tokens);
    if (!core) return make_error(ErrorCode::kUnavailable, "engine: no engine core is serving");
    const std::string id = "r" + std::to_string(m.next_id++);
    stream = std::make_shared<RequestStream>(id);
    m.counters.prompt_tokens_total += prompt.size();
    ++m.counters.requests_total;
    ++m.load[*core];
    m.work[*core] += work;
    m.requests[id] = InFlight{*core, stream, false, work};
    m.outbox.emplace_back(
        "core-" + std::to_string(*core),
        nlohmann::json{
            {"t", "add"}, {"id", id}, {"prompt", std::move(prompt)}, {"max_tokens", max_tokens}});
  }
  m.wake();
  return stream;
}

void CoreManager::abort(const std::string& id) {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.mutex);
    auto it = m.requests.find(id);
    if (it == m.requests.end()) return;
    m.outbox.emplace_back("core-" + std::to_string(it->second.core),
                          nlohmann::json{{"t", "abort"}, {"id", id}});
    StreamEvent event;
    event.kind = StreamEvent::Kind::kError;
    event.error = "aborted";
    it->second.stream->push(std::move(event));
    --m.load[it->second.core];
    m.work[it->second.core] -= it->second.work;
    m.requests.erase(it);
  }
  m.wake();
}

HealthReport CoreManager::health() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->health.report();
}

EngineMetrics CoreManager::metrics() const {
  std::lock_guard lock(impl_->mutex);
  EngineMetrics metrics = impl_->counters;
  metrics.healthy = impl_->health.report().healthy();
  metrics.requests_in_flight = impl_->requests.size();
  return metrics;
}

size_t CoreManager::indexed_blocks(uint32_t core, std::string_view medium) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->index.blocks(core, medium);
}

std::optional<uint32_t> CoreManager::core_of(const std::string& id) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->requests.find(id);
  if (it == impl_->requests.end()) return std::nullopt;
  return it->second.core;
}

pid_t CoreManager::core_pid(uint32_t core) const {
  return impl_->pids.at(core);
}

void CoreManager::shutdown() {
  Impl& m = *impl_;
  std::lock_guard shutdown_lock(m.shutdown_mutex);
  if (m.shut_down) return;
  m.shut_down = true;
  {
    std::unique_lock lock(m.mutex);
    m.closing = true;
    m.health.close();  // 503 "closed" from here on (H3)
    m.end_requests_of(std::nullopt, "the engine is shutting down");
    for (uint32_t n = 0; n < m.options.engine_cores; ++n) {
      m.outbox.emplace_back("core-" + std::to_string(n), nlohmann::json{{"t", "shutdown"}});
    }
    m.wake();
    // Wait for the cores that can hear the message: not those that never said hello (their
    // socket may not be connected) nor stalled ones. The rest are killed below.
    m.core_exited.wait_for(lock, m.options.shutdown_grace, [&] {
      for (uint32_t n = 0; n < m.exited.size(); ++n) {
        const CoreHealth& core = m.health.core(n);
        const bool listening = core.ready && core.failure != CoreFailure::kStalled;
        if (!m.exited[n] && listening) return false;
      }
      return true;
    });
  }
  m.stop = true;
  m.io_thread.join();
  for (ChildProcess& core : m.cores) core.kill_and_reap();
  m.socket.close();
  if (m.options.remove_run_dir) {
    std::error_code ignored;
    std::filesystem::remove_all(m.options.run_dir, ignored);
  }
}

}  // namespace kvtier
