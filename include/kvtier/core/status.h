// Expected failures as values. Programming errors (bad arguments, broken invariants) are
// exceptions from <stdexcept> or aborts; device faults are their own exception type
// (kvtier/device/device_fault.h) so that "only device faults are soft" (F2) is mechanical.
#pragma once

#include <expected>
#include <string>
#include <string_view>

namespace kvtier {

enum class ErrorCode {
  kInvalidArgument,     // bad input: config, CLI, request
  kNotFound,            // a key, slot or job that is not there
  kResourceExhausted,   // no room (pool full, limit reached)
  kFailedPrecondition,  // the call is not allowed in the current state
  kPermissionDenied,    // the caller may not do this (e.g. name another user's memory)
  kDeviceFault,         // a device reported a fault (soft: degrades the cache)
  kDeadlineExceeded,    // a deadline passed
  kUnavailable,         // a tier or server cannot be reached
  kUnimplemented,       // this implementation of an interface does not offer the operation
  kInternal,            // should not happen; carries context for a bug report
};

std::string_view to_string(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;

  std::string to_string() const;
};

template <class T>
using Result = std::expected<T, Error>;
using Status = std::expected<void, Error>;

inline std::unexpected<Error> make_error(ErrorCode code, std::string message) {
  return std::unexpected(Error{code, std::move(message)});
}

}  // namespace kvtier
