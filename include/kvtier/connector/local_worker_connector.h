// LocalWorkerConnector: the WorkerConnector (worker_connector.h) of the in-process host cache.
// It runs the jobs on this rank's TransferEngine over its KV caches and its share of the host
// pool (every rank uses the same slot ids; a rank's pool holds that rank's KV heads of each
// chunk).
//
// In addition to WorkerConnector's contract:
// - start_load submits the stores queued last step first: they read KV the previous forward
//   pass wrote, and the TransferEngine fences them behind that compute (F10); so this step's
//   stores never delay sampling.
// - A job's verdict is the TransferEngine's outcome.
// - register_kv_caches comes first, once; the caller owns the caches and the pool, which must
//   outlive every copy (the device drained).
//
// Not thread-safe: the rank's worker loop calls it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/connector/step_metadata.h"
#include "kvtier/connector/worker_connector.h"
#include "kvtier/transfer/transfer_engine.h"

namespace kvtier {

class LocalWorkerConnector final : public WorkerConnector {
 public:
  explicit LocalWorkerConnector(uint32_t rank) : rank_(rank) {}

  uint32_t rank() const override { return rank_; }
  // What register_kv_caches was given (nothing before).
  const KvCacheAddresses& kv_caches() const override { return caches_; }

  // Where this rank's KV caches and its share of the host pool live; `compute_stream` is where
  // its forward pass writes KV. Builds the rank's TransferEngine; once only.
  void register_kv_caches(Device& device, const KvLayout& layout, const KvCacheAddresses& caches,
                          const HostSlots& slots, StreamHandle compute_stream,
                          TransferOptions options, const Clock& clock = SteadyClock::instance());

  void start_load(const StepMetadata& metadata) override;
  void queue_stores(const StepMetadata& metadata) override;
  // Submits queued stores, then fences the compute stream behind `jobs` (F10).
  void flush(std::span<const JobId> jobs);

  // Verdicts decided since the last call.
  std::vector<JobVerdict> get_finished();
  // Destination blocks of loads that failed since the last call, per group (F4).
  GroupBlocks get_invalid_blocks();
  // get_finished() and get_invalid_blocks() together, with the fail-stop state.
  WorkerOutput take_output() override;

  // An Unprovable outcome, a store that could not be fenced, or the TransferEngine fail-stopped.
  bool fail_stopped() const override {
    return !fail_stop_reason_.empty() || (engine_ && engine_->fail_stopped());
  }
  // Jobs handed to this rank without a verdict yet (queued stores included).
  size_t in_flight() const override;
  // F12 at quiescence: no store queued, and the TransferEngine's audit.
  Status audit() const override;
  const TransferEngine& engine() const { return *engine_; }

 private:
  void submit(const TransferJob& job, Direction direction);
  void collect();

  uint32_t rank_;
  KvCacheAddresses caches_;
  size_t groups_ = 0;
  std::unique_ptr<TransferEngine> engine_;
  std::vector<TransferJob> queued_stores_;
  std::unordered_map<JobId, GroupBlocks> load_blocks_;  // loads in flight: their blocks
  std::vector<JobVerdict> finished_;
  GroupBlocks invalid_;
  std::string fail_stop_reason_;
};

}  // namespace kvtier
