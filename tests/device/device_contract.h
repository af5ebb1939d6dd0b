// The Device contract, written once and instantiated for every device (HostDevice in
// device_contract_test.cpp, CudaDevice in cuda_device_test.cpp). A device that cannot be
// opened on this machine (no GPU) is skipped with the reason.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "kvtier/core/status.h"
#include "kvtier/device/device.h"

namespace kvtier::testing {

struct DeviceFactory {
  std::string label;  // the instantiation's name, e.g. "Host"
  // A device whose copy_batch accepts at most `max_descriptors_per_call` descriptors per call,
  // or the error that says why there is none here.
  std::function<Result<std::unique_ptr<Device>>(size_t max_descriptors_per_call)> open;
};

class DeviceContract : public ::testing::TestWithParam<DeviceFactory> {
 protected:
  static constexpr size_t kMaxDescriptors = 64;

  void SetUp() override {
    auto opened = GetParam().open(kMaxDescriptors);
    if (!opened) GTEST_SKIP() << opened.error().message;
    device_ = std::move(*opened);
  }

  Device& device() { return *device_; }

 private:
  std::unique_ptr<Device> device_;
};

// gtest prints the parameter by its label.
inline void PrintTo(const DeviceFactory& factory, std::ostream* os) {
  *os << factory.label;
}

inline std::string device_label(const ::testing::TestParamInfo<DeviceFactory>& info) {
  return info.param.label;
}

}  // namespace kvtier::testing
