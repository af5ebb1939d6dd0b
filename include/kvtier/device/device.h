// Device: the narrow interface kvtier needs from an accelerator runtime. Implementations:
// HostDevice (a software model: streams are threads that really move bytes), CudaDevice, and
// FaultInjectingDevice (a decorator that injects faults from a seeded plan).
//
// Semantics follow CUDA's:
// - Work enqueued on one stream runs in order; different streams run concurrently.
// - record(event, stream) captures all work enqueued on `stream` so far; query(event) is true
//   once that work finished (an event never recorded is complete); wait_event(stream, event)
//   makes later work on `stream` wait for the event's most recent record at call time.
// - copy_batch enqueues descriptors in order. On a fault it throws DeviceFault whose
//   descriptor_index() says how many descriptors were enqueued before it; those may still be
//   running. The descriptor array is read by the device when the copies execute, not at the
//   call: it must stay valid and unchanged until an event recorded after the call completes.
// - Device faults are DeviceFault; bad arguments are std::invalid_argument (never soft, F2).
//
// Thread-safety: every method may be called from any thread, concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/core/status.h"

namespace kvtier {

// An address in device memory or in registered host memory (the device's address space).
using DeviceAddress = uint64_t;

enum class CopyKind { kDeviceToHost, kHostToDevice };

struct CopyDescriptor {
  DeviceAddress src = 0;
  DeviceAddress dst = 0;
  uint64_t bytes = 0;

  friend bool operator==(const CopyDescriptor&, const CopyDescriptor&) = default;
};

struct StreamHandle {
  uint32_t id = 0;
  friend auto operator<=>(const StreamHandle&, const StreamHandle&) = default;
};
struct EventHandle {
  uint32_t id = 0;
  friend auto operator<=>(const EventHandle&, const EventHandle&) = default;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string name() const = 0;
  // Most descriptors one copy_batch call accepts; callers split longer lists.
  virtual size_t max_descriptors_per_call() const = 0;

  // Device memory. Throws std::bad_alloc (not a DeviceFault) when it cannot be had.
  virtual DeviceAddress allocate(size_t bytes) = 0;
  virtual void free(DeviceAddress addr) = 0;

  // Makes host memory usable as a copy source/destination (pinning). The range stays
  // registered until unregister_host.
  virtual DeviceAddress register_host(void* ptr, size_t bytes) = 0;
  virtual void unregister_host(void* ptr) = 0;

  // Sharing device memory with another process: the cache server copies between a client's
  // device memory and its own pool without the bytes crossing a socket. The client's
  // export_memory(addr) describes an allocation made by allocate() (for CUDA an IPC handle);
  // the server's import_memory(description) maps it and returns its address in the server's
  // device, usable as device memory in copies until close_imported(address). Expected failures
  // (the device cannot share memory, a stale or foreign description) are errors, not throws.
  // The defaults say the device cannot share memory.
  virtual Result<std::vector<std::byte>> export_memory(DeviceAddress addr);
  virtual Result<DeviceAddress> import_memory(std::span<const std::byte> description);
  // Throws std::invalid_argument when `addr` is not an address import_memory returned.
  virtual void close_imported(DeviceAddress addr);

  virtual StreamHandle create_stream() = 0;
  // Destroys the stream once its queued work finished (like cudaStreamDestroy).
  virtual void destroy_stream(StreamHandle stream) = 0;
  virtual EventHandle create_event() = 0;
  virtual void destroy_event(EventHandle event) = 0;

  virtual void record(EventHandle event, StreamHandle stream) = 0;
  virtual bool query(EventHandle event) = 0;
  virtual void synchronize(EventHandle event) = 0;
  // Milliseconds between two completed events.
  virtual double elapsed_ms(EventHandle start, EventHandle end) = 0;
  virtual void wait_event(StreamHandle stream, EventHandle event) = 0;

  virtual void copy_batch(StreamHandle stream, CopyKind kind,
                          std::span<const CopyDescriptor> descriptors) = 0;

  // Runs `fn` on the stream, in order with its other work (cudaLaunchHostFunc). `fn` must not
  // call back into the device.
  virtual void launch_host_func(StreamHandle stream, std::function<void()> fn) = 0;
};

}  // namespace kvtier
