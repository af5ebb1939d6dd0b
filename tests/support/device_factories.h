// Every device the tests can run on: the host device, and where the CUDA device is built
// (KVTIER_HAS_CUDA), the CUDA device through cuMemcpyBatchAsync split into 7-copy driver calls
// with host memory pinned in one-page pieces ("CudaBatch") and through the per-copy
// cudaMemcpyAsync loop ("CudaPerCopy"). Suites written once are instantiated with
// ::testing::ValuesIn(all_device_factories()); a device that cannot be opened here (no GPU)
// gives the reason, and the test skips with it.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kvtier/core/status.h"
#include "kvtier/device/device.h"
#include "kvtier/device/host_device.h"
#if KVTIER_HAS_CUDA
#include "kvtier/device/cuda_device.h"
#endif

namespace kvtier::testing {

struct DeviceFactory {
  std::string label;  // the instance's name, e.g. "Host"
  // A device whose copy_batch accepts at most `max_descriptors_per_call` descriptors per call,
  // or the error that says why there is none here.
  std::function<Result<std::unique_ptr<Device>>(size_t max_descriptors_per_call)> open;
};

// gtest prints the parameter by its label.
inline void PrintTo(const DeviceFactory& factory, std::ostream* os) {
  *os << factory.label;
}

template <class ParamInfo>
std::string device_label(const ParamInfo& info) {
  return info.param.label;
}

inline std::vector<DeviceFactory> all_device_factories() {
  std::vector<DeviceFactory> all{{"Host", [](size_t cap) -> Result<std::unique_ptr<Device>> {
                                    return std::make_unique<HostDevice>(cap);
                                  }}};
#if KVTIER_HAS_CUDA
  auto cuda = [](CudaDeviceOptions options) -> Result<std::unique_ptr<Device>> {
    auto device = CudaDevice::open(options);
    if (!device) return std::unexpected(device.error());
    return std::unique_ptr<Device>(std::move(*device));
  };
  all.push_back({"CudaBatch", [cuda](size_t cap) {
                   return cuda({.max_descriptors_per_call = cap,
                                .max_batch_copies = 7,
                                .register_piece_bytes = 4096});
                 }});
  all.push_back({"CudaPerCopy", [cuda](size_t cap) {
                   return cuda({.max_descriptors_per_call = cap, .use_batch_api = false});
                 }});
#endif
  return all;
}

}  // namespace kvtier::testing
