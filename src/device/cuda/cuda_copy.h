// Enqueuing a CopyDescriptor list on a CUDA stream: cuMemcpyBatchAsync when the driver has
// it, else one cudaMemcpyAsync per descriptor. Internal to CudaDevice.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

#include "kvtier/device/device.h"

namespace kvtier::cuda {

// cuMemcpyBatchAsync resolved from the driver, or nothing.
struct BatchCopyApi {
  void* function = nullptr;
  bool reports_fail_index = false;  // CUDA 12.8 ABI (with failIdx); CUDA 13 dropped it
};

// Asks the driver for cuMemcpyBatchAsync, preferring the 12.8 ABI, then 13.0. Call after the
// device context exists. Returns an empty api when the driver predates 12.8.
BatchCopyApi resolve_batch_copy();

// Enqueues `descriptors` in order on `stream`. `max_batch_copies` bounds one driver call. A
// failure throws DeviceFault whose index is the first descriptor not (provably not) enqueued.
void enqueue_copies(const BatchCopyApi& api, cudaStream_t stream, int ordinal, CopyKind kind,
                    std::span<const CopyDescriptor> descriptors, size_t max_batch_copies);

}  // namespace kvtier::cuda
