// What a CUDA runtime error means to kvtier. Pure functions of the error code (they need the
// CUDA headers, not a GPU), so the classification is unit-tested on machines without one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::cuda {

enum class ErrorClass {
  kSuccess,
  kNotReady,     // work still running (cudaEventQuery); not an error
  kOutOfMemory,  // memory cannot be had: std::bad_alloc from allocate(), elsewhere a DeviceFault
  kNoDriver,     // no usable driver or GPU: CudaDevice::open reports it, nothing else sees it
  kSticky,       // the context is poisoned; nothing on the device can be shown to have stopped
  kFault,        // any other device error: a DeviceFault that leaves the context usable
};

ErrorClass classify(cudaError_t error);

// "cudaErrorIllegalAddress (an illegal memory access was encountered)".
std::string describe(cudaError_t error);

// Throws DeviceFault("cuda <operation>: <describe(error)>") marked sticky when the error
// poisons the context, carrying `descriptor_index` (the first descriptor not enqueued).
[[noreturn]] void throw_fault(cudaError_t error, std::string_view operation,
                              std::optional<size_t> descriptor_index = {});

// Checks the result of a call that is not a copy: success returns, anything else throws
// (throw_fault). Out of memory too is a (non-sticky) DeviceFault here: creating a stream or an
// event can run out of memory, and a transfer turns a DeviceFault there into its outcome (F1).
void check(cudaError_t error, std::string_view operation);
// The same for the allocation Device::allocate() makes: out of memory is std::bad_alloc, as
// Device promises.
void check_allocation(cudaError_t error, std::string_view operation);

// The descriptor index a failed batch call reports: descriptors before `batch_start` were
// enqueued by earlier calls. With the driver's failure index (CUDA 12.8 entry point) the copies
// before it are taken as enqueued; without one (CUDA 13 entry point, or the index is out of
// range) the whole batch is, because a partial enqueue that cannot be ruled out must count as
// enqueued (the transfer engine then waits for it before releasing anything, F5).
size_t batch_fault_index(size_t batch_start, size_t batch_count, std::optional<size_t> fail_index);

}  // namespace kvtier::cuda
