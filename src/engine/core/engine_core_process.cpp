#include "kvtier/engine/engine_core_process.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <vector>

#include "kvtier/core/child_process.h"
#include "kvtier/core/log.h"
#include "kvtier/core/stop_signals.h"
#include "kvtier/engine/engine_scheduler.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/engine/heartbeat_counters.h"
#include "kvtier/engine/progress_watchdog.h"
#include "kvtier/engine/step_messages.h"
#include "kvtier/engine/wire.h"

namespace kvtier {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(10);
constexpr auto kStartupTimeout = std::chrono::seconds(60);

class EngineCore {
 public:
  EngineCore(const Config& config, uint32_t core, const std::string& run_dir,
             const std::string& config_path, const std::atomic<bool>& stop_requested)
      : stop_requested_(stop_requested),
        config_(config),
        core_(core),
        shape_(engine_shape(config)),
        events_(make_publisher(config, core, run_dir)),
        scheduler_(engine_core_config(config, core), shape_, host_pool_name(config, getpid())),
        frontend_(context_, zmq::socket_type::dealer),
        workers_socket_(context_, zmq::socket_type::router),
        heartbeat_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(config.engine.heartbeat_interval_s))),
        stall_timeout_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(config.engine.stall_timeout_s))),
        watchdog_(seconds_to_duration(config.engine.progress_timeout_s)) {
    lossless_queues(frontend_);
    lossless_queues(workers_socket_);
    frontend_.set(zmq::sockopt::linger, 1000);
    frontend_.set(zmq::sockopt::routing_id, "core-" + std::to_string(core));
    frontend_.connect(frontend_endpoint(run_dir));
    workers_socket_.set(zmq::sockopt::linger, 0);
    workers_socket_.set(zmq::sockopt::router_mandatory, 0);
    workers_socket_.bind(core_endpoint(run_dir, core));
    scheduler_.publish_events(events_.get());
    const std::string exe = self_executable();
    for (uint32_t r = 0; r < shape_.world_size; ++r) {
      workers_.push_back(Worker{.process = ChildProcess::spawn(
                                    {exe, "worker", std::to_string(core) + "/" + std::to_string(r),
                                     "--run-dir", run_dir, "--config", config_path}),
                                .last_heard = Clock::now()});
    }
  }

  int run() {
    if (!wait_for_workers()) return stop(1);
    // Every worker mapped its share of the host pool (it says hello after): from now on no
    // crash leaves the shared memory behind.
    scheduler_.unlink_host_memory_names();
    std::vector<pid_t> pids;
    for (const Worker& w : workers_) pids.push_back(w.process.pid());
    send_message(frontend_,
                 {{"t", "hello"}, {"core", core_}, {"pid", getpid()}, {"workers", pids}});
    auto next_heartbeat = Clock::now();
    for (;;) {
      zmq::pollitem_t items[] = {{frontend_.handle(), 0, ZMQ_POLLIN, 0},
                                 {workers_socket_.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, kPoll);
      // SIGINT/SIGTERM: as a shutdown message. Before the workers are checked: they got the
      // signal too, and one that exited of it has not failed.
      if (stop_requested_.load()) return stop(0);
      // A worker's messages before its process: a worker's fatal message names the cause.
      while (auto msg = try_receive(workers_socket_, true)) {
        if (!*msg) continue;
        if (auto reason = on_worker_message(**msg)) return fail(*reason);
      }
      if (const auto reason = check_workers()) return fail(*reason);
      while (auto msg = try_receive(frontend_, false)) {
        if (!*msg) {
          log_warning(msg->error().message);
          continue;
        }
        if ((*msg)->body["t"] == "shutdown") return stop(0);
        on_frontend_message((*msg)->body);
      }
      if (step_in_flight_ && done_count_ == shape_.world_size) {
        if (auto reason = finish_step()) return fail(*reason);
      }
      if (!step_in_flight_ && scheduler_.has_work()) start_step();
      if (Clock::now() >= next_heartbeat) {
        // F8 without the step's results: a step whose compute waits for a load that never
        // completes (F10) never ends, and the watchdog excepts transfers in flight.
        if (step_in_flight_) {
          if (auto late = scheduler_.overdue_transfer()) {
            return fail("fail-stop (F8): " + *late + ", and the step waiting for it has not ended");
          }
        }
        // H8 at the heartbeat's pace, not every step: a snapshot copies every request's id.
        if (auto stuck = watchdog_.observe(Clock::now(), scheduler_.progress())) {
          return fail("no progress (H8): " + *stuck);
        }
        send_heartbeat();
        next_heartbeat = Clock::now() + heartbeat_;
      }
    }
  }

 private:
  struct Worker {
    ChildProcess process;
    Clock::time_point last_heard;
    bool registered = false;
    bool done = false;
    std::vector<TokenId> tokens;
    std::optional<WorkerOutput> output;
    std::optional<InjectedFaultCounts> faults;  // as of its last done message, with fault injection
  };

  // The endpoints: events.endpoint (numbered by core), and the run dir's for the frontend's
  // routing when it routes by cache over several cores.
  static std::unique_ptr<KvEventPublisher> make_publisher(const Config& config, uint32_t core,
                                                          const std::string& run_dir) {
    KvEventPublisherOptions options{.buffer_batches = config.events.buffer_batches,
                                    .data_parallel_rank = core};
    if (!config.events.endpoint.empty()) {
      options.endpoints.push_back(core_events_endpoint(config.events.endpoint, core));
    }
    if (!config.events.replay_endpoint.empty()) {
      options.replay_endpoints.push_back(core_events_endpoint(config.events.replay_endpoint, core));
    }
    if (routes_by_cache(config)) {
      options.endpoints.push_back(events_endpoint(run_dir, core));
      options.replay_endpoints.push_back(events_replay_endpoint(run_dir, core));
    }
    if (options.endpoints.empty()) return nullptr;
    return std::make_unique<KvEventPublisher>(std::move(options));
  }

  std::string worker_name(uint32_t rank) const {
    return "worker " + std::to_string(core_) + "/" + std::to_string(rank) + " (pid " +
           std::to_string(workers_[rank].process.pid()) + ")";
  }

  bool wait_for_workers() {
    const auto deadline = Clock::now() + kStartupTimeout;
    size_t registered = 0;
    while (registered < workers_.size()) {
      if (Clock::now() > deadline) {
        send_failed("workers did not register within " + std::to_string(kStartupTimeout.count()) +
                    " s");
        return false;
      }
      if (const auto reason = check_workers()) {
        send_failed(*reason);
        return false;
      }
      zmq::pollitem_t item{workers_socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, kPoll);
      while (auto msg = try_receive(workers_socket_, true)) {
        if (!*msg) continue;
        const auto rank = rank_of((*msg)->peer);
        if (!rank) continue;
        workers_[*rank].last_heard = Clock::now();
        if ((*msg)->body["t"] == "hello" && !workers_[*rank].registered) {
          workers_[*rank].registered = true;
          ++registered;
        } else if ((*msg)->body["t"] == "fatal") {
          send_failed(worker_name(*rank) + ": " + (*msg)->body.value("message", std::string()));
          return false;
        }
      }
    }
    return true;
  }

  std::optional<uint32_t> rank_of(const std::string& peer) const {
    if (peer.size() < 2 || peer[0] != 'w') return std::nullopt;
    try {
      const unsigned long r = std::stoul(peer.substr(1));
      if (r < workers_.size()) return static_cast<uint32_t>(r);
    } catch (...) {
    }
    return std::nullopt;
  }

  // H2, H6: a dead or silent worker.
  std::optional<std::string> check_workers() {
    const auto now = Clock::now();
    for (uint32_t r = 0; r < workers_.size(); ++r) {
      if (const auto& exit = workers_[r].process.poll_exit()) {
        return worker_name(r) + " died: " + *exit;
      }
      if (workers_[r].registered && now - workers_[r].last_heard > stall_timeout_) {
        return worker_name(r) + " stalled: silent for more than " +
               std::to_string(config_.engine.stall_timeout_s) + " s";
      }
    }
    return std::nullopt;
  }

  std::optional<std::string> on_worker_message(const Envelope& msg) {
    const auto rank = rank_of(msg.peer);
    if (!rank) return std::nullopt;
    Worker& w = workers_[*rank];
    w.last_heard = Clock::now();
    const std::string type = msg.body["t"];
    if (type == "fatal")
      return worker_name(*rank) + ": " + msg.body.value("message", std::string());
    if (type != "done" || !step_in_flight_ || w.done) return std::nullopt;
    try {
      if (msg.body.at("step").get<uint64_t>() != step_) return std::nullopt;
      w.tokens = msg.body.at("tokens").get<std::vector<TokenId>>();
      w.output = worker_output_from_json(msg.body.at("output"));
      if (msg.body.contains("faults"))
        w.faults = injected_fault_counts_from_json(msg.body.at("faults"));
      // Checked before the step is finished with it: a count the scheduler refuses would throw
      // there, and another rank's output would count as that rank's repeated verdict (F9).
      if (w.tokens.size() != step_batch_size_) {
        throw std::invalid_argument(std::to_string(w.tokens.size()) + " tokens for a batch of " +
                                    std::to_string(step_batch_size_));
      }
      if (w.output->rank != *rank) {
        throw std::invalid_argument("the output of rank " + std::to_string(w.output->rank));
      }
    } catch (const std::exception& e) {
      return worker_name(*rank) + " sent a malformed result: " + e.what();
    }
    w.done = true;
    ++done_count_;
    return std::nullopt;
  }

  void on_frontend_message(const nlohmann::json& body) {
    const std::string type = body["t"];
    try {
      if (type == "add") {
        auto error = scheduler_.add(body.at("id").get<std::string>(),
                                    body.at("prompt").get<std::vector<TokenId>>(),
                                    body.at("max_tokens").get<size_t>());
        if (error) send_update(*error);
      } else if (type == "abort") {
        scheduler_.abort(body.at("id").get<std::string>());
      }
    } catch (const std::exception& e) {
      log_warning("bad " + type + " message: " + e.what());
    }
  }

  void start_step() {
    const StepPlan plan = scheduler_.plan_step();
    nlohmann::json batch = nlohmann::json::array();
    for (const BatchEntry& e : plan.batch) {
      batch.push_back(
          {{"start", e.start},
           {"tokens", e.tokens},
           {"tables", std::vector<std::vector<uint32_t>>(shape_.layout.groups.size(), e.table)}});
    }
    const nlohmann::json msg = {{"t", "step"},
                                {"step", plan.step},
                                {"batch", std::move(batch)},
                                {"meta", to_json(plan.metadata)}};
    step_ = plan.step;
    step_batch_size_ = plan.batch.size();
    for (uint32_t r = 0; r < workers_.size(); ++r) {
      workers_[r].done = false;
      workers_[r].output.reset();
      send_message_to(workers_socket_, "w" + std::to_string(r), msg);
    }
    done_count_ = 0;
    step_in_flight_ = true;
  }

  std::optional<std::string> finish_step() {
    step_in_flight_ = false;
    std::vector<WorkerOutput> outputs;
    for (Worker& w : workers_) outputs.push_back(std::move(*w.output));
    for (const RequestUpdate& u : scheduler_.finish_step(workers_[0].tokens, outputs))
      send_update(u);
    if (scheduler_.fail_stopped()) return "fail-stop (F7): " + scheduler_.fail_stop_reason();
    return std::nullopt;
  }

  void send_update(const RequestUpdate& u) {
    if (!u.error.empty()) {
      send_message(
          frontend_,
          {{"t", "err"}, {"id", u.id}, {"message", u.error}, {"status", u.rejected ? 400 : 503}});
      return;
    }
    send_message(frontend_,
                 {{"t", "out"},
                  {"id", u.id},
                  {"tokens", u.new_tokens},
                  {"done", u.done},
                  {"finish_reason", u.done ? nlohmann::json(u.finish_reason) : nlohmann::json()},
                  {"prompt_tokens", u.prompt_tokens},
                  {"cached_tokens", u.cached_tokens}});
  }

  void send_heartbeat() {
    std::optional<InjectedFaultCounts> faults;
    for (const Worker& w : workers_)
      if (w.faults) (faults ? *faults : faults.emplace()) += *w.faults;
    HeartbeatCounters c =
        heartbeat_counters(scheduler_.counters(), scheduler_.connector_counters(),
                           scheduler_.cache_counters(), scheduler_.tier_counters(), faults);
    send_message(frontend_, {{"t", "hb"},
                             {"core", core_},
                             {"degraded", scheduler_.degraded()},
                             {"counters", std::move(c.values)},
                             {"kinds", std::move(c.kinds)}});
  }

  void send_failed(const std::string& reason) {
    send_message(frontend_, {{"t", "failed"}, {"core", core_}, {"reason", reason}});
  }

  // H2: the failure is reported first; then requests end (H5) and the workers stop.
  int fail(const std::string& reason) {
    log_error("failed: " + reason);
    send_failed(reason);
    for (const RequestUpdate& u :
         scheduler_.fail_all("engine core " + std::to_string(core_) + " failed: " + reason)) {
      send_update(u);
    }
    return stop(1);
  }

  // Graceful (code 0): workers get a shutdown message and 2 s to exit. After a failure they are
  // killed at once: a rank blocked in the collective with a dead peer never reads a message.
  int stop(int code) {
    for (uint32_t r = 0; r < workers_.size(); ++r) {
      send_message_to(workers_socket_, "w" + std::to_string(r), {{"t", "shutdown"}});
    }
    const auto deadline =
        Clock::now() + (code == 0 ? std::chrono::seconds(2) : Clock::duration::zero());
    for (Worker& w : workers_) {
      while (!w.process.poll_exit() && Clock::now() < deadline) {
        zmq::pollitem_t item{workers_socket_.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, kPoll);
        while (try_receive(workers_socket_, true)) {
        }
      }
      w.process.kill_and_reap();
    }
    frontend_.close();
    return code;
  }

  const std::atomic<bool>& stop_requested_;
  const Config config_;
  const uint32_t core_;
  const EngineShape shape_;
  // The KV events of this core's caches (null when none is asked for); outlives scheduler_.
  std::unique_ptr<KvEventPublisher> events_;
  EngineScheduler scheduler_;
  zmq::context_t context_;
  zmq::socket_t frontend_;
  zmq::socket_t workers_socket_;
  std::vector<Worker> workers_;
  const Clock::duration heartbeat_;
  const Clock::duration stall_timeout_;
  ProgressWatchdog watchdog_;
  bool step_in_flight_ = false;
  uint64_t step_ = 0;
  size_t step_batch_size_ = 0;  // the sequences of step_: each rank's done has a token for each
  uint32_t done_count_ = 0;
};

}  // namespace

int run_engine_core(const Config& config, uint32_t core, const std::string& run_dir,
                    const std::string& config_path) {
  std::atomic<bool> stop_requested{false};
  // Before any thread starts (ZeroMQ's); the workers it spawns get the signals as usual.
  StopSignals stop_signals;
  stop_signals.deliver_to([&stop_requested] { stop_requested.store(true); });
  try {
    EngineCore engine(config, core, run_dir, config_path, stop_requested);
    return engine.run();
  } catch (const std::exception& e) {
    log_error(std::string("fatal: ") + e.what(), {{"core", std::to_string(core)}});
    return 1;
  }
}

}  // namespace kvtier
