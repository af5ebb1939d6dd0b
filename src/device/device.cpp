#include "kvtier/device/device.h"

#include <stdexcept>

namespace kvtier {

Result<std::vector<std::byte>> Device::export_memory(DeviceAddress) {
  return make_error(ErrorCode::kFailedPrecondition,
                    "device '" + name() + "' cannot share device memory with another process");
}

Result<DeviceAddress> Device::import_memory(std::span<const std::byte>) {
  return make_error(ErrorCode::kFailedPrecondition,
                    "device '" + name() + "' cannot map another process's device memory");
}

void Device::close_imported(DeviceAddress) {
  throw std::invalid_argument("device '" + name() + "': not an imported address");
}

}  // namespace kvtier
