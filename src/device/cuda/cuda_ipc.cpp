// CudaDevice's memory sharing between processes: CUDA IPC handles of cudaMalloc allocations.
// A description is "kvtcuda1" + the allocation's size (8 bytes, little-endian host order) +
// the 64-byte cudaIpcMemHandle_t. Both processes must run on the same machine.
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <stdexcept>

#include "address_ranges.h"
#include "cuda/cuda_error.h"
#include "kvtier/device/cuda_device.h"

namespace kvtier {
namespace {

constexpr std::array<char, 8> kMagic = {'k', 'v', 't', 'c', 'u', 'd', 'a', '1'};
constexpr size_t kDescriptionBytes = kMagic.size() + sizeof(uint64_t) + sizeof(cudaIpcMemHandle_t);

}  // namespace

Result<std::vector<std::byte>> CudaDevice::export_memory(DeviceAddress addr) {
  uint64_t bytes = 0;
  {
    std::lock_guard lock(mu_);
    if (imported_.contains(addr) || !ranges_->contains(addr, 1, AddressRanges::Kind::kDevice)) {
      return make_error(ErrorCode::kInvalidArgument,
                        "cuda export_memory: not an allocation of this device");
    }
    // The size of the allocation that starts at addr (export needs the allocation's base).
    ranges_->for_each(AddressRanges::Kind::kDevice, [&](DeviceAddress base, size_t size) {
      if (base == addr) bytes = size;
    });
  }
  if (bytes == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda export_memory: address is inside an allocation, not its start");
  }
  make_current();
  cudaIpcMemHandle_t handle{};
  if (const cudaError_t err = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(addr));
      err != cudaSuccess) {
    return make_error(ErrorCode::kDeviceFault, "cudaIpcGetMemHandle: " + cuda::describe(err));
  }
  std::vector<std::byte> out(kDescriptionBytes);
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  std::memcpy(out.data() + kMagic.size(), &bytes, sizeof bytes);
  std::memcpy(out.data() + kMagic.size() + sizeof bytes, &handle, sizeof handle);
  return out;
}

Result<DeviceAddress> CudaDevice::import_memory(std::span<const std::byte> description) {
  if (description.size() != kDescriptionBytes ||
      std::memcmp(description.data(), kMagic.data(), kMagic.size()) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda import_memory: not a CUDA memory description (" +
                          std::to_string(description.size()) + " bytes)");
  }
  uint64_t bytes = 0;
  cudaIpcMemHandle_t handle{};
  std::memcpy(&bytes, description.data() + kMagic.size(), sizeof bytes);
  std::memcpy(&handle, description.data() + kMagic.size() + sizeof bytes, sizeof handle);
  if (bytes == 0) return make_error(ErrorCode::kInvalidArgument, "cuda import_memory: zero size");
  make_current();
  void* p = nullptr;
  if (const cudaError_t err = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
      err != cudaSuccess) {
    return make_error(ErrorCode::kDeviceFault, "cudaIpcOpenMemHandle of " + std::to_string(bytes) +
                                                   " bytes: " + cuda::describe(err));
  }
  const auto addr = reinterpret_cast<DeviceAddress>(p);
  std::lock_guard lock(mu_);
  ranges_->add(addr, bytes, AddressRanges::Kind::kDevice, "CudaDevice::import_memory");
  imported_.insert(addr);
  return addr;
}

void CudaDevice::close_imported(DeviceAddress addr) {
  {
    std::lock_guard lock(mu_);
    if (!imported_.contains(addr)) {
      throw std::invalid_argument("CudaDevice::close_imported: not an imported address");
    }
    ranges_->remove(addr, AddressRanges::Kind::kDevice, "CudaDevice::close_imported");
    imported_.erase(addr);
  }
  make_current();
  cuda::check(cudaIpcCloseMemHandle(reinterpret_cast<void*>(addr)), "cudaIpcCloseMemHandle");
}

}  // namespace kvtier
