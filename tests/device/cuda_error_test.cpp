// What each CUDA error means to kvtier; pure functions, so these run without a GPU.
#include "cuda/cuda_error.h"

#include <gtest/gtest.h>

#include <new>

#include "kvtier/device/device_fault.h"

namespace kvtier::cuda {
namespace {

TEST(CudaError, ContextPoisoningErrorsAreSticky) {
  for (cudaError_t e :
       {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorHardwareStackError,
        cudaErrorIllegalInstruction, cudaErrorMisalignedAddress, cudaErrorInvalidAddressSpace,
        cudaErrorInvalidPc, cudaErrorECCUncorrectable, cudaErrorLaunchTimeout, cudaErrorAssert,
        cudaErrorContained, cudaErrorNvlinkUncorrectable, cudaErrorMpsClientTerminated}) {
    EXPECT_EQ(classify(e), ErrorClass::kSticky) << cudaGetErrorName(e);
  }
}

TEST(CudaError, OtherErrorsAreOrdinaryFaultsOrNotErrors) {
  EXPECT_EQ(classify(cudaSuccess), ErrorClass::kSuccess);
  EXPECT_EQ(classify(cudaErrorNotReady), ErrorClass::kNotReady);
  EXPECT_EQ(classify(cudaErrorMemoryAllocation), ErrorClass::kOutOfMemory);
  EXPECT_EQ(classify(cudaErrorInvalidValue), ErrorClass::kFault);
  EXPECT_EQ(classify(cudaErrorHostMemoryAlreadyRegistered), ErrorClass::kFault);
  EXPECT_EQ(classify(cudaErrorInsufficientDriver), ErrorClass::kNoDriver);
  EXPECT_EQ(classify(cudaErrorNoDevice), ErrorClass::kNoDriver);
}

// F1: creating a stream or an event can run out of device memory; a transfer turns a DeviceFault
// there into its outcome, so check() raises one. Only an allocation raises std::bad_alloc.
TEST(CudaError, F1_OutOfMemoryIsAFaultOutsideAnAllocation) {
  try {
    check(cudaErrorMemoryAllocation, "cudaEventCreate");
    ADD_FAILURE() << "no throw";
  } catch (const DeviceFault& f) {
    EXPECT_FALSE(f.sticky());
    EXPECT_NE(std::string(f.what()).find("cudaEventCreate"), std::string::npos);
  }
  EXPECT_THROW(check_allocation(cudaErrorMemoryAllocation, "cudaMalloc"), std::bad_alloc);
  EXPECT_THROW(check_allocation(cudaErrorIllegalAddress, "cudaMalloc"), DeviceFault);
  EXPECT_NO_THROW(check_allocation(cudaSuccess, "cudaMalloc"));
}

TEST(CudaError, FaultsCarryTheOperationTheErrorAndTheIndex) {
  try {
    throw_fault(cudaErrorIllegalAddress, "cudaMemcpyAsync", 3);
  } catch (const DeviceFault& f) {
    EXPECT_TRUE(f.sticky());
    EXPECT_EQ(f.descriptor_index(), 3u);
    EXPECT_NE(std::string(f.what()).find("cudaMemcpyAsync"), std::string::npos);
    EXPECT_NE(std::string(f.what()).find("cudaErrorIllegalAddress"), std::string::npos);
  }
  try {
    throw_fault(cudaErrorInvalidValue, "cudaEventRecord");
  } catch (const DeviceFault& f) {
    EXPECT_FALSE(f.sticky());
    EXPECT_FALSE(f.descriptor_index().has_value());
  }
  EXPECT_THROW(check(cudaErrorLaunchFailure, "cudaEventQuery"), DeviceFault);
  EXPECT_NO_THROW(check(cudaSuccess, "cudaFree"));
}

TEST(CudaError, F5_BatchFaultIndexNeverUndercountsWhatMayBeEnqueued) {
  // With the driver's failure index, the copies before it count as enqueued.
  EXPECT_EQ(batch_fault_index(100, 50, 7), 107u);
  // Without one (CUDA 13 ABI) or with one out of range, the whole batch may have been.
  EXPECT_EQ(batch_fault_index(100, 50, std::nullopt), 150u);
  EXPECT_EQ(batch_fault_index(100, 50, 50), 150u);
  EXPECT_EQ(batch_fault_index(0, 8, SIZE_MAX), 8u);
}

}  // namespace
}  // namespace kvtier::cuda
