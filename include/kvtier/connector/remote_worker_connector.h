// RemoteWorkerConnector: the WorkerConnector (worker_connector.h) of kvtierd's cache
// (`cache.mode: server`). The rank's KV caches live in shared memory that its CacheClient
// registers with kvtierd; the loads and stores of each step's metadata become RETRIEVE and STORE
// requests (one per job and group, under the rank's keys, see remote_cache.h), and their
// outcomes become the rank's verdicts.
//
// In addition to WorkerConnector's contract:
// - A job's verdict: Completed when every request of the job completed, Unprovable when any
//   was, else Failed. A failed load reports all its destination blocks invalid, per group, in
//   the output that carries its verdict (F4).
// - Stores are sent by queue_stores, right after the forward pass that wrote their KV: on the
//   host device that pass has finished when it returns. flush (in start_load) waits for the
//   stores it names before the step's forward pass may write their blocks (F10); each resolves
//   by its deadline (F8).
// - A load that starts inside a chunk (the device prefix cache holds the chunk's first blocks,
//   which other requests may be reading) retrieves the whole chunk into a scratch chunk past the
//   engine's blocks and copies the missing blocks over once it completed; with no scratch free
//   the load fails (the request recomputes). Scratch of an Unprovable load is never reused (F7).
// - Loads land before the forward that reads them: copies are done before take_output reports
//   the verdict.
// - Bad metadata, as LocalWorkerConnector: a job id given twice or still in flight raises
//   std::invalid_argument before anything is done; a job with a chunk out of this rank's range
//   (group, block, block count) is refused with a Failed verdict, and the call raises
//   std::invalid_argument naming it after the rest of its work.
// - connector.load_in_step (the default): start_load returns only once every load it started
//   has its verdict (each RETRIEVE resolves by its deadline, F8), its scratch copies done. So
//   the engine computes a loading request in the step its load starts, and discards what it
//   computed when the verdict is not Completed (F4). The price: a kvtierd that stops answering
//   in the middle of a RETRIEVE holds that step until the deadline. While start_load waits (for
//   these loads or for flushed stores) it calls `while_waiting` about every
//   engine.heartbeat_interval_s, so the worker keeps heartbeating (H6, H7). Without load_in_step,
//   start_load only sends the RETRIEVEs; a loading request is computed in a step after its verdict,
//   and a step never waits for a load.
// - audit() also asks kvtierd (STATS): its cache audits clean, and it has no transfer of this
//   rank in flight unless one was Unprovable; kUnavailable when kvtierd does not answer.
// Not thread-safe: the rank's worker loop calls it (the client has its own I/O thread).
#pragma once

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/connector/remote_cache.h"
#include "kvtier/connector/worker_connector.h"
#include "kvtier/core/config.h"
#include "kvtier/server/protocol.h"

namespace kvtier {

class RemoteWorkerConnector final : public WorkerConnector {
 public:
  // Connects in the background (server.endpoint); the caller may wait_until_ok().
  // `while_waiting` may be empty.
  RemoteWorkerConnector(uint32_t rank, const KvLayout& layout, uint32_t device_blocks,
                        const Config& config, std::function<void()> while_waiting = {});
  ~RemoteWorkerConnector() override;

  uint32_t rank() const override { return rank_; }
  // The rank's KV caches (device_blocks per group), in shared memory.
  const KvCacheAddresses& kv_caches() const override { return caches_; }
  bool wait_until_ok(Duration timeout) const { return client_->wait_until_ok(timeout); }

  void start_load(const StepMetadata& metadata) override;
  void queue_stores(const StepMetadata& metadata) override;
  WorkerOutput take_output() override;
  bool fail_stopped() const override;
  size_t in_flight() const override { return jobs_.size(); }
  Status audit() const override;

  // Tests: a kvtierd test hook (the server runs with `--test-hooks`) sent with every request of
  // `direction`.
  void set_test_hook(Direction direction, server::TestHook hook) {
    (direction == Direction::kLoad ? load_hook_ : store_hook_) = hook;
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

  // Sends `transfer`'s requests, or refuses it (a chunk out of this rank's range, keys missing):
  // a Failed verdict, and `refusal` (if empty) says why, for the caller to raise once the rest
  // of its work is done (as LocalWorkerConnector does).
  void submit(const TransferJob& transfer, Direction direction, std::string& refusal);
  // std::invalid_argument for a job id given twice or still in flight, before anything is done.
  void check_ids(std::span<const TransferJob> jobs) const;
  std::optional<uint32_t> take_scratch(uint32_t group);
  uint32_t scratch_block(uint32_t group, uint32_t scratch, uint32_t i) const;
  void copy_block(uint32_t group, uint32_t from, uint32_t to);
  void wait(std::future<TransferResult>& part);
  void collect();
  void finish(JobId id, Job& job);

  uint32_t rank_;
  KvLayout layout_;
  uint32_t device_blocks_;
  Duration request_timeout_;
  bool loads_end_in_step_;  // connector.load_in_step: start_load waits for its loads
  std::function<void()> while_waiting_;
  Duration wait_tick_;  // engine.heartbeat_interval_s: how often start_load calls while_waiting_
  std::unique_ptr<SharedKvArena> arena_;
  KvCacheAddresses caches_;  // what the model sees
  KvCacheAddresses all_;     // device blocks and scratch
  std::unique_ptr<server::CacheClient> client_;
  std::vector<std::vector<bool>> scratch_busy_;  // per group, per scratch chunk
  size_t scratch_retained_ = 0;                  // busy for good: an Unprovable load's (F7)
  std::map<JobId, Job> jobs_;
  std::vector<JobVerdict> finished_;
  GroupBlocks invalid_;
  std::string fail_stop_reason_;
  server::TestHook load_hook_ = server::TestHook::kNone;
  server::TestHook store_hook_ = server::TestHook::kNone;
};

}  // namespace kvtier
