#include "chaos_bench.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bench_row.h"
#include "chaos_requests.h"
#include "kvtier/core/child_process.h"
#include "kvtier/core/config.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtierd_instance.h"
#include "record_flips.h"
#include "redis_process.h"
#include "serve_instance.h"

namespace kvtier::bench {
namespace {

using BenchClock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

// The bounds the oracle holds the system to (docs/engine.md, "Health"; "Chaos bench").
constexpr double kStallTimeoutS = 1.0;            // engine.stall_timeout_s of every instance
constexpr double kRequestTimeoutS = 20.0;         // engine.request_timeout_s
constexpr milliseconds kKillTo503{1000};          // H2/H3: a dead worker or core
constexpr milliseconds kStallTo503{1000 + 1000};  // H6: stall_timeout_s + one second
constexpr milliseconds kRequestSlack{3000};       // a request ends by its timeout plus this
constexpr milliseconds kAuditWait{5000};          // quiet period: the audits must pass by then
constexpr double kEpochSeconds = 5.0;

double ms_between(BenchClock::time_point a, BenchClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Samples of `name` per `core` label.
std::map<std::string, double> metric_by_core(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  std::map<std::string, double> values;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(name + "{core=\"")) continue;
    const size_t start = name.size() + 7;
    const std::string core = line.substr(start, line.find('"', start) - start);
    values[core] = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return values;
}

std::string health_status(const HttpAnswer& a) {
  const auto j = nlohmann::json::parse(a.body, nullptr, false);
  return j.is_object() ? j.value("status", "") : "";
}

// What the run found, shared by the client, poller and driver threads.
class Tally {
 public:
  void fault(const std::string& kind, uint64_t n = 1) {
    std::lock_guard lock(mutex_);
    faults_[kind] += n;
    total_faults_ += n;
  }
  // The epoch running now, named in what violation() prints.
  void epoch(uint64_t number, const std::string& mode) {
    std::lock_guard lock(mutex_);
    epoch_ = "epoch " + std::to_string(number) + " (" + mode + ")";
  }
  // A violation of the oracle: counted under `what`, the first ones printed to stderr.
  void violation(const std::string& what, const std::string& detail) {
    std::lock_guard lock(mutex_);
    ++violations_[what];
    if (printed_++ < 50) {
      std::cerr << "bench chaos: " << what << ": " << epoch_ << ": " << detail << "\n";
    }
  }
  void completed() { ++completed_; }
  void failed_request() { ++failed_requests_; }
  void not_ready() { ++not_ready_; }
  uint64_t not_ready_count() const { return not_ready_; }

  uint64_t total_faults() const {
    std::lock_guard lock(mutex_);
    return total_faults_;
  }
  uint64_t violations(const std::string& what) const {
    std::lock_guard lock(mutex_);
    const auto it = violations_.find(what);
    return it == violations_.end() ? 0 : it->second;
  }
  nlohmann::ordered_json faults_by_kind() const {
    std::lock_guard lock(mutex_);
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [k, v] : faults_) j[k] = v;
    return j;
  }
  uint64_t completed_count() const { return completed_; }
  uint64_t failed_count() const { return failed_requests_; }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> faults_;
  uint64_t total_faults_ = 0;
  std::map<std::string, uint64_t> violations_;
  uint64_t printed_ = 0;
  std::string epoch_ = "before the first epoch";
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> failed_requests_{0};
  std::atomic<uint64_t> not_ready_{0};
};

// The tiers kvtierd runs with in server-mode epochs, and kvtierd itself; restarted by the
// driver when a fault took them down.
struct ServerSide {
  std::filesystem::path disk;
  std::unique_ptr<RedisServerProcess> redis;
  std::unique_ptr<KvtierdInstance> kvtierd;
};

// kvtierd or Redis ended without the driver's kill: a crash (a cache server must survive
// whatever its clients and its disk do). Before they are started again.
void tally_server_side_crashes(ServerSide& side, Tally& tally) {
  if (const auto how = side.kvtierd->crashed()) tally.violation("crashes", "kvtierd " + *how);
  if (const auto how = side.redis->crashed()) tally.violation("crashes", "redis-server " + *how);
}

// Polls /health of one instance: once it said failed or stalled, a 200 is a lie (H2: a failure
// stays). Also keeps the latest /metrics text.
class HealthPoller {
 public:
  HealthPoller(const ServeInstance& serve, Tally& tally)
      : serve_(serve), tally_(tally), thread_([this] { loop(); }) {}
  ~HealthPoller() {
    stop_ = true;
    thread_.join();
  }
  bool failed() const { return failed_; }
  std::string failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
  }
  std::string metrics() const {
    std::lock_guard lock(mutex_);
    return metrics_;
  }

