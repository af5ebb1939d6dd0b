#include "segment_record.h"

#include <cstring>

#include "../checksum/xxh3_kernels.h"

namespace kvtier::tier_internal {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'S', '1'};
constexpr size_t kChunkHeaderAt = 16;
constexpr size_t kChecksumAt = kChunkHeaderAt + kChunkRecordHeaderBytes;  // 56
static_assert(kChecksumAt + 8 == kSegmentHeaderBytes);

uint64_t load_u64(const std::byte* at) {
  uint64_t v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

uint64_t header_checksum(const std::byte* block) {
  return xxh3_64_seeded(block, kChecksumAt, 0);
}

}  // namespace

void encode_segment_header(const ChunkKey& key, std::span<const std::byte> payload, uint64_t seq,
                           std::span<std::byte> block) {
  std::memset(block.data(), 0, kIoAlign);
  std::memcpy(block.data(), kMagic, 4);
  const uint32_t header_bytes = kSegmentHeaderBytes;
  std::memcpy(block.data() + 4, &header_bytes, 4);
  std::memcpy(block.data() + 8, &seq, 8);
  encode_chunk_header(key, payload,
                      std::span<std::byte, kChunkRecordHeaderBytes>(block.data() + kChunkHeaderAt,
                                                                    kChunkRecordHeaderBytes));
  const uint64_t checksum = header_checksum(block.data());
  std::memcpy(block.data() + kChecksumAt, &checksum, 8);
}

std::optional<SegmentRecordHeader> parse_segment_header(std::span<const std::byte> block) {
  if (block.size() < kSegmentHeaderBytes || std::memcmp(block.data(), kMagic, 4) != 0) {
    return std::nullopt;
  }
  uint32_t header_bytes;
  std::memcpy(&header_bytes, block.data() + 4, 4);
  if (header_bytes != kSegmentHeaderBytes ||
      load_u64(block.data() + kChecksumAt) != header_checksum(block.data())) {
    return std::nullopt;
  }
  const std::byte* chunk = block.data() + kChunkHeaderAt;
  if (std::memcmp(chunk, "KVC1", 4) != 0) return std::nullopt;
  return SegmentRecordHeader{.key = ChunkKey{load_u64(chunk + 8), load_u64(chunk + 16)},
                             .payload_bytes = load_u64(chunk + 24),
                             .seq = load_u64(block.data() + 8)};
}

RecordCheck verify_segment_record(std::span<const std::byte> block, const ChunkKey& expected_key,
                                  std::span<const std::byte> payload) {
  if (!parse_segment_header(block)) return RecordCheck::kCorrupt;
  return verify_chunk_record(block.subspan(kChunkHeaderAt, kChunkRecordHeaderBytes), expected_key,
                             payload);
}

}  // namespace kvtier::tier_internal
