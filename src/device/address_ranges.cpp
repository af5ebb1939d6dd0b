#include "address_ranges.h"

#include <iterator>
#include <stdexcept>
#include <string>

namespace kvtier {

void AddressRanges::add(DeviceAddress base, size_t bytes, Kind kind, std::string_view who) {
  if (base == 0 || bytes == 0 || base + bytes < base) {
    throw std::invalid_argument(std::string(who) + ": empty or wrapping range");
  }
  if (overlaps(base, bytes)) {
    throw std::invalid_argument(std::string(who) + ": range overlaps a registered range");
  }
  ranges_.emplace(base, Range{bytes, kind});
}

bool AddressRanges::overlaps(DeviceAddress base, size_t bytes) const {
  auto next = ranges_.lower_bound(base);
  const bool overlaps_next = next != ranges_.end() && next->first < base + bytes;
  const bool overlaps_prev =
      next != ranges_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > base;
  return overlaps_next || overlaps_prev;
}

size_t AddressRanges::remove(DeviceAddress base, Kind kind, std::string_view who) {
  auto it = ranges_.find(base);
  if (it == ranges_.end() || it->second.kind != kind) {
    throw std::invalid_argument(
        std::string(who) + ": not a " +
        (kind == Kind::kDevice ? "device allocation" : "registered host range"));
  }
  const size_t bytes = it->second.bytes;
  ranges_.erase(it);
  return bytes;
}

bool AddressRanges::contains(DeviceAddress addr, uint64_t bytes, Kind kind) const {
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return false;
  --it;
  return it->second.kind == kind && addr + bytes >= addr &&
         addr + bytes <= it->first + it->second.bytes;
}

void AddressRanges::check_copies(CopyKind kind, std::span<const CopyDescriptor> descriptors,
                                 std::string_view who) const {
  const Kind src = kind == CopyKind::kDeviceToHost ? Kind::kDevice : Kind::kHost;
  const Kind dst = kind == CopyKind::kDeviceToHost ? Kind::kHost : Kind::kDevice;
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const CopyDescriptor& d = descriptors[i];
    if (d.bytes == 0 || !contains(d.src, d.bytes, src) || !contains(d.dst, d.bytes, dst)) {
      throw std::invalid_argument(std::string(who) + ": descriptor " + std::to_string(i) +
                                  " is outside the memory its copy kind requires");
    }
  }
}

}  // namespace kvtier