 private:
  void loop() {
    for (uint64_t n = 0; !stop_; ++n) {
      const auto asked = BenchClock::now();
      const HttpAnswer a = serve_.get("/health");
      const std::string status = health_status(a);
      if (a.status == 503 && (status == "failed" || status == "stalled") && !failed_) {
        std::lock_guard lock(mutex_);
        failure_ = a.body;
        failed_at_ = BenchClock::now();
        failed_ = true;
      } else if (a.status == 200 && failed_ && asked > failed_at_) {
        tally_.violation("dishonest_health", "/health 200 after it said " + failure());
      }
      if (n % 10 == 0 && !failed_) {
        const HttpAnswer m = serve_.get("/metrics");
        if (m.status == 200) {
          std::lock_guard lock(mutex_);
          metrics_ = m.body;
        }
      }
      std::this_thread::sleep_for(10ms);  // polling pace
    }
  }

  const ServeInstance& serve_;
  Tally& tally_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  std::string failure_;
  std::string metrics_;
  BenchClock::time_point failed_at_;
  std::thread thread_;
};

// Clients streaming the request set until stopped; each response is checked against the
// reference.
class Clients {
 public:
  Clients(const ServeInstance& serve, const std::vector<ChaosRequest>& requests, size_t max_tokens,
          uint64_t seed, Tally& tally, size_t count = 4)
      : serve_(serve), requests_(requests), max_tokens_(max_tokens), tally_(tally) {
    for (size_t c = 0; c < count; ++c) threads_.emplace_back([this, seed, c] { loop(seed + c); });
  }
  ~Clients() { stop(); }
  void stop() {
    stop_ = true;
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }
  uint64_t completed() const { return completed_; }

 private:
  void loop(uint64_t seed) {
    std::mt19937_64 rng(seed);
    const milliseconds bound =
        std::chrono::duration_cast<milliseconds>(std::chrono::duration<double>(kRequestTimeoutS)) +
        kRequestSlack;
    while (!stop_) {
      const size_t i = rng() % requests_.size();
      std::optional<size_t> hang_up;
      if (rng() % 100 < 15) hang_up = 1 + rng() % 4;
      const StreamResult r = serve_.stream(requests_[i].prompt, max_tokens_, bound + 10s, hang_up);
      const std::string& expected = requests_[i].reference;
      const std::string which = "request " + std::to_string(i);
      if (r.wall_ms > static_cast<double>(bound.count())) {
        tally_.violation("hung_requests", which + " took " + std::to_string(r.wall_ms) + " ms");
      }
      // How much of the prompt a cache served, when the stream got as far as its usage.
      const std::string cached = r.cached_tokens && r.prompt_tokens
                                     ? " (" + std::to_string(*r.cached_tokens) + " of its " +
                                           std::to_string(*r.prompt_tokens) +
                                           " prompt tokens cached)"
                                     : "";
      if (!expected.starts_with(r.text)) {
        tally_.violation("wrong_outputs", which + ": got \"" + r.text + "\", the reference is \"" +
                                              expected + "\"" + cached);
      } else if (r.status == 200 && r.done && !r.hung_up) {
        if (r.text != expected) {
          tally_.violation("wrong_outputs", which + " completed with \"" + r.text +
                                                "\", the reference is \"" + expected + "\"" +
                                                cached);
        }
        tally_.completed();
        ++completed_;
      } else if (r.hung_up) {
        tally_.fault("client_disconnect");
      } else {
        tally_.failed_request();
        if (r.status == 503 || r.status == 0)
          std::this_thread::sleep_for(20ms);  // an unhealthy instance: pace the retries
      }
    }
  }

