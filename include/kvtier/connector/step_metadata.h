// What the scheduler side of the connector tells every rank's worker side each step, and what
// each worker side reports back. Plain values: an engine carries them between its scheduler and
// its worker processes however it likes (the reference engine serializes them over ZeroMQ).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/transfer/copy_descriptors.h"
#include "kvtier/transfer/transfer_result.h"

namespace kvtier {

using RequestId = std::string;

// Device block ids, one list per KV-cache group (indexed like KvLayout::groups).
using GroupBlocks = std::vector<std::vector<uint32_t>>;

// One load or store of one request, to be run on every rank. Every rank uses the same slot
// ids: a rank's host pool holds that rank's share of each chunk.
struct TransferJob {
  JobId job = 0;
  RequestId request;
  std::vector<ChunkTransfer> chunks;
  // keys[i]: the cache key of chunks[i]. A worker side whose cache is addressed by key rather
  // than by slot (kvtierd, `cache.mode: server`) needs them.
  std::vector<ChunkKey> keys;
};

struct StepMetadata {
  uint64_t step = 0;
  std::vector<TransferJob> loads;   // start at this step, before the forward pass
  std::vector<TransferJob> stores;  // of KV this step's forward pass writes; submitted next step
  // F10: store jobs still reading device blocks that this step hands to new owners. The forward
  // pass (and this step's loads) must not write those blocks before these stores finished.
  std::vector<JobId> flush;
};

struct JobVerdict {
  JobId job = 0;
  Outcome outcome = Outcome::kCompleted;
  std::string error;  // empty when Completed
};

// One rank's report for one step.
struct WorkerOutput {
  uint32_t rank = 0;
  std::vector<JobVerdict> finished;  // jobs whose outcome was decided on this rank
  // F4: destination blocks of this rank's failed loads, per group. Reported no later than the
  // verdict of the load that wrote them.
  GroupBlocks invalid_blocks;
  bool fail_stop = false;  // F7: this rank saw an Unprovable transfer
  std::string fail_stop_reason;
};

}  // namespace kvtier
