// ChunkKey: the identity of one chunk of KV. A key is the chained xxh3-128 hash of every token
// from the start of the sequence to the end of the chunk, rooted in a namespace (model, layout,
// KV-cache group, cache salt). Equal keys => equal prefixes in the same namespace => equal KV.
#pragma once

#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvtier {

using TokenId = uint32_t;

struct ChunkKey {
  uint64_t lo = 0;
  uint64_t hi = 0;

  friend auto operator<=>(const ChunkKey&, const ChunkKey&) = default;
  std::string hex() const;  // 32 lowercase hex digits, hi first
};

struct ChunkKeyHash {
  size_t operator()(const ChunkKey& k) const noexcept {
    return k.lo ^ (k.hi * 0x9e3779b97f4a7c15ULL);
  }
};

// Everything besides the tokens that must differ for two chunks to hold different KV.
struct KeyNamespace {
  std::string model;            // model name + revision
  uint64_t layout_fingerprint;  // KvLayout::fingerprint(): shapes, dtype, device layout
  uint32_t group = 0;           // KV-cache group index
  std::string cache_salt;       // per-tenant isolation; empty for none
};

// The key "before the first token": the root of every chain in this namespace.
ChunkKey namespace_root(const KeyNamespace& ns);

// key(i) = xxh3_128(key(i-1) || tokens of chunk i).
ChunkKey next_chunk_key(const ChunkKey& parent, std::span<const TokenId> chunk_tokens);

// Keys of every *full* chunk of `tokens` (a trailing partial chunk has no key).
// Throws std::invalid_argument if chunk_tokens == 0.
std::vector<ChunkKey> chunk_keys(const KeyNamespace& ns, std::span<const TokenId> tokens,
                                 size_t chunk_tokens);

}  // namespace kvtier