  const ServeInstance& serve_;
  const std::vector<ChaosRequest>& requests_;
  size_t max_tokens_;
  Tally& tally_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> completed_{0};
  std::vector<std::thread> threads_;
};

std::vector<pid_t> cores_of(const ServeInstance& serve) {
  return child_processes(serve.pid());
}

std::vector<pid_t> workers_of(const ServeInstance& serve) {
  std::vector<pid_t> workers;
  for (pid_t core : cores_of(serve))
    for (pid_t w : child_processes(core)) workers.push_back(w);
  return workers;
}

// Polls /health until it answers 503 or `bound` after `since` passes; whether a poll started
// within the bound saw 503.
bool health_503_within(const ServeInstance& serve, BenchClock::time_point since,
                       milliseconds bound) {
  for (;;) {
    const auto asked = BenchClock::now();
    if (asked > since + bound) return false;
    if (serve.get("/health").status == 503) return true;
    std::this_thread::sleep_for(5ms);  // polling pace
  }
}

// The last `max_lines` lines of the file at `path`.
std::string last_lines(const std::filesystem::path& path, size_t max_lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(std::move(line));
    if (tail.size() > max_lines) tail.pop_front();
  }
  std::string text;
  for (const std::string& line : tail) text += line + "\n";
  return text;
}

// A log's lines, to stderr, each named by `name`: a run that found wrong outputs removes
// the instances' and kvtierd's directories, and with them the only record of what they saw.
void print_log_tail(const std::string& name, const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    std::cerr << "bench chaos: " << name << ": " << line << "\n";
}

// The device faults of an epoch's instance: the `faults` section's rates, direction and seed.
struct DeviceFaults {
  std::vector<std::string> sets;
  std::string description;
  bool may_fail_stop = false;  // record failures drawn
};

DeviceFaults draw_device_faults(std::mt19937_64& rng) {
  DeviceFaults f;
  std::uniform_real_distribution<double> unit(0, 1);
  std::ostringstream d;
  auto maybe = [&](const char* field, double p, double scale) {
    if (unit(rng) >= p) return;
    const double r = (0.02 + 0.28 * unit(rng)) * scale;
    f.sets.push_back(std::string("faults.") + field + "=" + std::to_string(r));
    f.may_fail_stop = f.may_fail_stop || std::string_view(field) == "record_failure_rate";
    d << field << "=" << std::to_string(r) << " ";
  };
  maybe("submit_failure_rate", 0.6, 1);
  maybe("latched_error_rate", 0.5, 1);
  maybe("delay_rate", 0.5, 1);
  maybe("record_failure_rate", 0.15, 0.1);  // Unprovable: the engine fail-stops (F7)
  static const char* directions[] = {"both", "load", "store"};
  const char* direction = directions[rng() % 3];
  f.sets.push_back(std::string("faults.direction=") + direction);
  f.sets.push_back("faults.seed=" + std::to_string(rng() % 1000000));
  d << "direction=" << direction;
  f.description = d.str();
  return f;
}

// One epoch: an instance with its own device faults, clients, and a schedule of faults until
// the epoch's time is up or a fatal fault took the instance down.
class Epoch {
 public:
  // `may_fail_stop`: the instance's device faults include record failures (Unprovable, F7).
  Epoch(ServeInstance& serve, bool server, bool may_fail_stop, std::mt19937_64& rng,
        ServerSide& side, Tally& tally)
      : serve_(serve),
        server_(server),
        may_fail_stop_(may_fail_stop),
        rng_(rng),
        side_(side),
        tally_(tally) {}

