// CudaDevice: the Device interface on an NVIDIA GPU through the CUDA runtime API.
//
// - The runtime is linked statically and opens the driver (libcuda.so.1) at run time, so a
//   build with KVTIER_CUDA runs on machines without a driver: open() then returns
//   kUnavailable "no CUDA device: <reason>", and nothing else is touched.
// - allocate: cudaMalloc, zero-filled (as HostDevice). register_host: cudaHostRegister in
//   pieces of at most `register_piece_bytes`; when a piece fails, the pieces registered before
//   it are unregistered and a DeviceFault names the piece's size and offset (never a silently
//   smaller registration). A copy that crosses a piece boundary is still correct.
// - copy_batch validates every descriptor against allocations and registered host ranges
//   first (std::invalid_argument, F2), then enqueues through cuMemcpyBatchAsync — resolved at
//   run time with cudaGetDriverEntryPointByVersion (driver >= 12.8) — in calls of at most
//   `max_batch_copies` descriptors; without it (or a one-descriptor batch), a cudaMemcpyAsync
//   per descriptor, every return code checked. Unlike HostDevice, CUDA reads the descriptor
//   array at the call; the contract in device.h is the stricter one and still holds.
// - Faults are DeviceFault with the index of the first descriptor not enqueued; errors that
//   poison the context (illegal address and the like, see cuda_error.h) are marked sticky,
//   which the transfer engine turns into Unprovable + fail-stop (F7).
// - export_memory / import_memory: CUDA IPC handles (cudaIpcGetMemHandle /
//   cudaIpcOpenMemHandle) of allocations; an imported address is device memory in copies.
//
// Thread-safety: every method may be called from any thread (each sets the device current).
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "kvtier/core/status.h"
#include "kvtier/device/device.h"

namespace kvtier {

class AddressRanges;  // internal: the memory ranges every copy is checked against

struct CudaDeviceOptions {
  int ordinal = 0;
  // What callers may pass to one copy_batch call (Device::max_descriptors_per_call).
  size_t max_descriptors_per_call = 8192;
  // Descriptors per cuMemcpyBatchAsync call inside one copy_batch.
  size_t max_batch_copies = 1024;
  // Most bytes one cudaHostRegister call pins; a multiple of the 4 KiB page.
  size_t register_piece_bytes = size_t{1} << 30;
  // false: always the per-descriptor cudaMemcpyAsync loop (benchmarks and tests compare).
  bool use_batch_api = true;
};

class CudaDevice final : public Device {
 public:
  // kUnavailable ("no CUDA device: ...") without a driver or GPU, or when the ordinal does not
  // exist; kInvalidArgument for zero caps or a piece size that is not whole pages.
  static Result<std::unique_ptr<CudaDevice>> open(CudaDeviceOptions options = {});
  // Waits for the device's work, then destroys what is left (streams, events, allocations,
  // imported mappings) and unregisters host memory still registered. Release any work held
  // on the host (FaultInjectingDevice::release_hangs) first.
  ~CudaDevice() override;

  std::string name() const override { return "cuda:" + std::to_string(options_.ordinal); }
  // The GPU's name, e.g. "NVIDIA H200".
  const std::string& gpu_name() const { return gpu_name_; }
  // cuMemcpyBatchAsync was resolved and is used.
  bool uses_batch_api() const { return batch_api_ != nullptr; }
  size_t max_descriptors_per_call() const override { return options_.max_descriptors_per_call; }

  DeviceAddress allocate(size_t bytes) override;
  void free(DeviceAddress addr) override;
  DeviceAddress register_host(void* ptr, size_t bytes) override;
  void unregister_host(void* ptr) override;
  Result<std::vector<std::byte>> export_memory(DeviceAddress addr) override;
  Result<DeviceAddress> import_memory(std::span<const std::byte> description) override;
  void close_imported(DeviceAddress addr) override;

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

 private:
  CudaDevice(CudaDeviceOptions options, std::string gpu_name, void* batch_api,
             bool batch_api_reports_index);
  void make_current() const;
  void* stream_of(StreamHandle h) const;  // cudaStream_t; std::invalid_argument when unknown
  void* event_of(EventHandle h) const;    // cudaEvent_t
  void unregister_pieces(void* ptr, size_t bytes) const;

  const CudaDeviceOptions options_;
  const std::string gpu_name_;
  void* const batch_api_;               // the resolved cuMemcpyBatchAsync, or null
  const bool batch_api_reports_index_;  // the CUDA 12.8 ABI, with a failure index
  mutable std::mutex mu_;
  std::unique_ptr<AddressRanges> ranges_;  // never null
  std::set<DeviceAddress> imported_;
  std::unordered_map<uint32_t, void*> streams_;
  std::unordered_map<uint32_t, void*> events_;
  uint32_t next_stream_id_ = 1;
  uint32_t next_event_id_ = 1;
};

}  // namespace kvtier
