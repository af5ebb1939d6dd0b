#include "kvtier/core/chunk_key.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstdio>
#include <stdexcept>

namespace kvtier {
namespace {

ChunkKey from_xxh(XXH128_hash_t h) {
  return ChunkKey{h.low64, h.high64};
}

// Length-prefixed so that ("ab","c") and ("a","bc") hash differently.
void update_field(XXH3_state_t* st, const void* data, uint64_t len) {
  XXH3_128bits_update(st, &len, sizeof len);
  XXH3_128bits_update(st, data, len);
}

}  // namespace

std::string ChunkKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

ChunkKey namespace_root(const KeyNamespace& ns) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_state_t* st = &state;
  XXH3_128bits_reset(st);
  static constexpr char kDomain[] = "kvtier.chunk_key.v1";
  update_field(st, kDomain, sizeof kDomain - 1);
  update_field(st, ns.model.data(), ns.model.size());
  update_field(st, &ns.layout_fingerprint, sizeof ns.layout_fingerprint);
  update_field(st, &ns.group, sizeof ns.group);
  update_field(st, ns.cache_salt.data(), ns.cache_salt.size());
  return from_xxh(XXH3_128bits_digest(st));
}

ChunkKey next_chunk_key(const ChunkKey& parent, std::span<const TokenId> chunk_tokens) {
  // Fixed-size parent followed by the tokens: unambiguous because the parent is 16 bytes.
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset(&st);
  XXH3_128bits_update(&st, &parent.lo, sizeof parent.lo);
  XXH3_128bits_update(&st, &parent.hi, sizeof parent.hi);
  XXH3_128bits_update(&st, chunk_tokens.data(), chunk_tokens.size_bytes());
  return from_xxh(XXH3_128bits_digest(&st));
}

std::vector<ChunkKey> chunk_keys(const KeyNamespace& ns, std::span<const TokenId> tokens,
                                 size_t chunk_tokens) {
  if (chunk_tokens == 0) throw std::invalid_argument("chunk_keys: chunk_tokens must be > 0");
  std::vector<ChunkKey> keys;
  keys.reserve(tokens.size() / chunk_tokens);
  ChunkKey key = namespace_root(ns);
  for (size_t start = 0; start + chunk_tokens <= tokens.size(); start += chunk_tokens) {
    key = next_chunk_key(key, tokens.subspan(start, chunk_tokens));
    keys.push_back(key);
  }
  return keys;
}

}  // namespace kvtier
