// TransferEngine: moves chunks between a rank's device KV cache and the host pool. One per rank.
//
// Contract (rule ids from docs/architecture.md):
// - Two directions, store (device -> host) and load (host -> device), each strictly FIFO: a
//   transfer's copies start after the previous transfer of its direction ended, and poll()
//   reports results in submission order per direction (F5).
// - Every submitted job gets exactly one TransferResult from poll() (F1). A DeviceFault at
//   submit, while polled, or while waited for becomes that job's Failed or Unprovable outcome;
//   any other exception propagates unchanged from the call that raised it (F2). Such an
//   exception is a bug in the caller or the device: the engine is then in an unspecified
//   state and the process should treat it as fatal.
// - A failure is reported only once the end marker recorded after the last enqueued copy
//   completed (F5); a job whose end marker could not be recorded, whose end marker keeps
//   raising on query, or that is not done by its deadline is Unprovable (F7, F8), and so is
//   every job queued behind it in that direction. After that, fail_stopped() is true and new
//   submissions in that direction fail before enqueueing anything.
// - Streams, events and descriptor buffers that saw a fault are discarded (Failed) or
//   quarantined (Unprovable), never pooled (F6). Consecutive transfers of a direction share a
//   stream until it sees a fault; a faulted stream takes no new transfer.
// - A store waits for all compute enqueued on the compute stream before submit (it reads
//   finished KV); a load does too (it must land after earlier writes to its blocks) (F10).
//
// Not thread-safe: one thread (the rank's worker loop) calls it.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/core/config.h"
#include "kvtier/core/kv_layout.h"
#include "kvtier/core/status.h"
#include "kvtier/device/device.h"
#include "kvtier/transfer/copy_descriptors.h"
#include "kvtier/transfer/transfer_result.h"

namespace kvtier {

struct TransferOptions {
  Duration deadline = std::chrono::seconds(30);  // from submission (transfer_deadline_s)
  size_t max_batch_descriptors = 8192;           // per copy_batch call (capped by the device)
  bool coalesce = true;
  uint32_t query_fault_limit = 3;  // faulted queries of one end marker before Unprovable
};

// The engine's options as the `transfer` config section sets them.
TransferOptions transfer_options(const TransferConfig& config);

// The per-transfer resources of one kind (streams, events, descriptor buffers). F6: one that saw
// a fault is never pooled again; it is discarded, or quarantined for the life of the process.
struct PoolCounts {
  size_t created = 0;
  size_t in_use = 0;
  size_t pooled = 0;
  size_t discarded = 0;
  size_t quarantined = 0;

  // Conservation: every resource ever created is in exactly one state.
  bool conserved() const { return created == in_use + pooled + discarded + quarantined; }
};

struct TransferStats {
  uint64_t submitted = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  uint64_t unprovable = 0;
  uint64_t bytes_completed = 0;
  uint64_t descriptors_submitted = 0;
  uint64_t copy_calls = 0;
  PoolCounts streams;
  PoolCounts events;
  PoolCounts descriptor_buffers;
};

class TransferEngine {
 public:
  // `compute_stream`: where the forward pass writes KV. `caches` and `slots` must match
  // `layout` (std::invalid_argument otherwise).
  TransferEngine(Device& device, KvLayout layout, KvCacheAddresses caches, HostSlots slots,
                 StreamHandle compute_stream, TransferOptions options,
                 const Clock& clock = SteadyClock::instance());
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // Enqueues the copies of `chunks`. Never raises a DeviceFault. Bad arguments (unknown
  // block or slot, duplicate job id) are std::invalid_argument.
  void submit(JobId job, Direction direction, std::span<const ChunkTransfer> chunks);
  // What submit raises for `chunks` out of this engine's range (group, block, slot, layer),
  // without submitting anything.
  void check(std::span<const ChunkTransfer> chunks) const;

  // Results decided since the last call, in submission order per direction.
  std::vector<TransferResult> poll();

  // Blocks until each of `jobs` has finished its copies, seen a fault, or passed its
  // deadline; never longer than the latest of their deadlines. Results still come from poll().
  void wait(std::span<const JobId> jobs);

  // F10, a device-side fence: work enqueued on the compute stream after this call waits until
  // each of `jobs` has finished its copies; the host does not block. Jobs already reported, or
  // that enqueued nothing, need no fence. Returns false when some job's copies cannot be fenced:
  // its end marker was never recorded or the device faulted on the wait. Such a job is (or will
  // be) Unprovable, and its blocks must never be written again (F7).
  bool fence_compute(std::span<const JobId> jobs);

  // Jobs submitted and not yet reported by poll().
  size_t in_flight() const;
  bool fail_stopped() const { return fail_stopped_; }
  TransferStats stats() const;
  // F12 at quiescence (nothing in flight): every stream, event and descriptor buffer is pooled,
  // discarded or quarantined. Returns an error naming the leak otherwise.
  Status audit() const;

 private:
  struct Lane;
  struct Transfer;

  void decide(Transfer& t, bool poisoned);
  void finish(Transfer& t);
  void release_lane(Transfer& t, Outcome outcome);
  // An Unprovable was decided: the direction (or, for a sticky fault, the whole device) takes
  // no new work, and fail_stopped() turns true at once.
  void fail_stop(Direction direction, bool whole_device);
  Transfer* find(JobId job);

  Device& device_;
  KvLayout layout_;
  KvCacheAddresses caches_;
  HostSlots slots_;
  StreamHandle compute_stream_;
  TransferOptions options_;
  const Clock& clock_;

  struct Pools;                        // internal: the stream, event and descriptor buffer pools
  std::unique_ptr<Pools> pools_;       // never null
  std::deque<Transfer> fifo_[2];       // indexed by Direction
  std::shared_ptr<Lane> lanes_[2];     // the stream new transfers of a direction go on
  bool closed_[2] = {false, false};    // new submissions fail before enqueueing anything
  bool poisoned_[2] = {false, false};  // in-flight transfers not yet decided are Unprovable
  bool fail_stopped_ = false;
  TransferStats stats_;
};

}  // namespace kvtier
