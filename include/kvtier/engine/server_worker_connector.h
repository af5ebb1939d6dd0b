// ServerWorkerConnector: the worker side of the connector when `cache.mode: server`. The rank's
// KV caches live in shared memory that its CacheClient registers with kvtierd; the loads and
// stores of each step's metadata become RETRIEVE and STORE requests (one per job and group,
// under the rank's keys, see server_cache.h), and their outcomes become the rank's verdicts.
//
// Contract (as WorkerConnector's):
// - Every job handed to this rank gets exactly one verdict (F1): Completed when every request of
//   the job completed, Unprovable when any was, else Failed.
// - A failed load reports all its destination blocks invalid, per group, in the output that
//   carries its verdict (F4). An Unprovable outcome sets fail_stop in every later output (F7).
// - Stores are sent by queue_stores, right after the forward pass that wrote their KV: on the
//   host device that pass has finished when it returns. flush (in start_load) waits for the
//   stores it names before the step's forward pass may write their blocks (F10); each resolves
//   by its deadline (F8).
// - A load that starts inside a chunk (the device prefix cache holds the chunk's first blocks,
//   which other requests may be reading) retrieves the whole chunk into a scratch chunk past the
//   engine's blocks and copies the missing blocks over once it completed; with no scratch free
//   the load fails (the request recomputes). Scratch of an Unprovable load is never reused (F7).
// - Loads land before the forward that reads them: the engine core schedules a loading request
//   only after its verdict was reported, and copies are done before take_output reports it.
// Not thread-safe: the rank's worker loop calls it (the client has its own I/O thread).
#pragma once

#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/connector/step_metadata.h"
#include "kvtier/core/config.h"
#include "kvtier/engine/server_cache.h"

namespace kvtier {

class ServerWorkerConnector {
 public:
  ServerWorkerConnector(uint32_t rank, const KvLayout& layout, uint32_t device_blocks,
                        const Config& config);
  ~ServerWorkerConnector();

  // The rank's KV caches (device_blocks per group), in shared memory.
  const KvCacheAddresses& caches() const { return caches_; }
  bool wait_until_ok(Duration timeout) const { return client_->wait_until_ok(timeout); }

  void start_load(const StepMetadata& metadata);
  void queue_stores(const StepMetadata& metadata);
  WorkerOutput take_output();
  // Jobs handed to this rank without a verdict yet.
  size_t in_flight() const { return jobs_.size(); }
  // Tests: a kvtierd test hook (`--test-hooks`) sent with every request of `direction`.
  void set_test_hook(Direction direction, std::string hook) {
    (direction == Direction::kLoad ? load_hook_ : store_hook_) = std::move(hook);
  }

 private:
  struct ScratchCopy {
    uint32_t group = 0;
    uint32_t scratch = 0;      // scratch chunk index in the group
    uint32_t first_block = 0;  // chunk blocks [first_block, blocks_per_chunk) are copied
    std::vector<uint32_t> to;  // destination blocks
  };
  struct Job {
    Direction direction = Direction::kStore;
    GroupBlocks blocks;  // per group: destination (load) or source (store) blocks
    std::vector<std::future<TransferResult>> parts;
    std::vector<ScratchCopy> copies;
    std::string failed_now;  // a part that could not be sent: the job fails
  };

  void submit(const TransferJob& job, Direction direction);
  std::optional<uint32_t> take_scratch(uint32_t group);
  uint32_t scratch_block(uint32_t group, uint32_t scratch, uint32_t i) const;
  void collect();
  void finish(JobId id, Job& job);

  uint32_t rank_;
  KvLayout layout_;
  uint32_t device_blocks_;
  std::unique_ptr<SharedKvArena> arena_;
  KvCacheAddresses caches_;   // what the model sees
  KvCacheAddresses all_;      // device blocks and scratch
  std::unique_ptr<server::CacheClient> client_;
  std::vector<std::vector<bool>> scratch_busy_;  // per group, per scratch chunk
  std::map<JobId, Job> jobs_;
  std::vector<JobVerdict> finished_;
  GroupBlocks invalid_;
  std::string fail_stop_reason_;
  std::string load_hook_;
  std::string store_hook_;
};

}  // namespace kvtier