  // Returns the epoch's row (without its number and device faults).
  nlohmann::ordered_json run(const std::vector<ChaosRequest>& requests, size_t max_tokens) {
    const uint64_t faults_before = tally_.total_faults();
    const uint64_t wrong_before = tally_.violations("wrong_outputs");
    const auto start = BenchClock::now();
    std::string ended = "time", audit = "skipped";
    uint64_t completed = 0;
    std::string metrics;
    {
      HealthPoller poller(serve_, tally_);
      Clients clients(serve_, requests, max_tokens, rng_(), tally_);
      const auto end = start + std::chrono::duration_cast<BenchClock::duration>(
                                   std::chrono::duration<double>(kEpochSeconds));
      // At most one fault meant to be fatal per epoch, at a drawn time (max(): none).
      constexpr BenchClock::time_point kNoFatalFault = BenchClock::time_point::max();
      BenchClock::time_point fatal_at = kNoFatalFault;
      if (rng_() % 100 < 70) fatal_at = start + milliseconds(300 + rng_() % 3500);
      while (BenchClock::now() < end && !poller.failed()) {
        resume_due();
        if (BenchClock::now() >= fatal_at) {
          fatal_at = kNoFatalFault;
          resume_due(true);
          fatal_fault(poller);
          continue;
        }
        light_fault();
        std::this_thread::sleep_for(milliseconds(5 + rng_() % 30));  // the schedule's pace
      }
      resume_due(true);
      // kvtierd or Redis taken down: the orchestrator brings them back.
      if (server_) restore_server_side();
      clients.stop();  // the quiet period begins: no new request
      completed = clients.completed();
      if (const auto how = serve_.ended()) {
        // The driver never signals the frontend: it ended on its own.
        ended = "kvtier serve " + *how;
        judge_frontend_end(*how);
      } else if (poller.failed()) {
        ended = poller.failure();
        judge_failure(ended);
      } else {
        audit = audit_quiet();
        ended = "quiet";
      }
      metrics = poller.metrics();
    }
    // Device faults the workers' injectors drew, as of the last heartbeat the poller saw (a
    // worker's copies that faulted after it, or in a killed instance, go uncounted).
    for (const char* kind : {"submit_failures", "latched_errors", "record_failures", "hangs",
                             "delays", "non_device_errors"}) {
      const auto n = static_cast<uint64_t>(
          metric_sum(metrics, std::string("kvtier_core_fault_injector_") + kind + "_total"));
      if (n > 0) tally_.fault(std::string("device_") + kind, n);
    }
    // Wrong outputs: the instance's log goes with it at the epoch's end, so its tail is kept.
    const uint64_t wrong = tally_.violations("wrong_outputs") - wrong_before;
    if (wrong > 0) print_log_tail("serve.log", serve_.log_tail(8000));
    return nlohmann::ordered_json{{"faults", tally_.total_faults() - faults_before},
                                  {"requests_completed", completed},
                                  {"wrong_outputs", wrong},
                                  {"wall_s", ms_between(start, BenchClock::now()) / 1000},
                                  {"ended", ended},
                                  {"audit", audit},
                                  {"fatal_fault", fatal_kind_}};
  }

