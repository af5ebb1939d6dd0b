#include "cuda/cuda_copy.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <vector>

#include "cuda/cuda_error.h"

namespace kvtier::cuda {
namespace {

// cuMemcpyBatchAsync's two ABIs. The driver returns CUresult, whose values equal the runtime's
// cudaError_t for every error this code classifies.
using BatchWithIndex = PFN_cuMemcpyBatchAsync_v12080;
using BatchWithoutIndex = PFN_cuMemcpyBatchAsync_v13000;

void* entry_point(unsigned int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemcpyBatchAsync", &fn, version,
                                                           cudaEnableDefault, &found);
  return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? fn : nullptr;
}

void enqueue_one_by_one(cudaStream_t stream, CopyKind kind,
                        std::span<const CopyDescriptor> descriptors, size_t first_index) {
  const cudaMemcpyKind direction =
      kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const CopyDescriptor& d = descriptors[i];
    const cudaError_t err =
        cudaMemcpyAsync(reinterpret_cast<void*>(d.dst), reinterpret_cast<const void*>(d.src),
                        d.bytes, direction, stream);
    if (err != cudaSuccess) throw_fault(err, "cudaMemcpyAsync", first_index + i);
  }
}

CUmemLocation location(bool on_device, int ordinal) {
  CUmemLocation loc{};
  loc.type = on_device ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
  loc.id = on_device ? ordinal : 0;
  return loc;
}

}  // namespace

BatchCopyApi resolve_batch_copy() {
  if (void* fn = entry_point(12080)) return BatchCopyApi{fn, true};
  if (void* fn = entry_point(13000)) return BatchCopyApi{fn, false};
  return {};
}

void enqueue_copies(const BatchCopyApi& api, cudaStream_t stream, int ordinal, CopyKind kind,
                    std::span<const CopyDescriptor> descriptors, size_t max_batch_copies) {
  if (!api.function || descriptors.size() == 1) {
    enqueue_one_by_one(stream, kind, descriptors, 0);
    return;
  }
  // Copies in one batch call may run in any order among themselves; they still run after the
  // stream's earlier work and before its later work, which is all device.h promises.
  CUmemcpyAttributes attrs{};
  attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  attrs.srcLocHint = location(kind == CopyKind::kDeviceToHost, ordinal);
  attrs.dstLocHint = location(kind == CopyKind::kHostToDevice, ordinal);
  attrs.flags = CU_MEMCPY_FLAG_DEFAULT;
  size_t attr_index = 0;
  // The driver reads these arrays during the call only.
  std::vector<CUdeviceptr> dsts, srcs;
  std::vector<size_t> sizes;
  for (size_t start = 0; start < descriptors.size(); start += max_batch_copies) {
    const size_t count = std::min(max_batch_copies, descriptors.size() - start);
    dsts.clear();
    srcs.clear();
    sizes.clear();
    for (const CopyDescriptor& d : descriptors.subspan(start, count)) {
      dsts.push_back(d.dst);
      srcs.push_back(d.src);
      sizes.push_back(d.bytes);
    }
    CUresult result;
    std::optional<size_t> fail_index;
    if (api.reports_fail_index) {
      size_t fail = SIZE_MAX;
      result = reinterpret_cast<BatchWithIndex>(api.function)(
          dsts.data(), srcs.data(), sizes.data(), count, &attrs, &attr_index, 1, &fail, stream);
      if (fail != SIZE_MAX) fail_index = fail;
    } else {
      result = reinterpret_cast<BatchWithoutIndex>(api.function)(
          dsts.data(), srcs.data(), sizes.data(), count, &attrs, &attr_index, 1, stream);
    }
    if (result != CUDA_SUCCESS) {
      throw_fault(static_cast<cudaError_t>(result), "cuMemcpyBatchAsync",
                  batch_fault_index(start, count, fail_index));
    }
  }
}

}  // namespace kvtier::cuda
