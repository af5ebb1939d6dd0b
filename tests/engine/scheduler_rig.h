// SchedulerRig: one engine core in-process, step by step, with real parts: the EngineScheduler
// (device prefix cache, preemption, chunked prefill, the connector's scheduler side) and one
// rank that runs the tiny model on a host device behind a fault injector, with the worker side
// of the connector the ConnectorFactory builds for the config (KV caches, host pool). Each step()
// does what the engine core and its worker do: plan, start_load, the forward pass on the compute
// stream layer by layer (enqueue_forward, with the connector's per-layer calls), queue_stores,
// finish. A step whose batch is empty waits for the device to go idle first,
// so a request that waits for a transfer costs a bounded number of steps. No sleeps.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/connector/connector_factory.h"
#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/device/host_device.h"
#include "kvtier/engine/byte_vocab.h"
#include "kvtier/engine/collective.h"
#include "kvtier/engine/engine_scheduler.h"
#include "kvtier/engine/layered_forward.h"
#include "kvtier/engine/tiny_model.h"

namespace kvtier::testing {

class SchedulerRig {
 public:
  explicit SchedulerRig(const Config& config, FaultPlan faults = {})
      : config_(config),
        shape_(engine_shape(config)),
        scheduler_(config, shape_),
        fault_(host_, std::move(faults)),
        model_(shape_.model, 0, 1) {
    compute_ = fault_.create_stream();
    step_done_ = fault_.create_event();
    connector_ = ConnectorFactory(config, connector_shape(shape_))
                     .worker(WorkerSetup{.rank = 0,
                                         .device_blocks = shape_.device_blocks,
                                         .device = &fault_,
                                         .compute_stream = compute_});
  }

  ~SchedulerRig() {
    // Copies may still run: the device drains before the connector (and its memory) goes.
    fault_.release_hangs();
    host_.quiesce();
    connector_.reset();
  }

  EngineScheduler& scheduler() { return scheduler_; }

  // Queues a request; a rejection is recorded as its result at once.
  void add(const std::string& id, const std::vector<TokenId>& prompt, size_t max_tokens) {
    if (auto rejected = scheduler_.add(id, prompt, max_tokens)) record(*rejected);
  }

  // One engine step. Returns its plan (for the test's checks). `while_computing` runs between
  // the plan and its results, as the engine core's messages (an abort) arrive meanwhile.
  StepPlan step(const std::function<void()>& while_computing = {}) {
    StepPlan plan = scheduler_.plan_step();
    if (while_computing) while_computing();
    std::vector<ForwardInput> inputs;
    std::vector<std::vector<std::span<const uint32_t>>> tables(plan.batch.size());
    for (size_t i = 0; i < plan.batch.size(); ++i) {
      const BatchEntry& e = plan.batch[i];
      tables[i].assign(shape_.layout.groups.size(), std::span<const uint32_t>(e.table));
      inputs.push_back(
          ForwardInput{.start = e.start, .tokens = e.tokens, .block_tables = tables[i]});
    }
    connector_->start_load(plan.metadata);
    std::vector<TokenId> sampled;
    if (!inputs.empty()) {
      LayeredForward forward;
      enqueue_forward(fault_, compute_, model_, inputs, shape_.layout, connector_->kv_caches(),
                      collective_, *connector_, forward);
      fault_.record(step_done_, compute_);
      fault_.synchronize(step_done_);
      if (forward.error) std::rethrow_exception(forward.error);
      for (const auto& l : forward.logits) sampled.push_back(greedy_token(l));
    } else {
      host_.quiesce();  // nothing to compute: let the transfers it waits for end
    }
    connector_->queue_stores(plan.metadata);
    const std::vector<WorkerOutput> outputs{connector_->take_output()};
    for (const RequestUpdate& u : scheduler_.finish_step(sampled, outputs)) record(u);
    return plan;
  }

  // Results so far: request → generated tokens, or its error.
  struct Result {
    std::vector<TokenId> tokens;
    std::string error;
    bool rejected = false;
    bool done = false;
    // The cached tokens of its first update with a token, and whether a later one said other.
    std::optional<size_t> cached_tokens;
    bool cached_tokens_changed = false;
  };
  const std::map<std::string, Result>& results() const { return results_; }
  size_t done_count() const {
    size_t n = 0;
    for (const auto& [id, r] : results_) n += r.done ? 1 : 0;
    return n;
  }

 private:
  void record(const RequestUpdate& u) {
    Result& r = results_[u.id];
    if (!u.new_tokens.empty()) {
      if (r.cached_tokens && *r.cached_tokens != u.cached_tokens) r.cached_tokens_changed = true;
      if (!r.cached_tokens) r.cached_tokens = u.cached_tokens;
    }
    r.tokens.insert(r.tokens.end(), u.new_tokens.begin(), u.new_tokens.end());
    if (!u.error.empty()) r.error = u.error;
    r.rejected = r.rejected || u.rejected;
    r.done = r.done || u.done;
  }

  const Config config_;
  const EngineShape shape_;
  EngineScheduler scheduler_;
  HostDevice host_;
  FaultInjectingDevice fault_;
  TinyModel model_;
  SingleRankCollective collective_;
  StreamHandle compute_;
  EventHandle step_done_;
  std::unique_ptr<WorkerConnector> connector_;
  std::map<std::string, Result> results_;
};

}  // namespace kvtier::testing
