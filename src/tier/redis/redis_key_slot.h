// Redis Cluster key slots: CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the key modulo
// 16384, hashing only the "hash tag" when the key has one: the text between the first '{' and
// the first '}' after it, if that text is not empty (the cluster specification's rule).
#pragma once

#include <cstdint>
#include <string_view>

namespace kvtier {

inline constexpr uint16_t kRedisClusterSlots = 16384;

uint16_t crc16_xmodem(std::string_view bytes);
uint16_t redis_key_slot(std::string_view key);

}  // namespace kvtier