 private:
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[rng_() % v.size()];
  }

  // A stop shorter than the stall timeout (the instance must live on): SIGSTOP now, SIGCONT by
  // resume_due() once its drawn length passed. A process is stopped at most once at a time.
  void stop_briefly(const std::string& who, std::function<bool()> stop,
                    std::function<void()> resume, const std::string& kind) {
    for (const Stopped& s : stopped_)
      if (s.who == who) return;
    if (!stop()) return;
    const auto until = BenchClock::now() + milliseconds(20 + rng_() % 200);
    stopped_.push_back({who, std::move(resume), until});
    tally_.fault(kind);
  }
  void stop_pid_briefly(pid_t pid, const std::string& kind) {
    stop_briefly(
        std::to_string(pid), [pid] { return send_signal(pid, SIGSTOP); },
        [pid] { send_signal(pid, SIGCONT); }, kind);
  }
  // Resumes the stopped processes whose stop has lasted its length (all of them with `all`).
  void resume_due(bool all = false) {
    const auto now = BenchClock::now();
    std::erase_if(stopped_, [&](Stopped& s) {
      if (!all && s.until > now) return false;
      s.resume();
      return true;
    });
  }

  // Faults the instance survives: short stops, flipped tier records.
  void light_fault() {
    const uint64_t draw = rng_() % 100;
    if (server_ && draw < 40) {
      if (side_.redis->running() && draw < 15) {
        if (flip_redis_record(*side_.redis, rng_)) tally_.fault("redis_record_flip");
      } else if (flip_disk_record(side_.disk, rng_)) {
        tally_.fault("disk_record_flip");
      }
      return;
    }
    if (server_ && draw < 46) {
      if (side_.kvtierd->running()) stop_pid_briefly(side_.kvtierd->pid(), "sigstop_kvtierd_short");
      return;
    }
    if (server_ && draw < 52) {
      if (!side_.redis->running()) return;
      RedisServerProcess& redis = *side_.redis;
      stop_briefly(
          "redis",
          [&redis] {
            redis.pause();
            return true;
          },
          [&redis] { redis.resume(); }, "sigstop_redis_short");
      return;
    }
    if (draw < 80) {
      const std::vector<pid_t> workers = workers_of(serve_);
      if (!workers.empty()) stop_pid_briefly(pick(workers), "sigstop_worker_short");
      return;
    }
    const std::vector<pid_t> cores = cores_of(serve_);
    if (!cores.empty()) stop_pid_briefly(pick(cores), "sigstop_engine_core_short");
  }

  void note_fatal(const std::string& kind) {
    fatal_kind_ = kind;
    tally_.fault(kind);
  }

  // An instance that failed: a process killed by a signal the driver did not send crashed (a
  // defect); a failure with no fatal fault and no record failure drawn is unexplained (shown, for
  // a person to judge), and so is a stall after a long stop of kvtierd or Redis: a paused cache
  // server holds steps, but the processes waiting for it keep heartbeating (H6, H7).
  // The frontend process ended: killed by a signal, a crash; an exit of its own, unexplained.
  void judge_frontend_end(const std::string& how) {
    tally_.violation(how.starts_with("killed by signal") ? "crashes" : "unexplained_failures",
                     "kvtier serve " + how);
  }

  void judge_failure(const std::string& reason) {
    static const std::regex signal(R"(killed by signal ([0-9]+))");
    std::smatch m;
    if (std::regex_search(reason, m, signal) && m[1] != "9")
      tally_.violation("crashes", "epoch instance: " + reason);
    if (fatal_kind_.empty() && !may_fail_stop_) tally_.violation("unexplained_failures", reason);
    const bool cache_paused =
        fatal_kind_ == "sigstop_kvtierd_long" || fatal_kind_ == "sigstop_redis_long";
    if (cache_paused && reason.find("stalled") != std::string::npos)
      tally_.violation("unexplained_failures", "after " + fatal_kind_ + ": " + reason);
  }

  // A fault that takes down a process: the health oracle's bounds apply.
  void fatal_fault(const HealthPoller& poller) {
    const uint64_t kinds = server_ ? 8 : 4;
    const uint64_t kind = rng_() % kinds;
    if (kind < 4) {
      const bool core = kind % 2 == 1;
      const std::vector<pid_t> pids = core ? cores_of(serve_) : workers_of(serve_);
      if (pids.empty()) return;
      const pid_t pid = pick(pids);
      const std::string who = core ? "engine_core" : "worker";
      const auto t0 = BenchClock::now();
      if (kind < 2) {
        if (!send_signal(pid, SIGKILL)) return;
        note_fatal("sigkill_" + who);
        if (!health_503_within(serve_, t0, kKillTo503))
          tally_.violation("dishonest_health", "no 503 within " +
                                                   std::to_string(kKillTo503.count()) +
                                                   " ms of SIGKILL of the " + who);
      } else {
        if (!send_signal(pid, SIGSTOP)) return;
        note_fatal("sigstop_" + who + "_long");
        if (!health_503_within(serve_, t0, kStallTo503))
          tally_.violation("dishonest_health", "no 503 within " +
                                                   std::to_string(kStallTo503.count()) +
                                                   " ms of SIGSTOP of the " + who);
        send_signal(pid, SIGCONT);
      }
      // The poller holds a later 200 to account (a failure stays); it sees the failure too.
      const auto deadline = BenchClock::now() + 2s;
      while (!poller.failed() && BenchClock::now() < deadline)
        std::this_thread::sleep_for(5ms);  // polling pace
      // A 503 so brief that the poller missed it, and a 200 now: the failure did not stay.
      if (!poller.failed() && serve_.health() == 200)
        tally_.violation("dishonest_health",
                         "/health 200 again within 2 s of its 503 after the " + who + "'s fault");
      std::this_thread::sleep_for(200ms);  // a window for the poller to catch a lie
      return;
    }
    // kvtierd and Redis: killed or stopped past their timeouts, brought back by the driver. The
    // engine either says degraded (H7) or fails a transfer it cannot prove (F7) and says so.
    switch (kind) {
      case 4:
        side_.kvtierd->kill();
        note_fatal("sigkill_kvtierd");
        break;
      case 5:
        side_.kvtierd->signal(SIGSTOP);
        std::this_thread::sleep_for(milliseconds(1000 + rng_() % 1000));
        side_.kvtierd->signal(SIGCONT);
        note_fatal("sigstop_kvtierd_long");
        break;
      case 6:
        side_.redis->kill();
        note_fatal("sigkill_redis");
        break;
      default:
        side_.redis->pause();
        std::this_thread::sleep_for(milliseconds(1000 + rng_() % 1000));
        side_.redis->resume();
        note_fatal("sigstop_redis_long");
        break;
    }
    restore_server_side();
  }

  void restore_server_side() {
    tally_server_side_crashes(side_, tally_);
    if (!side_.redis->running()) {
      if (Status st = side_.redis->restart(10s); !st)
        throw std::runtime_error("cannot restart redis-server: " + st.error().message);
    }
    if (!side_.kvtierd->running() && !side_.kvtierd->start(10s))
      throw std::runtime_error("cannot restart kvtierd");
  }

  // After the quiet period every request, job and pin has ended (no leak), and quarantine is
  // accounted for.
  std::string audit_quiet() {
    std::string problem;
    const auto deadline = BenchClock::now() + kAuditWait;
    do {
      problem.clear();
      const HttpAnswer m = serve_.get("/metrics");
      if (m.status != 200) {
        problem = "no /metrics";
        continue;
      }
      for (const char* gauge :
           {"kvtier_requests_in_flight", "kvtier_core_requests_running",
            "kvtier_core_requests_waiting", "kvtier_core_kvtier_jobs_in_flight",
            "kvtier_core_kvtier_host_slots_pending", "kvtier_core_kvtier_host_slots_pinned"}) {
        const double v = metric_sum(m.body, gauge);
        if (v != 0) problem += std::string(gauge) + "=" + std::to_string(v) + " ";
      }
      const auto slots = metric_by_core(m.body, "kvtier_core_kvtier_host_slots_quarantined");
      for (const auto& [core, bytes] :
           metric_by_core(m.body, "kvtier_core_kvtier_quarantined_bytes")) {
        const auto it = slots.find(core);
        const double n = it == slots.end() ? 0 : it->second;
        if ((n == 0) != (bytes == 0))
          problem += "core " + core + " quarantined_bytes=" + std::to_string(bytes) +
                     " for slots_quarantined=" + std::to_string(n) + " ";
      }
      if (server_) {
        const auto stats = side_.kvtierd->stats(1s);
        if (!stats) {
          problem += "kvtierd answers no STATS ";
        } else {
          auto field = [&](const char* name) {
            const auto it = stats->find(name);
            return it == stats->end() ? uint64_t{0} : it->second;
          };
          if (field("cache_audit_ok") != 1) problem += "kvtierd cache_audit_ok=0 ";
          for (const char* name : {"transfers_in_flight", "locks", "slots_pending", "slots_pinned"})
            if (field(name) != 0)
              problem += std::string("kvtierd ") + name + "=" + std::to_string(field(name)) + " ";
        }
      }
      if (problem.empty()) return "ok";
      std::this_thread::sleep_for(50ms);  // polling pace
    } while (BenchClock::now() < deadline);
    tally_.violation("leaks",
                     "after " + std::to_string(kAuditWait.count()) + " ms of quiet: " + problem);
    return "leak: " + problem;
  }

  struct Stopped {
    std::string who;
    std::function<void()> resume;
    BenchClock::time_point until;
  };

  ServeInstance& serve_;
  bool server_;
  bool may_fail_stop_;
  std::mt19937_64& rng_;
  ServerSide& side_;
  Tally& tally_;
  std::vector<Stopped> stopped_;
  std::string fatal_kind_;  // the fatal fault injected, if any
};

