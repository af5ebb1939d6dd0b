#include "cuda/cuda_error.h"

#include <new>

#include "kvtier/device/device_fault.h"

namespace kvtier::cuda {

ErrorClass classify(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return ErrorClass::kSuccess;
    case cudaErrorNotReady:
      return ErrorClass::kNotReady;
    case cudaErrorMemoryAllocation:
      return ErrorClass::kOutOfMemory;
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return ErrorClass::kNoDriver;
    // The runtime documents each of these as "leaves the process in an inconsistent state and
    // any further CUDA work will return the same error".
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorExternalDevice:
    // "The MPS client has been terminated by the server. To continue using CUDA, the process
    // must be terminated and relaunched."
    case cudaErrorMpsClientTerminated:
#if CUDART_VERSION >= 13000
    case cudaErrorTensorMemoryLeak:
#endif
      return ErrorClass::kSticky;
    default:
      return ErrorClass::kFault;
  }
}

std::string describe(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + " (" + cudaGetErrorString(error) + ")";
}

void throw_fault(cudaError_t error, std::string_view operation,
                 std::optional<size_t> descriptor_index) {
  throw DeviceFault("cuda " + std::string(operation) + ": " + describe(error), descriptor_index,
                    classify(error) == ErrorClass::kSticky);
}

void check(cudaError_t error, std::string_view operation) {
  if (classify(error) != ErrorClass::kSuccess) throw_fault(error, operation);
}

void check_allocation(cudaError_t error, std::string_view operation) {
  if (classify(error) == ErrorClass::kOutOfMemory) throw std::bad_alloc();
  check(error, operation);
}

size_t batch_fault_index(size_t batch_start, size_t batch_count, std::optional<size_t> fail_index) {
  if (fail_index && *fail_index < batch_count) return batch_start + *fail_index;
  return batch_start + batch_count;
}

}  // namespace kvtier::cuda
