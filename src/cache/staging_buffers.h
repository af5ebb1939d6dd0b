// StagingBuffers: `count` buffers of `bytes` each, in one anonymous mapping, handed out and
// taken back. Each buffer starts on a 4 KiB boundary, so the disk tier writes straight from it
// with O_DIRECT instead of copying it into a bounce buffer first. Pages are faulted in on first
// use and then reused (the most recently returned buffer goes out first): memory grows to the
// most buffers ever out at once, never beyond count * bytes, and nothing is allocated per chunk.
//
// Thread-safety: none; the owner serializes take and give (TierMover under its mutex). A
// buffer's bytes belong to whoever took it until it is given back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kvtier::cache_internal {

class StagingBuffers {
 public:
  // Throws std::bad_alloc when the mapping cannot be made, std::invalid_argument for a zero
  // size or count.
  StagingBuffers(size_t bytes, size_t count);
  ~StagingBuffers();
  StagingBuffers(const StagingBuffers&) = delete;
  StagingBuffers& operator=(const StagingBuffers&) = delete;

  // A free buffer, or nullopt when all `count` are out.
  std::optional<uint32_t> take();
  void give(uint32_t buffer);
  std::span<std::byte> bytes(uint32_t buffer) const;

 private:
  size_t bytes_;
  size_t stride_;  // bytes rounded up to 4 KiB
  size_t mapped_;
  std::byte* base_ = nullptr;
  std::vector<uint32_t> free_;
};

}  // namespace kvtier::cache_internal
