// EngineScheduler: the scheduler of one engine core. Requests wait, are admitted (device prefix
// cache first, then the kvtier connector for what is beyond it), load (asynchronously), run
// chunked prefill and decode under a token budget, and finish. Each step is planned by
// plan_step(), run by every rank, and completed by finish_step() with the ranks' results.
//
// Memory pressure (H8, liveness): running requests are served oldest first; one that needs a
// block it cannot get preempts the newest running request not yet in this step's batch, else
// itself (its blocks are freed, it waits at the head of the queue and recomputes what the
// device prefix cache no longer holds). Waiting requests are admitted in order, and the first
// that finds no room stops admission. So the oldest running request always progresses, every
// step computes tokens, frees memory or ends a request, and a request that could never fit the
// device is rejected by add().
//
// Failed loads resume from the connector's truncated token count and recompute (F4); a
// fail-stop (F7) is reported by finish_step() and the caller turns the engine FAILED (H4).
// Not thread-safe: the engine core's loop owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/cache/cache_manager.h"
#include "kvtier/cache/tier_mover.h"
#include "kvtier/connector/scheduler_connector.h"
#include "kvtier/core/config.h"
#include "kvtier/core/counter_kind.h"
#include "kvtier/engine/block_pool.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/engine/progress_watchdog.h"

namespace kvtier {

// One sequence of a step's forward batch.
struct BatchEntry {
  uint32_t start = 0;
  std::vector<TokenId> tokens;
  std::vector<uint32_t> table;  // device blocks covering [0, start + tokens.size())
};

struct StepPlan {
  uint64_t step = 0;
  std::vector<BatchEntry> batch;
  StepMetadata metadata;
};

// What the frontend hears about one request after a step.
struct RequestUpdate {
  std::string id;
  std::vector<TokenId> new_tokens;
  bool done = false;
  std::string finish_reason;  // "length" when done
  std::string error;          // non-empty: the request ended with this error
  bool rejected = false;      // with `error`: the request is invalid as sent (never queued)
  size_t prompt_tokens = 0;
  size_t cached_tokens = 0;  // prompt tokens not computed: device prefix cache + kvtier
};

struct EngineCounters {
  uint64_t requests_admitted = 0;
  uint64_t prompt_tokens = 0;
  uint64_t device_hit_tokens = 0;  // prompt tokens found in the device prefix cache
  uint64_t kvtier_hit_tokens = 0;  // prompt tokens loaded by the connector
  uint64_t recomputed_tokens = 0;  // tokens of failed loads computed again (F4)
  uint64_t generated_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t steps = 0;
  uint64_t cache_events = 0;  // stored / removed events of the host cache
  size_t running = 0;
  size_t waiting = 0;
};
// f(name, value, kind) for every field (counter_kind.h): the request counts are gauges, the
// rest counters. The names are the heartbeat's, without its "_total" (heartbeat_counters.h).
template <class F>
void visit_counters(const EngineCounters& c, F&& f) {
  using enum CounterKind;
  f("requests_admitted", c.requests_admitted, kCounter);
  f("prompt_tokens", c.prompt_tokens, kCounter);
  f("device_prefix_hit_tokens", c.device_hit_tokens, kCounter);
  f("kvtier_hit_tokens", c.kvtier_hit_tokens, kCounter);
  f("recomputed_tokens", c.recomputed_tokens, kCounter);
  f("generated_tokens", c.generated_tokens, kCounter);
  f("preemptions", c.preemptions, kCounter);
  f("steps", c.steps, kCounter);
  f("cache_events", c.cache_events, kCounter);
  f("requests_running", uint64_t{c.running}, kGauge);
  f("requests_waiting", uint64_t{c.waiting}, kGauge);
}

// What the tier mover below the in-process host cache reports (EngineScheduler::tier_counters).
struct TierReport {
  TierMoverCounters mover;
  std::vector<TierMetrics> tiers;
};

class EngineScheduler {
 public:
  // `host_pool_name`: ConnectorShape::host_pool_name (the engine core's, when tiers are on).
  EngineScheduler(const Config& config, const EngineShape& shape, std::string host_pool_name = "");
  ~EngineScheduler();

