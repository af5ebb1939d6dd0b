// SchedulerRig: one engine core in-process, step by step, with real parts: the EngineScheduler
// (device prefix cache, preemption, chunked prefill, the connector's scheduler side) and one
// rank that runs the tiny model on a host device behind a fault injector, with the worker side
// of the connector and a host pool. Each step() does what the engine core and its worker do:
// plan, start_load, the forward pass on the compute stream, queue_stores, finish. A step whose
// batch is empty waits for the device to go idle first, so a request that waits for a transfer
// costs a bounded number of steps. No sleeps.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/cache/host_pool.h"
#include "kvtier/connector/worker_connector.h"
#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/device/host_device.h"
#include "kvtier/engine/byte_vocab.h"
#include "kvtier/engine/collective.h"
#include "kvtier/engine/engine_scheduler.h"
#include "kvtier/engine/tiny_model.h"

namespace kvtier::testing {

class SchedulerRig {
 public:
  explicit SchedulerRig(const Config& config, FaultPlan faults = {})
      : config_(config),
        shape_(engine_shape(config)),
        scheduler_(config, shape_),
        fault_(host_, std::move(faults)),
        model_(shape_.model, 0, 1),
        connector_(0) {
    compute_ = fault_.create_stream();
    step_done_ = fault_.create_event();
    for (const KvGroup& g : shape_.layout.groups) {
      GroupCacheAddresses group{.num_blocks = shape_.device_blocks};
      const bool per_layer = shape_.layout.device_layout == DeviceLayout::kPerLayer;
      const size_t bytes =
          size_t{shape_.device_blocks} * (per_layer ? g.layer_block_bytes() : g.block_bytes());
      for (size_t t = 0; t < (per_layer ? g.layers : 1); ++t) {
        group.bases.push_back(fault_.allocate(bytes));
      }
      caches_.groups.push_back(std::move(group));
    }
    if (config.connector.enabled) {
      auto pool = HostPool::create(fault_, shape_.layout.max_chunk_bytes(), shape_.host_slots);
      if (!pool) throw std::runtime_error(pool.error().message);
      pool_ = std::move(*pool);
      connector_.register_kv_caches(
          fault_, shape_.layout, caches_,
          HostSlots{pool_->slot_address(0), pool_->slot_bytes(), shape_.host_slots}, compute_,
          transfer_options(config.transfer));
    }
  }

  ~SchedulerRig() {
    connector_ = WorkerConnector(0);
    fault_.release_hangs();
    host_.quiesce();
  }

  EngineScheduler& scheduler() { return scheduler_; }

  // Queues a request; a rejection is recorded as its result at once.
  void add(const std::string& id, const std::vector<TokenId>& prompt, size_t max_tokens) {
    if (auto rejected = scheduler_.add(id, prompt, max_tokens)) record(*rejected);
  }

  // One engine step. Returns its plan (for the test's checks).
  StepPlan step() {
    StepPlan plan = scheduler_.plan_step();
    std::vector<ForwardInput> inputs;
    std::vector<std::vector<std::span<const uint32_t>>> tables(plan.batch.size());
    for (size_t i = 0; i < plan.batch.size(); ++i) {
      const BatchEntry& e = plan.batch[i];
      tables[i].assign(shape_.layout.groups.size(), std::span<const uint32_t>(e.table));
      inputs.push_back(
          ForwardInput{.start = e.start, .tokens = e.tokens, .block_tables = tables[i]});
    }
    const bool local = config_.connector.enabled;
    if (local) connector_.start_load(plan.metadata);
    std::vector<TokenId> sampled;
    if (!inputs.empty()) {
      std::vector<std::vector<float>> logits;
      std::exception_ptr error;
      fault_.launch_host_func(compute_, [&] {
        try {
          logits = model_.forward_batch(inputs, shape_.layout, caches_, collective_);
        } catch (...) {
          error = std::current_exception();
        }
      });
      fault_.record(step_done_, compute_);
      fault_.synchronize(step_done_);
      if (error) std::rethrow_exception(error);
      for (const auto& l : logits) sampled.push_back(greedy_token(l));
    } else {
      host_.quiesce();  // nothing to compute: let the transfers it waits for end
    }
    if (local) connector_.queue_stores(plan.metadata);
    const std::vector<WorkerOutput> outputs{local ? connector_.take_output() : WorkerOutput{}};
    for (const RequestUpdate& u : scheduler_.finish_step(sampled, outputs)) record(u);
    return plan;
  }

  // Results so far: request → generated tokens, or its error.
  struct Result {
    std::vector<TokenId> tokens;
    std::string error;
    bool rejected = false;
    bool done = false;
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
  KvCacheAddresses caches_;
  std::unique_ptr<HostPool> pool_;
  StreamHandle compute_;
  EventHandle step_done_;
  WorkerConnector connector_;
  std::map<std::string, Result> results_;
};

}  // namespace kvtier::testing