// The `--set`s of every instance: 2 engine cores of world size 2, fast heartbeats, small blocks,
// a device that holds a few requests (prefixes are offloaded and come back), the oracle's bounds.
std::vector<std::string> instance_sets() {
  return {"engine.port=0",
          "engine.engine_cores=2",
          "engine.world_size=2",
          "engine.heartbeat_interval_s=0.05",
          "engine.stall_timeout_s=" + std::to_string(kStallTimeoutS),
          "engine.request_timeout_s=" + std::to_string(kRequestTimeoutS),
          "engine.device_blocks=128",
          "model.max_context=2048",
          "layout.block_size=16",
          "layout.blocks_per_chunk=4",
          "cache.host_bytes=64MiB",
          "transfer.transfer_deadline_s=5"};
}

// kvtierd sized for one rank's share of the instances' KV layout, with the disk and Redis tiers.
std::vector<std::string> kvtierd_sets(const ServerSide& side) {
  std::vector<std::string> sets = kvtierd_layout_sets(instance_sets());
  sets.insert(sets.end(),
              {"cache.host_bytes=4MiB",  // small: chunks go down to the tiers and come back
               "server.heartbeat_interval_s=0.1", "server.client_timeout_s=2",
               "server.lock_ttl_s=2", "tiers.disk_path=" + side.disk.string(),
               "tiers.disk_bytes=64MiB", "tiers.redis_url=" + side.redis->url()});
  return sets;
}

