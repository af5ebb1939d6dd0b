// Reaching device memory through the Device interface only (on a GPU there is no other way):
// page-aligned registered host buffers and synchronous copies through them.
#pragma once

#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "kvtier/device/device.h"
#include "support/byte_pattern.h"

namespace kvtier::testing {

// Page-aligned host memory, zeroed and registered with `device` while the object lives.
// Page-aligned because a GPU pins whole pages: two buffers sharing a page cannot both register.
class PinnedBuffer {
 public:
  PinnedBuffer(Device& device, size_t bytes) : device_(device), bytes_(bytes) {
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    data_ = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, rounded);
    addr_ = device_.register_host(data_, bytes);
  }
  ~PinnedBuffer() {
    device_.unregister_host(data_);
    std::free(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  std::byte* data() const { return data_; }
  DeviceAddress addr() const { return addr_; }
  size_t bytes() const { return bytes_; }

 private:
  Device& device_;
  size_t bytes_;
  std::byte* data_ = nullptr;
  DeviceAddress addr_ = 0;
};

// Enqueues the copies on a fresh stream and waits for them.
inline void copy_and_wait(Device& device, CopyKind kind,
                          const std::vector<CopyDescriptor>& descriptors) {
  const StreamHandle stream = device.create_stream();
  const EventHandle done = device.create_event();
  device.copy_batch(stream, kind, descriptors);
  device.record(done, stream);
  device.synchronize(done);
  device.destroy_event(done);
  device.destroy_stream(stream);
}

// Writes fill_pattern(seed) into [dst, dst + bytes) of device memory.
inline void write_device(Device& device, DeviceAddress dst, size_t bytes, uint64_t seed) {
  PinnedBuffer staging(device, bytes);
  fill_pattern(staging.data(), bytes, seed);
  copy_and_wait(device, CopyKind::kHostToDevice, {{staging.addr(), dst, bytes}});
}

// The bytes of [src, src + bytes) of device memory.
inline std::vector<std::byte> read_device(Device& device, DeviceAddress src, size_t bytes) {
  PinnedBuffer staging(device, bytes);
  copy_and_wait(device, CopyKind::kDeviceToHost, {{src, staging.addr(), bytes}});
  return std::vector<std::byte>(staging.data(), staging.data() + bytes);
}

}  // namespace kvtier::testing
