// RequestState and Job: what the scheduler side remembers of one request and of one job in
// flight. Internal to connector/.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/connector/scheduler_connector.h"

namespace kvtier {

struct SchedulerConnector::RequestState {
  RequestId id;
  std::vector<ChunkKey> roots;              // per group: namespace root (salt included)
  std::vector<std::vector<ChunkKey>> keys;  // per group: keys of the full chunks seen so far
  GroupBlocks blocks;                       // per group: the block table as the engine gave it
  std::vector<size_t> stored_chunks;        // per group: chunks [0, n) already considered
  // Fast path of build_step_metadata: below this many computed tokens no group completes a
  // chunk it has not considered, so a step that adds no block needs no work for the request.
  size_t next_store_tokens = 0;
  bool counted_lookups = false;  // its prompt keys counted for admission
  size_t match_from = 0;         // num_computed of the last match
  size_t match_to = 0;           // tokens the last match covers
  std::optional<JobId> load;     // its load in flight, or one that could not start (F4)
  size_t stores_in_flight = 0;
  bool finished = false;  // request_finished() was called
  // An Unprovable store read its blocks: copies may still read them, so the engine never gets
  // them back (F7: every lease of an Unprovable transfer, device blocks included, is kept).
  bool blocks_quarantined = false;
};

enum class JobKind { kLoad, kStore };

struct SchedulerConnector::Job {
  JobId id = 0;
  JobKind kind = JobKind::kLoad;
  RequestId request;
  std::vector<ChunkKey> keys;       // pinned (load) or pending (store) in the cache manager
  GroupBlocks blocks;               // per group: destination (load) or source (store) blocks
  std::vector<size_t> first_index;  // per group: table index of blocks[g][0] (loads)
  GroupBlocks invalid;              // per group: blocks a rank reported invalid (F4)
  size_t from_tokens = 0;           // load: tokens the request had before
  size_t to_tokens = 0;             // load: tokens it has when the load succeeds
  uint64_t epoch = 0;               // reset_cache() count when it was created
  TimePoint created{};
  std::vector<bool> acked;  // per rank (F9)
  uint32_t acks = 0;
  bool failed = false;      // some rank failed it: sticky (F9)
  bool unprovable = false;  // some rank could not prove its copies stopped (F7)
};

}  // namespace kvtier
