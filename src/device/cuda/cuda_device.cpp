#include "kvtier/device/cuda_device.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <new>
#include <stdexcept>

#include "address_ranges.h"
#include "cuda/cuda_copy.h"
#include "cuda/cuda_error.h"
#include "kvtier/device/device_fault.h"

namespace kvtier {

using cuda::check;
using cuda::check_allocation;

namespace {

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}
cudaEvent_t as_event(void* e) {
  return static_cast<cudaEvent_t>(e);
}

void run_host_func(void* fn) {
  std::unique_ptr<std::function<void()>> owned(static_cast<std::function<void()>*>(fn));
  (*owned)();
}

}  // namespace

Result<std::unique_ptr<CudaDevice>> CudaDevice::open(CudaDeviceOptions options) {
  if (options.max_descriptors_per_call == 0 || options.max_batch_copies == 0 ||
      options.register_piece_bytes == 0) {
    return make_error(ErrorCode::kInvalidArgument, "cuda device: caps must be > 0");
  }
  if (options.register_piece_bytes % 4096 != 0) {
    // CUDA pins whole pages: pieces that share a page cannot both register.
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda device: register_piece_bytes " +
                          std::to_string(options.register_piece_bytes) +
                          " is not a multiple of the 4096-byte page");
  }
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    return make_error(ErrorCode::kUnavailable, "no CUDA device: " + cuda::describe(err));
  }
  if (options.ordinal < 0 || options.ordinal >= count) {
    return make_error(ErrorCode::kUnavailable, "no CUDA device: ordinal " +
                                                   std::to_string(options.ordinal) + " of " +
                                                   std::to_string(count) + " GPU(s)");
  }
  cudaDeviceProp prop{};
  cudaError_t err = cudaSetDevice(options.ordinal);
  if (err == cudaSuccess) err = cudaFree(nullptr);  // creates the primary context now
  if (err == cudaSuccess) err = cudaGetDeviceProperties(&prop, options.ordinal);
  if (err != cudaSuccess) {
    return make_error(ErrorCode::kUnavailable, "no CUDA device: cannot open GPU " +
                                                   std::to_string(options.ordinal) + ": " +
                                                   cuda::describe(err));
  }
  cuda::BatchCopyApi api;
  if (options.use_batch_api) api = cuda::resolve_batch_copy();
  return std::unique_ptr<CudaDevice>(
      new CudaDevice(options, prop.name, api.function, api.reports_fail_index));
}

CudaDevice::CudaDevice(CudaDeviceOptions options, std::string gpu_name, void* batch_api,
                       bool batch_api_reports_index)
    : options_(options),
      gpu_name_(std::move(gpu_name)),
      batch_api_(batch_api),
      batch_api_reports_index_(batch_api_reports_index),
      ranges_(std::make_unique<AddressRanges>()) {}

CudaDevice::~CudaDevice() {
  // Errors are ignored here: after a sticky fault every call fails, and there is nothing
  // left to report them to.
  make_current();
  (void)cudaDeviceSynchronize();
  std::lock_guard lock(mu_);
  for (auto& [id, s] : streams_) (void)cudaStreamDestroy(as_stream(s));
  for (auto& [id, e] : events_) (void)cudaEventDestroy(as_event(e));
  ranges_->for_each(AddressRanges::Kind::kDevice, [&](DeviceAddress addr, size_t) {
    void* p = reinterpret_cast<void*>(addr);
    (void)(imported_.contains(addr) ? cudaIpcCloseMemHandle(p) : cudaFree(p));
  });
  ranges_->for_each(AddressRanges::Kind::kHost, [&](DeviceAddress addr, size_t bytes) {
    unregister_pieces(reinterpret_cast<void*>(addr), bytes);
  });
}

void CudaDevice::make_current() const {
  (void)cudaSetDevice(options_.ordinal);
}

void* CudaDevice::stream_of(StreamHandle h) const {
  std::lock_guard lock(mu_);
  auto it = streams_.find(h.id);
  if (it == streams_.end()) throw std::invalid_argument("CudaDevice: unknown stream");
  return it->second;
}