  // From now on the device prefix cache and the in-process host cache publish their changes on
  // `publisher` (docs/events.md); null stops it. The publisher must outlive the scheduler.
  void publish_events(KvEventPublisher* publisher);

  // Queues a request. One that can never run is rejected at once (an update with `rejected`):
  // its prompt + max_tokens exceed model.max_context or max_request_tokens(shape) (H8).
  std::optional<RequestUpdate> add(std::string id, std::vector<TokenId> prompt, size_t max_tokens);
  // Ends a request without an update (its client went away). One whose load is in flight, or
  // that is in the step being computed (between plan_step and finish_step), ends in finish_step:
  // its blocks are in use until then, and that step's results for it are dropped.
  void abort(const std::string& id);

  // Whether a step would do anything (requests to run, or transfers to collect).
  bool has_work() const;
  StepPlan plan_step();
  // `sampled`: the greedy token of each batch entry (rank 0's), `outputs`: every rank's report.
  std::vector<RequestUpdate> finish_step(const std::vector<TokenId>& sampled,
                                         const std::vector<WorkerOutput>& outputs);

  bool fail_stopped() const { return side_.connector && side_.connector->fail_stopped(); }
  std::string fail_stop_reason() const {
    return side_.connector ? side_.connector->fail_stop_reason() : "";
  }
  // See SchedulerSide::unlink_host_memory_names: once every worker mapped its pool.
  void unlink_host_memory_names() { side_.unlink_host_memory_names(); }
  // Ends every request with `error` (the engine is failing).
  std::vector<RequestUpdate> fail_all(const std::string& error);

  // F8 while a step is in flight: the connector's overdue job (SchedulerConnector::overdue_job),
  // else nullopt.
  std::optional<std::string> overdue_transfer() const {
    return side_.connector ? side_.connector->overdue_job() : std::nullopt;
  }
  // What the progress watchdog watches (H8).
  ProgressSnapshot progress() const;
  EngineCounters counters() const;
  std::optional<ConnectorCounters> connector_counters() const;
  std::optional<CacheCounters> cache_counters() const;
  // With tiers below the in-process host cache: the mover's counters and each tier's.
  std::optional<TierReport> tier_counters() const;
  // H7: what of the cache is down (`cache.mode: server`: kvtierd unreachable, a tier below it
  // down); empty when all is well.
  std::vector<std::string> degraded() const;

 private:
  struct Request;
  enum class State { kWaiting, kLoading, kRunning, kFinishing };
  enum class Admission { kAdmitted, kAskLater, kNoRoom };

  void extend_block_keys(Request& r);
  Admission admit(Request& r, size_t& budget, std::vector<Request*>& scheduled, StepInput& input);
  bool stalled_by_hook(const Request& r) const;  // faults.stall_scheduler
  bool ensure_blocks(Request& r, size_t tokens);
  void preempt(Request& r);
  void release_blocks(Request& r);
  void schedule(Request& r, size_t& budget, std::vector<Request*>& scheduled, StepInput& input);
  void finish(Request& r);
  // `r` computed `count` more tokens and sampled `sampled`: a token out when its prefill is done.
  void computed(Request& r, size_t count, TokenId sampled, std::vector<RequestUpdate>& updates,
                std::vector<Request*>& done);
  void cache_computed_blocks(Request& r);

  const Config config_;
  const EngineShape shape_;
  BlockPool blocks_;
  // The connector's scheduler side (ConnectorFactory); all null when connector.enabled is false.
  SchedulerSide side_;
  // ConnectorFactory::loads_in_step: a loading request is computed in its load's step, its
  // result kept once the load completed.
  bool loads_in_step_ = false;
  std::map<std::string, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order
  std::vector<Request*> last_scheduled_;
  std::vector<uint32_t> last_counts_;
  uint64_t step_ = 0;
  uint64_t finished_ = 0;  // requests ended (H8)
  EngineCounters counters_;
};

}  // namespace kvtier
