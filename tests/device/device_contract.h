// The Device contract, written once (device_contract_test.cpp, device_fault_contract_test.cpp)
// and instantiated for every device in all_device_factories(). A device that cannot be opened
// on this machine (no GPU) is skipped with the reason.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "kvtier/device/device.h"
#include "support/device_factories.h"

namespace kvtier::testing {

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

}  // namespace kvtier::testing
