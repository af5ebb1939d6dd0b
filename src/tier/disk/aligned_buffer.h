// AlignedBuffer: heap memory aligned to kIoAlign, as O_DIRECT needs for its buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>

namespace kvtier::tier_internal {

// O_DIRECT alignment used for buffer addresses, file offsets and lengths: 4 KiB, the logical
// block size of NVMe drives formatted with 4 KiB sectors and a multiple of 512. Aligning lengths
// to the file system block (4 KiB on ext4 and XFS) also keeps direct writes off their slow paths
// for partial blocks.
inline constexpr size_t kIoAlign = 4096;

constexpr uint64_t round_up_io(uint64_t bytes) {
  return (bytes + kIoAlign - 1) / kIoAlign * kIoAlign;
}

inline bool io_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kIoAlign == 0;
}

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes) { resize(bytes); }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  // Makes the buffer at least `bytes` long (rounded up to kIoAlign); contents are not kept.
  void reserve(size_t bytes) {
    if (bytes > size_) resize(bytes);
  }
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_, size_}; }

 private:
  void resize(size_t bytes) {
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    const size_t rounded = round_up_io(bytes == 0 ? 1 : bytes);
    data_ = static_cast<std::byte*>(std::aligned_alloc(kIoAlign, rounded));
    if (data_ == nullptr) throw std::bad_alloc();
    size_ = rounded;
  }

  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvtier::tier_internal
