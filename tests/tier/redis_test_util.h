// Helpers for the Redis tier tests: a chunk-sized pattern per id, and put/get of single chunks.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "kvtier/tier/tier.h"
#include "support/byte_pattern.h"

namespace kvtier::tier_test {

inline constexpr size_t kChunk = 16 << 10;

inline ChunkKey key(uint64_t i) {
  return ChunkKey{.lo = i * 0x9e3779b97f4a7c15ULL, .hi = i};
}

inline std::vector<ChunkKey> keys(uint64_t first, uint64_t count) {
  std::vector<ChunkKey> out;
  for (uint64_t i = first; i < first + count; ++i) out.push_back(key(i));
  return out;
}

inline std::vector<std::byte> chunk(uint64_t seed, size_t bytes = kChunk) {
  std::vector<std::byte> c(bytes);
  testing::fill_pattern(c.data(), bytes, seed);
  return c;
}

// Puts chunk(id) under key(id) for ids [first, first + count); the call's result.
inline Result<std::vector<ChunkStatus>> put_range(Tier& tier, uint64_t first, uint64_t count,
                                                  Duration timeout) {
  std::vector<std::vector<std::byte>> chunks;
  std::vector<std::span<const std::byte>> spans;
  for (uint64_t i = first; i < first + count; ++i) chunks.push_back(chunk(i));
  for (const auto& c : chunks) spans.emplace_back(c);
  return tier.put(keys(first, count), spans, timeout);
}

// Gets ids [first, first + count); statuses, and whether every kOk chunk has its pattern.
struct GetOutcome {
  Result<std::vector<ChunkStatus>> statuses;
  bool ok_chunks_intact = true;
};

inline GetOutcome get_range(Tier& tier, uint64_t first, uint64_t count, Duration timeout) {
  std::vector<std::vector<std::byte>> out(count, std::vector<std::byte>(kChunk));
  std::vector<std::span<std::byte>> spans(out.begin(), out.end());
  GetOutcome g{tier.get(keys(first, count), spans, timeout)};
  if (g.statuses) {
    for (uint64_t i = 0; i < count; ++i) {
      if ((*g.statuses)[i] == ChunkStatus::kOk &&
          !testing::has_pattern(out[i].data(), kChunk, first + i)) {
        g.ok_chunks_intact = false;
      }
    }
  }
  return g;
}

inline std::vector<ChunkStatus> all(ChunkStatus s, size_t n) {
  return std::vector(n, s);
}

}  // namespace kvtier::tier_test
