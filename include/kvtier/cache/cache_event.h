// CacheEvent: a change in the set of readable keys, reported to whoever mirrors the cache's
// contents (the engine's KV events, a cache server's index).
#pragma once

#include <vector>

#include "kvtier/core/chunk_key.h"

namespace kvtier {

enum class CacheEventKind {
  kStored,   // the keys became readable (a store succeeded)
  kRemoved,  // the keys stopped being readable (evicted or reset)
};

struct CacheEvent {
  CacheEventKind kind;
  std::vector<ChunkKey> keys;

  friend bool operator==(const CacheEvent&, const CacheEvent&) = default;
};

}  // namespace kvtier
