#include "kvtier/tier/chunk_record.h"

#include <cstring>

#include "checksum/xxh3_kernels.h"

namespace kvtier {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'C', '1'};

void store_u64(std::byte* at, uint64_t v) {
  std::memcpy(at, &v, sizeof v);
}
uint64_t load_u64(const std::byte* at) {
  uint64_t v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

}  // namespace

uint64_t chunk_checksum(const ChunkKey& key, std::span<const std::byte> payload) {
  const uint64_t binding[3] = {key.lo, key.hi, payload.size()};
  // Seed 0 is xxh3's unseeded variant (XXH3_64bits), as the spec defines.
  const uint64_t seed = tier_internal::xxh3_64_seeded(binding, sizeof binding, 0);
  return tier_internal::xxh3_64_seeded(payload.data(), payload.size(), seed);
}

std::string_view chunk_checksum_kernel() {
  return tier_internal::xxh3_kernel_name();
}

void encode_chunk_header(const ChunkKey& key, std::span<const std::byte> payload,
                         std::span<std::byte, kChunkRecordHeaderBytes> out) {
  std::memcpy(out.data(), kMagic, 4);
  const uint32_t header_bytes = kChunkRecordHeaderBytes;
  std::memcpy(out.data() + 4, &header_bytes, 4);
  store_u64(out.data() + 8, key.lo);
  store_u64(out.data() + 16, key.hi);
  store_u64(out.data() + 24, payload.size());
  store_u64(out.data() + 32, chunk_checksum(key, payload));
}

std::vector<std::byte> encode_chunk_record(const ChunkKey& key,
                                           std::span<const std::byte> payload) {
  std::vector<std::byte> record(kChunkRecordHeaderBytes + payload.size());
  encode_chunk_header(
      key, payload,
      std::span<std::byte, kChunkRecordHeaderBytes>(record.data(), kChunkRecordHeaderBytes));
  if (!payload.empty()) {
    std::memcpy(record.data() + kChunkRecordHeaderBytes, payload.data(), payload.size());
  }
  return record;
}

RecordCheck verify_chunk_record(std::span<const std::byte> header, const ChunkKey& expected_key,
                                std::span<const std::byte> payload) {
  if (header.size() != kChunkRecordHeaderBytes) return RecordCheck::kCorrupt;
  uint32_t header_bytes;
  std::memcpy(&header_bytes, header.data() + 4, 4);
  if (std::memcmp(header.data(), kMagic, 4) != 0 || header_bytes != kChunkRecordHeaderBytes) {
    return RecordCheck::kCorrupt;
  }
  const ChunkKey key{load_u64(header.data() + 8), load_u64(header.data() + 16)};
  if (key != expected_key || load_u64(header.data() + 24) != payload.size()) {
    return RecordCheck::kCorrupt;
  }
  return load_u64(header.data() + 32) == chunk_checksum(key, payload) ? RecordCheck::kOk
                                                                      : RecordCheck::kCorrupt;
}

}  // namespace kvtier