void* CudaDevice::event_of(EventHandle h) const {
  std::lock_guard lock(mu_);
  auto it = events_.find(h.id);
  if (it == events_.end()) throw std::invalid_argument("CudaDevice: unknown event");
  return it->second;
}

DeviceAddress CudaDevice::allocate(size_t bytes) {
  if (bytes == 0) throw std::invalid_argument("CudaDevice::allocate: zero bytes");
  make_current();
  void* p = nullptr;
  check_allocation(cudaMalloc(&p, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes");
  // cudaMemset may return before it finished, on the legacy stream, which the device's
  // non-blocking streams do not wait for: wait here so the zeroes land before any copy.
  cudaError_t err = cudaMemset(p, 0, bytes);
  if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
  if (err != cudaSuccess) {
    (void)cudaFree(p);
    check_allocation(err, "cudaMemset");
  }
  const auto addr = reinterpret_cast<DeviceAddress>(p);
  std::lock_guard lock(mu_);
  ranges_->add(addr, bytes, AddressRanges::Kind::kDevice, "CudaDevice::allocate");
  return addr;
}

void CudaDevice::free(DeviceAddress addr) {
  {
    std::lock_guard lock(mu_);
    if (imported_.contains(addr)) {
      throw std::invalid_argument("CudaDevice::free: an imported address (close_imported it)");
    }
    ranges_->remove(addr, AddressRanges::Kind::kDevice, "CudaDevice::free");
  }
  make_current();
  check(cudaFree(reinterpret_cast<void*>(addr)), "cudaFree");
}

void CudaDevice::unregister_pieces(void* ptr, size_t bytes) const {
  auto* base = static_cast<std::byte*>(ptr);
  for (size_t offset = 0; offset < bytes; offset += options_.register_piece_bytes) {
    (void)cudaHostUnregister(base + offset);
  }
}

DeviceAddress CudaDevice::register_host(void* ptr, size_t bytes) {
  if (!ptr || bytes == 0) throw std::invalid_argument("CudaDevice::register_host: empty range");
  const auto addr = reinterpret_cast<DeviceAddress>(ptr);
  make_current();
  // The lock is held across registration so an overlapping registration cannot race in.
  std::lock_guard lock(mu_);
  if (addr + bytes < addr || ranges_->overlaps(addr, bytes)) {
    throw std::invalid_argument("CudaDevice::register_host: range overlaps a registered range");
  }
  auto* base = static_cast<std::byte*>(ptr);
  for (size_t offset = 0; offset < bytes; offset += options_.register_piece_bytes) {
    const size_t piece = std::min(options_.register_piece_bytes, bytes - offset);
    const cudaError_t err = cudaHostRegister(base + offset, piece, cudaHostRegisterPortable);
    if (err != cudaSuccess) {
      unregister_pieces(ptr, offset);  // roll back: all or nothing
      cuda::throw_fault(err, "cudaHostRegister of " + std::to_string(piece) + " bytes at offset " +
                                 std::to_string(offset) + " of a " + std::to_string(bytes) +
                                 "-byte range (nothing stays registered)");
    }
  }
  try {
    ranges_->add(addr, bytes, AddressRanges::Kind::kHost, "CudaDevice::register_host");
  } catch (...) {
    unregister_pieces(ptr, bytes);
    throw;
  }
  return addr;
}

void CudaDevice::unregister_host(void* ptr) {
  size_t bytes = 0;
  {
    std::lock_guard lock(mu_);
    bytes = ranges_->remove(reinterpret_cast<DeviceAddress>(ptr), AddressRanges::Kind::kHost,
                            "CudaDevice::unregister_host");
  }
  make_current();
  // Every piece, also past one that fails: the range is no longer known, so a piece left
  // registered here would stay pinned for good. The first error is raised after.
  auto* base = static_cast<std::byte*>(ptr);
  cudaError_t first = cudaSuccess;
  for (size_t offset = 0; offset < bytes; offset += options_.register_piece_bytes) {
    const cudaError_t err = cudaHostUnregister(base + offset);
    if (first == cudaSuccess) first = err;
  }
  check(first, "cudaHostUnregister");
}

StreamHandle CudaDevice::create_stream() {
  make_current();
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::lock_guard lock(mu_);
  const uint32_t id = next_stream_id_++;
  streams_[id] = s;
  return StreamHandle{id};
}

void CudaDevice::destroy_stream(StreamHandle stream) {
  void* s = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = streams_.find(stream.id);
    if (it == streams_.end()) throw std::invalid_argument("CudaDevice: unknown stream");
    s = it->second;
    streams_.erase(it);
  }
  // cudaStreamDestroy returns at once; queued work still finishes (device.h).
  check(cudaStreamDestroy(as_stream(s)), "cudaStreamDestroy");
}

EventHandle CudaDevice::create_event() {
  make_current();
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreate");
  std::lock_guard lock(mu_);
  const uint32_t id = next_event_id_++;
  events_[id] = e;
  return EventHandle{id};
}

void CudaDevice::destroy_event(EventHandle event) {
  void* e = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = events_.find(event.id);
    if (it == events_.end()) throw std::invalid_argument("CudaDevice: unknown event");
    e = it->second;
    events_.erase(it);
  }
  check(cudaEventDestroy(as_event(e)), "cudaEventDestroy");
}

