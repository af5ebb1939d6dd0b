// Deterministic byte patterns: the content a test writes and later expects back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvtier::testing {

inline std::byte pattern_byte(uint64_t seed, uint64_t offset) {
  uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ULL + offset * 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 29;
  return static_cast<std::byte>(x & 0xff);
}

inline void fill_pattern(void* dst, size_t bytes, uint64_t seed) {
  auto* p = static_cast<std::byte*>(dst);
  for (size_t i = 0; i < bytes; ++i) p[i] = pattern_byte(seed, i);
}

inline bool has_pattern(const void* src, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const std::byte*>(src);
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != pattern_byte(seed, i)) return false;
  }
  return true;
}

inline bool is_zero(const void* src, size_t bytes) {
  const auto* p = static_cast<const std::byte*>(src);
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != std::byte{0}) return false;
  }
  return true;
}

}  // namespace kvtier::testing