// An epoch's instance. One that never turns healthy (on a loaded machine a worker can be silent
// past the 1 s stall timeout while it starts, and /health says so) is started again, as an
// orchestrator restarts a process that fails its readiness check, and counted; the third
// failure in a row ends the run.
std::unique_ptr<ServeInstance> start_instance(const std::string& exe,
                                              const std::vector<std::string>& sets, Tally& tally) {
  for (int attempt = 1;; ++attempt) {
    try {
      return std::make_unique<ServeInstance>(exe, sets, 60s);
    } catch (const ServeExited& e) {
      // Not slow: the process ended while it started.
      const std::string what = e.what();
      tally.violation(
          what.starts_with("kvtier serve killed by signal") ? "crashes" : "unexplained_failures",
          what.substr(0, what.find(';')));
      if (attempt == 3) throw;
    } catch (const std::runtime_error& e) {
      if (attempt == 3) throw;
      tally.not_ready();
      std::cerr << "bench chaos: an instance did not turn healthy; starting it again: " << e.what()
                << "\n";
    }
  }
}

std::vector<std::string> server_mode_sets(const ServerSide& side) {
  return {"cache.mode=server", "server.endpoint=" + side.kvtierd->endpoint(),
          "server.heartbeat_interval_s=0.1", "server.connect_timeout_s=10"};
}

}  // namespace

