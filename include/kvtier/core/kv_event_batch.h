// KvEventBatch: the changes of a cache's contents as KV events, in the shape vLLM's KV events
// have, so that a router that reads those reads kvtier's (docs/events.md specifies every
// field). One home for the format: KvEventPublisher encodes with it, subscribers (the
// frontend's routing, tests) decode with it.
//
// A batch is a MessagePack array [ts, events, data_parallel_rank]; each event an array whose
// first element names its kind:
//   ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]
//   ["BlockRemoved", block_hashes, medium]
//   ["AllBlocksCleared"]
// A block hash is a ChunkKey as 16 bytes (bin) as kvtierd's protocol writes keys: lo, then hi,
// each little-endian. lora_id is always nil.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/status.h"

namespace kvtier {

// Where a chunk is (the events' `medium`).
inline constexpr std::string_view kMediumDevice = "device";
inline constexpr std::string_view kMediumHost = "host";

enum class KvEventKind { kBlockStored, kBlockRemoved, kAllBlocksCleared };

struct KvEvent {
  KvEventKind kind = KvEventKind::kBlockStored;
  std::vector<ChunkKey> block_hashes;  // stored, removed
  std::optional<ChunkKey> parent;      // stored: the block before the first, when known
  std::vector<TokenId> token_ids;      // stored: the blocks' tokens, when known (else none)
  uint32_t block_size = 0;             // stored: tokens per block (chunk)
  std::string medium;                  // stored, removed: device, host, disk, redis

  friend bool operator==(const KvEvent&, const KvEvent&) = default;
};

struct KvEventBatch {
  double ts = 0;  // seconds since the Unix epoch when the batch was sent
  std::vector<KvEvent> events;
  std::optional<int64_t> data_parallel_rank;  // the engine core's index; none for kvtierd

  friend bool operator==(const KvEventBatch&, const KvEventBatch&) = default;
};

std::string encode_kv_event_batch(const KvEventBatch& batch);
// kInvalidArgument naming what is wrong when `payload` is not such a batch.
Result<KvEventBatch> decode_kv_event_batch(std::string_view payload);

// A sequence number as its 8-byte big-endian frame, and back (nullopt unless 8 bytes).
std::string encode_sequence(uint64_t seq);
std::optional<uint64_t> decode_sequence(std::string_view frame);

}  // namespace kvtier
