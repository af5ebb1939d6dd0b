// AddressRanges: the device memory and registered host memory a Device knows, so that a copy
// reaching outside them is std::invalid_argument before anything is enqueued (F2: a bad
// descriptor is never a device fault). Not thread-safe: the owning device locks around it.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string_view>

#include "kvtier/device/device.h"

namespace kvtier {

class AddressRanges {
 public:
  enum class Kind { kDevice, kHost };

  // Throws std::invalid_argument (prefixed with `who`) for an empty range or one that
  // overlaps a known range.
  void add(DeviceAddress base, size_t bytes, Kind kind, std::string_view who);
  // Forgets the range that starts at `base` and returns its size; std::invalid_argument when
  // no range of that kind starts there.
  size_t remove(DeviceAddress base, Kind kind, std::string_view who);
  // [base, base + bytes) shares a byte with a known range of any kind.
  bool overlaps(DeviceAddress base, size_t bytes) const;
  // [addr, addr + bytes) lies inside one known range of `kind`.
  bool contains(DeviceAddress addr, uint64_t bytes, Kind kind) const;
  // Every descriptor is non-empty and reads and writes the memory its copy kind requires;
  // std::invalid_argument naming the first bad descriptor otherwise.
  void check_copies(CopyKind kind, std::span<const CopyDescriptor> descriptors,
                    std::string_view who) const;

  // (base, bytes) of every range of `kind`.
  template <class Fn>
  void for_each(Kind kind, Fn&& fn) const {
    for (const auto& [base, range] : ranges_) {
      if (range.kind == kind) fn(base, range.bytes);
    }
  }

 private:
  struct Range {
    size_t bytes;
    Kind kind;
  };
  std::map<DeviceAddress, Range> ranges_;
};

}  // namespace kvtier
