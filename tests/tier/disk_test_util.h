// Helpers for the disk tier's tests: chunks with known contents and one-key puts and gets (and
// run_in_child, support/child_namespace.h).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "kvtier/tier/disk_tier.h"
#include "support/byte_pattern.h"
#include "support/child_namespace.h"

namespace kvtier::testing {

inline ChunkKey disk_key(uint64_t i) {
  return ChunkKey{.lo = i, .hi = 0xd15c};
}

inline std::vector<std::byte> chunk_bytes(uint64_t id, size_t bytes) {
  std::vector<std::byte> c(bytes);
  fill_pattern(c.data(), bytes, id);
  return c;
}

// 4 KiB-aligned memory, as host pool slots are: the tier reads into it directly.
struct AlignedChunk {
  std::byte* data;
  size_t size;
  explicit AlignedChunk(size_t bytes)
      : data(static_cast<std::byte*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))),
        size(bytes) {}
  ~AlignedChunk() { std::free(data); }
  AlignedChunk(const AlignedChunk&) = delete;
  AlignedChunk& operator=(const AlignedChunk&) = delete;
  std::span<std::byte> span() const { return {data, size}; }
};

inline Result<std::vector<ChunkStatus>> put_one(Tier& tier, uint64_t id, size_t bytes,
                                                Duration timeout = std::chrono::seconds(10)) {
  const std::vector<std::byte> c = chunk_bytes(id, bytes);
  const ChunkKey k = disk_key(id);
  const std::span<const std::byte> s(c);
  return tier.put(std::span(&k, 1), std::span(&s, 1), timeout);
}

// kOk only when the bytes came back as written.
inline ChunkStatus get_one(Tier& tier, uint64_t id, size_t bytes,
                           Duration timeout = std::chrono::seconds(10)) {
  std::vector<std::byte> out(bytes, std::byte{0});
  const ChunkKey k = disk_key(id);
  const std::span<std::byte> d(out);
  Result<std::vector<ChunkStatus>> r = tier.get(std::span(&k, 1), std::span(&d, 1), timeout);
  if (!r) {
    ADD_FAILURE() << "get " << id << ": " << r.error().to_string();
    return ChunkStatus::kError;
  }
  if ((*r)[0] == ChunkStatus::kOk && !has_pattern(out.data(), bytes, id)) {
    ADD_FAILURE() << "chunk " << id << " came back kOk with the wrong bytes";
    return ChunkStatus::kError;
  }
  return (*r)[0];
}

}  // namespace kvtier::testing
