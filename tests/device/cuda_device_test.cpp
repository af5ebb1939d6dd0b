// What only the CUDA device has (its Device contract runs in the DeviceContract suite, instances
// CudaBatch and CudaPerCopy). Without a GPU the GPU tests skip with the reason ("no CUDA
// device: ..."); the tests of how that case is reported run instead. IPC: cuda_ipc_test.cpp.
#include "kvtier/device/cuda_device.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "kvtier/device/device_fault.h"
#include "support/device_io.h"

namespace kvtier::testing {
namespace {

TEST(CudaDevice, WithoutAGpuOpenIsAnErrorThatSaysSo) {
  auto device = CudaDevice::open();
  if (device) GTEST_SKIP() << "a GPU is present: " << (*device)->gpu_name();
  EXPECT_EQ(device.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(device.error().message.rfind("no CUDA device: ", 0), 0u) << device.error().message;
}

TEST(CudaDevice, BadOptionsAreInvalidArgument) {
  auto device = CudaDevice::open({.max_batch_copies = 0});
  ASSERT_FALSE(device.has_value());
  EXPECT_EQ(device.error().code, ErrorCode::kInvalidArgument);
  auto torn_pages = CudaDevice::open({.register_piece_bytes = 6000});
  ASSERT_FALSE(torn_pages.has_value());
  EXPECT_EQ(torn_pages.error().code, ErrorCode::kInvalidArgument);
}

TEST(CudaDevice, FailedRegistrationPieceRollsBackTheWholeRange) {
  auto opened = CudaDevice::open({.register_piece_bytes = 4096});
  if (!opened) GTEST_SKIP() << opened.error().message;
  CudaDevice& device = **opened;
  std::byte* memory = static_cast<std::byte*>(std::aligned_alloc(4096, 4 * 4096));
  // The third page is pinned behind the device's back: its piece must fail.
  ASSERT_EQ(cudaHostRegister(memory + 2 * 4096, 4096, cudaHostRegisterDefault), cudaSuccess);
  try {
    device.register_host(memory, 4 * 4096);
    ADD_FAILURE() << "expected a DeviceFault";
  } catch (const DeviceFault& fault) {
    const std::string what = fault.what();
    EXPECT_NE(what.find("4096 bytes at offset 8192"), std::string::npos) << what;
  }
  // Rolled back: the first two pages are not pinned any more, and nothing is registered.
  unsigned int flags = 0;
  EXPECT_NE(cudaHostGetFlags(&flags, memory), cudaSuccess);
  (void)cudaGetLastError();
  EXPECT_THROW(device.unregister_host(memory), std::invalid_argument);
  ASSERT_EQ(cudaHostUnregister(memory + 2 * 4096), cudaSuccess);
  device.register_host(memory, 4 * 4096);  // whole again: registers
  device.unregister_host(memory);
  std::free(memory);
}

}  // namespace
}  // namespace kvtier::testing
