// ChunkRecord: how a chunk is laid out wherever a tier stores it (a disk file, a Redis value):
// a fixed header followed by the payload.
//
//   offset size field
//        0    4 magic "KVC1"
//        4    4 header bytes (kChunkRecordHeaderBytes), for later versions
//        8    8 key.lo
//       16    8 key.hi
//       24    8 payload bytes
//       32    8 checksum: xxh3-64 of the payload, seeded with a hash of key and payload size
//
// Integers are little-endian (the machines kvtier runs on). The checksum binds the payload to
// its key and size, so a record moved to another key, truncated, or with a flipped bit fails
// verify_chunk_record(): the reader reports kCorrupt, a miss that is never served.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvtier/core/chunk_key.h"

namespace kvtier {

inline constexpr size_t kChunkRecordHeaderBytes = 40;

struct ChunkRecordHeader {
  ChunkKey key;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;
};

// xxh3-64 of the payload, seeded with xxh3-64 of (key.lo, key.hi, payload size). Computed by the
// widest xxh3 build the CPU runs (AVX-512, AVX2 or baseline; the same value from each), so that
// verifying a chunk runs well above a disk's bandwidth.
uint64_t chunk_checksum(const ChunkKey& key, std::span<const std::byte> payload);

// Which xxh3 build chunk_checksum uses on this CPU: "avx512", "avx2" or "baseline".
std::string_view chunk_checksum_kernel();

// Writes the header of a record for (key, payload) into `out` (kChunkRecordHeaderBytes).
void encode_chunk_header(const ChunkKey& key, std::span<const std::byte> payload,
                         std::span<std::byte, kChunkRecordHeaderBytes> out);

// Header + payload in one buffer.
std::vector<std::byte> encode_chunk_record(const ChunkKey& key, std::span<const std::byte> payload);

enum class RecordCheck { kOk, kCorrupt };

// Checks a header and the payload that followed it: magic, header size, the expected key, the
// payload size, and the checksum. Anything else is kCorrupt.
RecordCheck verify_chunk_record(std::span<const std::byte> header, const ChunkKey& expected_key,
                                std::span<const std::byte> payload);

}  // namespace kvtier