int run_chaos_bench(const ChaosBenchOptions& o, std::ostream& out) {
  const std::string exe = o.executable.empty() ? self_executable() : o.executable;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvtier-chaos-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Tally tally;
  uint64_t epochs = 0;
  std::optional<BenchClock::time_point> chaos_start;  // after the reference run
  int code = 0;
  try {
    const ChaosRequestShape shape;
    std::vector<ChaosRequest> requests;
    {
      // Without kvtier: a bug of the load path would be in the reference too, and hide.
      std::vector<std::string> sets = instance_sets();
      sets.push_back("connector.enabled=false");
      ServeInstance reference(exe, sets);
      requests = build_chaos_requests(reference, o.seed, shape);
    }
    ServerSide side;
    if (o.server_mode) {
      side.disk = dir / "disk";
      Result<std::unique_ptr<RedisServerProcess>> redis =
          RedisServerProcess::start({.directory = dir / "redis"}, 10s);
      if (!redis) throw std::runtime_error(redis.error().message);
      side.redis = std::move(*redis);
      side.kvtierd = std::make_unique<KvtierdInstance>(
          exe, "ipc://" + (dir / "kvtierd.sock").string(), kvtierd_sets(side), dir / "kvtierd.log");
    }
    std::mt19937_64 rng(o.seed);
    const auto start = *(chaos_start = BenchClock::now());
    const auto end = start + std::chrono::duration_cast<BenchClock::duration>(
                                 std::chrono::duration<double>(o.seconds));
    while (BenchClock::now() < end) {
      const bool server = o.server_mode && rng() % 2 == 1;
      DeviceFaults faults = draw_device_faults(rng);
      std::vector<std::string> sets = instance_sets();
      sets.insert(sets.end(), faults.sets.begin(), faults.sets.end());
      if (server) {
        tally_server_side_crashes(side, tally);
        if (!side.kvtierd->running() && !side.kvtierd->start(10s))
          throw std::runtime_error("kvtierd does not start; see " + (dir / "kvtierd.log").string());
        const auto more = server_mode_sets(side);
        sets.insert(sets.end(), more.begin(), more.end());
      }
      ++epochs;
      tally.epoch(epochs, server ? "server" : "local");
      const std::unique_ptr<ServeInstance> serve = start_instance(exe, sets, tally);
      Epoch epoch(*serve, server, faults.may_fail_stop, rng, side, tally);
      nlohmann::ordered_json row{{"bench", "chaos_epoch"},
                                 {"epoch", epochs},
                                 {"mode", server ? "server" : "local"},
                                 {"device_faults", faults.description}};
      row.update(epoch.run(requests, shape.max_tokens));
      emit(out, o.json, row);
      out.flush();
    }
  } catch (const std::exception& e) {
    std::cerr << "bench chaos: " << e.what() << "\n";
    code = 2;
  }
  if (tally.violations("wrong_outputs") > 0)
    print_log_tail("kvtierd.log", last_lines(dir / "kvtierd.log", 60));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  const double chaos_s = chaos_start ? ms_between(*chaos_start, BenchClock::now()) / 1000 : 0;
  const uint64_t wrong = tally.violations("wrong_outputs"),
                 hung = tally.violations("hung_requests"),
                 dishonest = tally.violations("dishonest_health"),
                 leaks = tally.violations("leaks");
  emit(out, o.json,
       nlohmann::ordered_json{
           {"bench", "chaos"},
           {"faults_injected", tally.total_faults()},
           {"faults_by_kind", tally.faults_by_kind()},
           {"requests_completed", tally.completed_count()},
           {"wrong_outputs", wrong},
           {"hung_requests", hung},
           {"dishonest_health", dishonest},
           {"leaks", leaks},
           {"crashes", tally.violations("crashes")},
           {"unexplained_failures", tally.violations("unexplained_failures")},
           {"requests_failed", tally.failed_count()},
           {"instances_not_ready", tally.not_ready_count()},
           {"seed", o.seed},
           {"seconds", chaos_s},
           {"epochs", epochs},
           {"faults_per_minute",
            chaos_s > 0 ? static_cast<double>(tally.total_faults()) * 60 / chaos_s : 0.0}});
  if (code != 0) return code;
  return wrong + hung + dishonest + leaks + tally.violations("crashes") == 0 ? 0 : 1;
}

}  // namespace kvtier::bench
