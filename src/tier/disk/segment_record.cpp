#include "segment_record.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "../checksum/xxh3_kernels.h"

namespace kvtier::tier_internal {
namespace {

constexpr uint64_t kScanWindow = uint64_t{1} << 20;  // read ahead while resynchronizing
constexpr char kMagic[4] = {'K', 'V', 'S', '2'};
constexpr size_t kChunkHeaderAt = 16;
constexpr size_t kChecksumAt = kChunkHeaderAt + kChunkRecordHeaderBytes;  // 56
static_assert(kChecksumAt + 8 == kSegmentHeaderBytes);

uint64_t load_u64(const std::byte* at) {
  uint64_t v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

uint64_t header_checksum(const std::byte* block, uint64_t segment_id) {
  return xxh3_64_seeded(block, kChecksumAt, segment_id);
}

bool pread_all(int fd, std::byte* data, size_t bytes, uint64_t offset) {
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, data, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace

void encode_segment_header(const ChunkKey& key, std::span<const std::byte> payload, uint64_t seq,
                           uint64_t segment_id, std::span<std::byte> block) {
  std::memset(block.data(), 0, kIoAlign);
  std::memcpy(block.data(), kMagic, 4);
  const uint32_t header_bytes = kSegmentHeaderBytes;
  std::memcpy(block.data() + 4, &header_bytes, 4);
  std::memcpy(block.data() + 8, &seq, 8);
  encode_chunk_header(key, payload,
                      std::span<std::byte, kChunkRecordHeaderBytes>(block.data() + kChunkHeaderAt,
                                                                    kChunkRecordHeaderBytes));
  const uint64_t checksum = header_checksum(block.data(), segment_id);
  std::memcpy(block.data() + kChecksumAt, &checksum, 8);
}

std::optional<SegmentRecordHeader> parse_segment_header(std::span<const std::byte> block,
                                                        uint64_t segment_id) {
  if (block.size() < kSegmentHeaderBytes || std::memcmp(block.data(), kMagic, 4) != 0) {
    return std::nullopt;
  }
  uint32_t header_bytes;
  std::memcpy(&header_bytes, block.data() + 4, 4);
  if (header_bytes != kSegmentHeaderBytes ||
      load_u64(block.data() + kChecksumAt) != header_checksum(block.data(), segment_id)) {
    return std::nullopt;
  }
  const std::byte* chunk = block.data() + kChunkHeaderAt;
  if (std::memcmp(chunk, "KVC1", 4) != 0) return std::nullopt;
  return SegmentRecordHeader{.key = ChunkKey{load_u64(chunk + 8), load_u64(chunk + 16)},
                             .payload_bytes = load_u64(chunk + 24),
                             .seq = load_u64(block.data() + 8)};
}

RecordCheck verify_segment_record(std::span<const std::byte> block, uint64_t segment_id,
                                  const ChunkKey& expected_key,
                                  std::span<const std::byte> payload) {
  if (!parse_segment_header(block, segment_id)) return RecordCheck::kCorrupt;
  return verify_chunk_record(block.subspan(kChunkHeaderAt, kChunkRecordHeaderBytes), expected_key,
                             payload);
}

ScanResult scan_segment(int fd, uint64_t bytes, uint64_t segment_id) {
  ScanResult result;
  // A file smaller than the read-ahead window is read into a buffer its size.
  const uint64_t window_bytes = std::min(kScanWindow, std::max<uint64_t>(bytes, kIoAlign));
  AlignedBuffer window(window_bytes);
  uint64_t window_at = 0;
  uint64_t window_len = 0;
  bool resync = false;
  uint64_t pos = 0;
  while (pos + kIoAlign <= bytes) {
    if (pos < window_at || pos + kIoAlign > window_at + window_len) {
      // After a valid record the next header is one block; while resynchronizing read ahead.
      const uint64_t want = std::min<uint64_t>(resync ? window_bytes : kIoAlign, bytes - pos);
      if (!pread_all(fd, window.data(), want, pos)) break;
      window_at = pos;
      window_len = want;
    }
    const std::span<const std::byte> block(window.data() + (pos - window_at), kIoAlign);
    const std::optional<SegmentRecordHeader> header = parse_segment_header(block, segment_id);
    const uint64_t record_bytes = header ? segment_record_bytes(header->payload_bytes) : 0;
    if (header && header->payload_bytes <= bytes && pos + record_bytes <= bytes) {
      result.records.push_back({*header, pos});
      pos += record_bytes;
      result.end = pos;
      resync = false;
    } else {
      pos += kIoAlign;
      resync = true;
    }
  }
  return result;
}

}  // namespace kvtier::tier_internal
