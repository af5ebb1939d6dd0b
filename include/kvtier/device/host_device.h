// HostDevice: a software model of an accelerator, so every contract rule is testable on a
// machine without a GPU.
//
// - "Device memory" is page-aligned host memory; addresses are process pointers.
// - Each stream is a thread executing its queue in order; copies really move bytes, reading
//   the caller's descriptor array when they execute (as a DMA engine does), so a descriptor
//   buffer reused too early produces wrong bytes that a test sees.
// - copy_threads > 1 spreads the bytes of one copy_batch of at least 512 KiB over that many
//   threads (the stream's own and helpers the streams share), as a DMA engine spreads a
//   transfer over its channels. A stream still runs one op at a time: the op ends when all its
//   bytes are copied.
// - Events, wait_event and host functions follow CUDA semantics (see device.h).
// - copy_batch validates every descriptor first: a source or destination outside device memory
//   / registered host memory (as the CopyKind requires) is std::invalid_argument (F2: not a
//   device fault). HostDevice itself never faults; wrap it in FaultInjectingDevice for that.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/device/device.h"

namespace kvtier {

class AddressRanges;  // internal: the memory ranges every copy is checked against
class TaskPool;

class HostDevice final : public Device {
 public:
  static constexpr size_t kDefaultMaxDescriptorsPerCall = 8192;
  // copy_threads: threads that copy one copy_batch (>= 1; see above).
  explicit HostDevice(size_t max_descriptors_per_call = kDefaultMaxDescriptorsPerCall,
                      size_t copy_threads = 1);
  // Waits for every stream's queued work. Release any work held on the host
  // (FaultInjectingDevice::release_hangs, a host function waiting on a latch) first.
  ~HostDevice() override;

  std::string name() const override { return "host"; }
  size_t max_descriptors_per_call() const override { return max_descriptors_per_call_; }

  DeviceAddress allocate(size_t bytes) override;
  void free(DeviceAddress addr) override;
  DeviceAddress register_host(void* ptr, size_t bytes) override;
  void unregister_host(void* ptr) override;

  StreamHandle create_stream() override;
  void destroy_stream(StreamHandle stream) override;
  EventHandle create_event() override;
  void destroy_event(EventHandle event) override;

  void record(EventHandle event, StreamHandle stream) override;
  bool query(EventHandle event) override;
  void synchronize(EventHandle event) override;
  double elapsed_ms(EventHandle start, EventHandle end) override;
  void wait_event(StreamHandle stream, EventHandle event) override;

  void copy_batch(StreamHandle stream, CopyKind kind,
                  std::span<const CopyDescriptor> descriptors) override;
  void launch_host_func(StreamHandle stream, std::function<void()> fn) override;

  // Makes memory the caller owns and keeps mapped (e.g. a shared-memory mapping of another
  // process's KV cache) usable as device memory, the role CUDA IPC handles play on a GPU. The
  // device never frees it; release_adopted_memory() forgets it (std::invalid_argument for a
  // range that was not adopted). The caller must not unmap it while copies may touch it.
  DeviceAddress adopt_device_memory(void* ptr, size_t bytes);
  void release_adopted_memory(void* ptr);

  // Test support: returns once every stream is idle, or blocked on an event that has not
  // completed, or blocked on a closed latch (the internal Gate). After it returns, any copy that
  // could run has run.
  void quiesce();
  // Streams created and not yet destroyed.
  size_t live_streams() const;

 private:
  struct Op;
  struct Stream;
  struct Event;
  void run_stream(Stream* stream);
  Stream& stream_locked(StreamHandle h);
  Event& event_locked(EventHandle h);
  void enqueue(StreamHandle stream, Op op);  // requires mu_
  void wake_waiters(uint32_t event);         // requires mu_
  // Runs one copy op: on the stream's thread, or for a large op on copy_threads_ threads.
  void copy(std::span<const CopyDescriptor> descriptors);

  const size_t max_descriptors_per_call_;
  mutable std::mutex mu_;
  // Signalled when an op finishes or a stream blocks: synchronize() and quiesce() wait here.
  std::condition_variable changed_;
  std::unique_ptr<AddressRanges> ranges_;  // never null
  std::set<DeviceAddress> adopted_;        // device ranges the caller owns (adopt_device_memory)
  std::unordered_map<uint32_t, std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Stream>> retired_streams_;  // destroyed, thread draining
  std::unordered_map<uint32_t, std::unique_ptr<Event>> events_;
  const size_t copy_threads_;
  // copy_threads_ - 1 helpers (null for 1), shared by the streams. Destroyed after the
  // destructor joined every stream: no copy op runs on it any more.
  std::unique_ptr<TaskPool> copy_helpers_;
  uint32_t next_stream_id_ = 1;
  uint32_t next_event_id_ = 1;
};

}  // namespace kvtier
