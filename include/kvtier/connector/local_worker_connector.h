// LocalWorkerConnector: the WorkerConnector (worker_connector.h) of the in-process host cache.
// It runs the jobs on this rank's TransferEngine over its KV caches and its share of the host
// pool (every rank uses the same slot ids; a rank's pool holds that rank's KV heads of each
// chunk).
//
// In addition to WorkerConnector's contract:
// - Whole-request: start_load submits the stores queued last step first: they read KV the
//   previous forward pass wrote, and the TransferEngine fences them behind that compute (F10);
//   so this step's stores never delay sampling. With loads_in_step it then fences the compute
//   stream behind the step's loads (F10; one that cannot be fenced makes this rank fail-stop,
//   F7): the forward pass enqueued next reads their blocks only once the copies ended.
// - A job's verdict is the TransferEngine's outcome. Layer-wise (TransferGranularity::kLayer),
//   a job goes to the TransferEngine as one transfer per (group, layer) that it has chunks in
//   (ChunkTransfer::layer), under ids this connector issues; so the engine's per-direction FIFO
//   (F5), its compute fence (F10) and its outcomes (F1, F7, F8) hold per layer unchanged, and
//   the job's verdict is the worst of its layers' outcomes, once all of them are reported.
//   start_load submits the step's loads layer-major (layer 0 of every load, then layer 1, …) and
//   takes the step's stores, which save_layer sends layer by layer; queue_stores sends the
//   layers not saved yet (an engine that saved none sends them all after its forward pass).
// - start_load and queue_stores check their metadata's jobs. A job id given twice or still in
//   flight is std::invalid_argument (F2) before anything is done. A job with a chunk out of
//   range of the registered caches or pool (a group, block, slot or layer) is refused: it gets
//   a Failed verdict (a load's blocks reported invalid, F4) so the scheduler side's job ends
//   (F1), the call does the rest of its work, then raises std::invalid_argument naming it (F2).
//   Nothing of a refused job stays queued: later steps go on.
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
  // `loads_in_step`, whole-request: start_load fences the compute stream behind the step's
  // loads, so the engine may compute a loading request in its load's step.
  explicit LocalWorkerConnector(uint32_t rank,
                                TransferGranularity granularity = TransferGranularity::kRequest,
                                bool loads_in_step = false)
      : rank_(rank), granularity_(granularity), loads_in_step_(loads_in_step) {}

  TransferGranularity granularity() const { return granularity_; }
  bool loads_in_step() const { return loads_in_step_; }

  uint32_t rank() const override { return rank_; }
  // What register_kv_caches was given (nothing before).
  const KvCacheAddresses& kv_caches() const override { return caches_; }

  // Where this rank's KV caches and its share of the host pool live; `compute_stream` is where
  // its forward pass writes KV. Builds the rank's TransferEngine; once only.
  void register_kv_caches(Device& device, const KvLayout& layout, const KvCacheAddresses& caches,
                          const HostSlots& slots, StreamHandle compute_stream,
                          TransferOptions options, const Clock& clock = SteadyClock::instance());

  void start_load(const StepMetadata& metadata) override;
  // Layer-wise: fences the compute stream behind layer `layer` of the step's loads (F10; a
  // part that cannot be fenced makes this rank fail-stop, F7).
  void wait_for_layer_load(KvLayer layer) override;
  // Layer-wise: submits layer `layer` of the step's stores (fenced behind the compute enqueued
  // so far, F10).
  void save_layer(KvLayer layer) override;
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
  // A job split into layers: its parts' outcomes so far.
  struct LayeredJob {
    size_t parts_left = 0;
    Outcome outcome = Outcome::kCompleted;  // the worst part's so far
    std::string error;
    std::vector<JobId> parts;  // submitted so far (a flush fences them, F10)
  };
  // A step's store job, sent layer by layer: saved[g][l] once its part went.
  struct LayeredStore {
    TransferJob job;
    std::vector<std::vector<bool>> saved;
  };

  void submit(const TransferJob& job, Direction direction);
  // Layer-wise: submits layer `layer` of `job`'s chunks as one part, if it has chunks there.
  // Returns the part's id, or 0 when it has none.
  JobId submit_part(const TransferJob& job, Direction direction, KvLayer layer);
  void register_layered(const TransferJob& job, Direction direction);
  // std::invalid_argument for a job id given twice or still in flight.
  void check_ids(std::span<const TransferJob> loads, std::span<const TransferJob> stores) const;
  // The jobs whose chunks fit the registered caches and pool (pointers into `jobs`); the others
  // get a Failed verdict, and the first one's reason goes to `refusal`.
  std::vector<const TransferJob*> accept(std::span<const TransferJob> jobs, Direction direction,
                                         std::string& refusal);
  // start_load's work for the accepted jobs.
  void start(std::span<const TransferJob* const> loads, std::span<const TransferJob* const> stores);
  void save_layer_of(LayeredStore& store, KvLayer layer);
  void add_verdict(JobId job, Direction direction, Outcome outcome, std::string error);
  void collect();

  uint32_t rank_;
  TransferGranularity granularity_;
  bool loads_in_step_;
  KvCacheAddresses caches_;
  size_t groups_ = 0;
  std::vector<uint32_t> layers_;                   // per group
  JobId next_part_ = 1;                            // layer-wise: the TransferEngine's job ids
  std::unordered_map<JobId, JobId> part_of_;       // part id -> its job
  std::unordered_map<JobId, LayeredJob> layered_;  // jobs with parts not reported yet
  std::vector<std::vector<std::vector<JobId>>> layer_loads_;  // [group][layer]: this step's parts
  std::vector<LayeredStore> layer_stores_;                    // this step's stores
  std::unique_ptr<TransferEngine> engine_;
  std::vector<TransferJob> queued_stores_;
  std::unordered_map<JobId, GroupBlocks> load_blocks_;  // loads in flight: their blocks
  std::vector<JobVerdict> finished_;
  GroupBlocks invalid_;
  std::string fail_stop_reason_;
};

}  // namespace kvtier
