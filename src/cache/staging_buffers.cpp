#include "staging_buffers.h"

#include <sys/mman.h>

#include <new>
#include <stdexcept>

namespace kvtier::cache_internal {

namespace {
constexpr size_t kAlign = 4096;
}

StagingBuffers::StagingBuffers(size_t bytes, size_t count)
    : bytes_(bytes), stride_((bytes + kAlign - 1) / kAlign * kAlign) {
  if (bytes == 0 || count == 0 || count > UINT32_MAX) {
    throw std::invalid_argument("StagingBuffers: bytes and count must be > 0 (count < 2^32)");
  }
  if (stride_ > SIZE_MAX / count) throw std::bad_alloc();
  mapped_ = stride_ * count;
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  base_ = static_cast<std::byte*>(p);
  free_.reserve(count);
  for (size_t i = count; i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
}

StagingBuffers::~StagingBuffers() {
  munmap(base_, mapped_);
}

std::optional<uint32_t> StagingBuffers::take() {
  if (free_.empty()) return std::nullopt;
  const uint32_t buffer = free_.back();
  free_.pop_back();
  return buffer;
}

void StagingBuffers::give(uint32_t buffer) {
  free_.push_back(buffer);
}

std::span<std::byte> StagingBuffers::bytes(uint32_t buffer) const {
  return {base_ + size_t{buffer} * stride_, bytes_};
}

}  // namespace kvtier::cache_internal