void CudaDevice::record(EventHandle event, StreamHandle stream) {
  void* e = event_of(event);
  void* s = stream_of(stream);
  make_current();
  check(cudaEventRecord(as_event(e), as_stream(s)), "cudaEventRecord");
}

bool CudaDevice::query(EventHandle event) {
  const cudaError_t err = cudaEventQuery(as_event(event_of(event)));
  if (err == cudaErrorNotReady) {
    // Not an error, but the runtime keeps it as this thread's last error: cleared, so that an
    // embedder's next cudaGetLastError() does not take it for a failed launch of its own.
    (void)cudaGetLastError();
    return false;
  }
  check(err, "cudaEventQuery");
  return true;
}

void CudaDevice::synchronize(EventHandle event) {
  check(cudaEventSynchronize(as_event(event_of(event))), "cudaEventSynchronize");
}

double CudaDevice::elapsed_ms(EventHandle start, EventHandle end) {
  float ms = 0;
  const cudaError_t err =
      cudaEventElapsedTime(&ms, as_event(event_of(start)), as_event(event_of(end)));
  if (err == cudaErrorNotReady || err == cudaErrorInvalidResourceHandle) {
    throw std::logic_error("CudaDevice::elapsed_ms: events not recorded and completed");
  }
  check(err, "cudaEventElapsedTime");
  return ms;
}

void CudaDevice::wait_event(StreamHandle stream, EventHandle event) {
  void* e = event_of(event);
  void* s = stream_of(stream);
  make_current();
  check(cudaStreamWaitEvent(as_stream(s), as_event(e), 0), "cudaStreamWaitEvent");
}

void CudaDevice::copy_batch(StreamHandle stream, CopyKind kind,
                            std::span<const CopyDescriptor> descriptors) {
  if (descriptors.size() > options_.max_descriptors_per_call) {
    throw std::invalid_argument("CudaDevice::copy_batch: " + std::to_string(descriptors.size()) +
                                " descriptors exceed the per-call cap of " +
                                std::to_string(options_.max_descriptors_per_call));
  }
  {
    std::lock_guard lock(mu_);
    ranges_->check_copies(kind, descriptors, "CudaDevice::copy_batch");
  }
  void* s = stream_of(stream);
  if (descriptors.empty()) return;
  make_current();
  cuda::enqueue_copies(cuda::BatchCopyApi{batch_api_, batch_api_reports_index_}, as_stream(s),
                       options_.ordinal, kind, descriptors, options_.max_batch_copies);
}

void CudaDevice::launch_host_func(StreamHandle stream, std::function<void()> fn) {
  void* s = stream_of(stream);
  make_current();
  auto owned = std::make_unique<std::function<void()>>(std::move(fn));
  check(cudaLaunchHostFunc(as_stream(s), run_host_func, owned.get()), "cudaLaunchHostFunc");
  static_cast<void>(owned.release());  // run_host_func owns it now
}

}  // namespace kvtier
