// WorkerConnector: the worker side of the engine contract, one per rank. It runs the jobs the
// scheduler side put in each step's metadata on this rank's TransferEngine and reports their
// verdicts.
//
// Each step the rank's worker loop calls, in order:
//   start_load(metadata)   before it enqueues the forward pass: submits the stores queued last
//                          step, fences the flush set (F10), submits this step's loads
//   queue_stores(metadata) after it enqueued the forward pass: this step's stores are submitted
//                          at the next start_load, so they never delay sampling
//   take_output()          the verdicts decided so far, the blocks of failed loads, fail-stop
//
// Contract:
// - Every job handed to this rank gets exactly one verdict (F1), the TransferEngine's outcome.
// - A failed load's destination blocks are reported in the same output as its verdict, or
//   earlier (F4), per group.
// - flush: the forward pass enqueued after it cannot write a block before every store in the
//   flush set finished reading it (F10); a store that cannot be fenced makes this rank
//   fail-stop (F7).
// - An Unprovable outcome sets fail_stop in every later output (F7).
//
// Not thread-safe: the rank's worker loop calls it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/connector/step_metadata.h"
#include "kvtier/transfer/transfer_engine.h"

namespace kvtier {

class WorkerConnector {
 public:
  explicit WorkerConnector(uint32_t rank) : rank_(rank) {}

  uint32_t rank() const { return rank_; }

  // Where this rank's KV caches and its share of the host pool live; `compute_stream` is where
  // its forward pass writes KV. Builds the rank's TransferEngine; once only.
  void register_kv_caches(Device& device, const KvLayout& layout, const KvCacheAddresses& caches,
                          const HostSlots& slots, StreamHandle compute_stream,
                          TransferOptions options, const Clock& clock = SteadyClock::instance());

  void start_load(const StepMetadata& metadata);
  void queue_stores(const StepMetadata& metadata);
  // Submits queued stores, then fences the compute stream behind `jobs` (F10).
  void flush(std::span<const JobId> jobs);

  // Verdicts decided since the last call.
  std::vector<JobVerdict> get_finished();
  // Destination blocks of loads that failed since the last call, per group (F4).
  GroupBlocks get_invalid_blocks();
  // get_finished() and get_invalid_blocks() together, with the fail-stop state.
  WorkerOutput take_output();

  bool fail_stopped() const { return !fail_stop_reason_.empty(); }
  // Jobs handed to this rank without a verdict yet (queued stores included).
  size_t in_flight() const;
  // F12 at quiescence: the TransferEngine's audit.
  Status audit() const;
  const TransferEngine& engine() const { return *engine_; }

 private:
  void submit(const TransferJob& job, Direction direction);
  void collect();

  uint32_t rank_;
  size_t groups_ = 0;
  std::unique_ptr<TransferEngine> engine_;
  std::vector<TransferJob> queued_stores_;
  std::unordered_map<JobId, GroupBlocks> load_blocks_;  // loads in flight: their blocks
  std::vector<JobVerdict> finished_;
  GroupBlocks invalid_;
  std::string fail_stop_reason_;
};

}  // namespace kvtier
