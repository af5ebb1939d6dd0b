#include "redis_key_slot.h"

namespace kvtier {

uint16_t crc16_xmodem(std::string_view bytes) {
  uint16_t crc = 0;
  for (const char c : bytes) {
    crc ^= static_cast<uint16_t>(static_cast<uint8_t>(c)) << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

uint16_t redis_key_slot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16_xmodem(key) % kRedisClusterSlots;
}

}  // namespace kvtier
