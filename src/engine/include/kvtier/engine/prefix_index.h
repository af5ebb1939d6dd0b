// PrefixIndex: which blocks each engine core holds, and where (device, host, lower tiers), as
// the cores' KV events say (docs/events.md); the frontend asks it how much of a prompt's prefix
// each core holds, and choose_core() picks the core a request goes to (docs/engine.md,
// "Routing"). `kvtier router` does the same over several `kvtier serve` instances
// (docs/router.md): one index per instance, one slot per engine core of it. The index is a
// hint: events it missed only make a choice worse, never a request wrong.
//
// Not thread-safe: the core manager (the router's backend pool) guards it with its mutex.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "kvtier/core/kv_event_batch.h"
#include "kvtier/engine/engine_shape.h"

namespace kvtier {

// A prompt's keys as the cores' caches name them: one per full block of the device prefix
// cache, one per full chunk of the host cache and the tiers below it.
struct PromptKeys {
  std::vector<ChunkKey> device;  // each block_size tokens
  uint32_t block_size = 0;
  std::vector<ChunkKey> chunks;  // each chunk_tokens tokens
  uint32_t chunk_tokens = 0;
};

// How a server keys a prompt as its caches do: the device prefix cache every block_size tokens
// under device_namespace, the host cache and the tiers below it every chunk_tokens tokens under
// host_namespace (engine_shape.h: device_key_namespace, host_key_namespace).
struct PromptKeying {
  KeyNamespace device_namespace;
  uint32_t block_size = 0;
  KeyNamespace host_namespace;
  uint32_t chunk_tokens = 0;

  // The prompt's keys (hashing: the costly part of routing; call it outside locks).
  PromptKeys keys(std::span<const TokenId> prompt) const;
};

// How the engine cores of a server of this shape key prompts: device_key_namespace and
// host_key_namespace (engine_shape.h), with the block and chunk sizes of group 0.
PromptKeying prompt_keying(const EngineShape& shape);

// How much a cached token is worth on each medium, against 1 for a token to compute: a device
// hit costs nothing, a host hit a copy, a lower tier's a read and a copy.
inline constexpr double kDeviceWeight = 1.0;
inline constexpr double kHostWeight = 0.75;
inline constexpr double kLowerWeight = 0.5;

class PrefixIndex {
 public:
  explicit PrefixIndex(uint32_t cores);

  // Applies one batch of `core`'s events, in order. Media other than device and host count as
  // lower tiers.
  void apply(uint32_t core, const KvEventBatch& batch);
  // Forgets everything of `core` (its events stopped being trustworthy).
  void clear(uint32_t core);

  // The prompt tokens `core` holds, weighed by where: the leading device blocks (kDeviceWeight
  // per token), then the leading chunks on the host beyond them (kHostWeight), then the
  // leading chunks on the host or a lower tier beyond those (kLowerWeight).
  double cached_tokens(uint32_t core, const PromptKeys& keys) const;
  // Blocks `core` holds on `medium` (for tests and metrics).
  size_t blocks(uint32_t core, std::string_view medium) const;

 private:
  struct Core {
    std::unordered_set<ChunkKey, ChunkKeyHash> device;
    std::unordered_set<ChunkKey, ChunkKeyHash> host;
    std::vector<std::pair<std::string, std::unordered_set<ChunkKey, ChunkKeyHash>>> lower;
  };
  std::unordered_set<ChunkKey, ChunkKeyHash>& set_of(Core& core, const std::string& medium);

  std::vector<Core> cores_;
};

// One core as choose_core() sees it.
struct CoreLoad {
  bool serving = false;
  double cached = 0;      // PrefixIndex::cached_tokens for the prompt
  uint64_t work = 0;      // tokens its requests in flight still cost: uncached prompt + output
  uint32_t requests = 0;  // its requests in flight
};

// How much a token of work in flight weighs against a token to compute. Below 1: a prefix
// computed elsewhere is lost for good (the conversation's later rounds follow it), while load
// passes, so a conversation stays where its prefix is until its core is several requests busier.
inline constexpr double kLoadWeight = 0.25;

// The serving core with the least cost for a prompt of `prompt_tokens`: the prompt tokens it
// would compute (prompt_tokens - cached) plus kLoadWeight x the work already in flight on it,
// so that a hot prefix spills to another core once the core that holds it is busier than what
// the prefix saves (by 1 / kLoadWeight). Ties go to fewer requests in flight, then to the lower
// index. nullopt when no core serves.
std::optional<uint32_t> choose_core(std::span<const CoreLoad> cores, size_t prompt_tokens);

// Routing by load alone: the serving core with the fewest requests in flight, ties to the lower
// index. nullopt when no core serves.
std::optional<uint32_t> least_loaded(std::span<const CoreLoad> cores);

// The work a request adds to the core choose_core() picked for it (CoreLoad::work): the prompt
// tokens that core computes, and its output.
uint64_t request_work(size_t prompt_tokens, double cached, uint32_t max_tokens);

}  // namespace kvtier
