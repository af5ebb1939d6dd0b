// DeviceFault: the one soft error kind. Only a DeviceFault thrown by a Device is turned into a
// Failed/Unprovable transfer outcome; every other exception (std::invalid_argument for a bad
// descriptor, std::logic_error for a missing op, ...) propagates unchanged (F2).
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

namespace kvtier {

class DeviceFault : public std::runtime_error {
 public:
  // `descriptor_index`: for a batch copy, the index of the first descriptor that was not
  // enqueued (all before it were). `sticky`: the fault poisons the device context (CUDA
  // illegal-address and the like), so nothing on the device can be proven to have stopped.
  explicit DeviceFault(const std::string& what, std::optional<size_t> descriptor_index = {},
                       bool sticky = false)
      : std::runtime_error(what), descriptor_index_(descriptor_index), sticky_(sticky) {}

  std::optional<size_t> descriptor_index() const { return descriptor_index_; }
  bool sticky() const { return sticky_; }

 private:
  std::optional<size_t> descriptor_index_;
  bool sticky_;
};

}  // namespace kvtier
