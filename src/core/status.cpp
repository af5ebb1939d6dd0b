#include "kvtier/core/status.h"

namespace kvtier {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
    case ErrorCode::kFailedPrecondition:
      return "failed_precondition";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kDeviceFault:
      return "device_fault";
    case ErrorCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kUnimplemented:
      return "unimplemented";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Error::to_string() const {
  return std::string(kvtier::to_string(code)) + ": " + message;
}

}  // namespace kvtier
