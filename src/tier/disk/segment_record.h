// Segment records: how the disk tier lays a chunk out in a segment file.
//
// A record is one header block (kIoAlign bytes) followed by the payload, padded with zeros to
// a multiple of kIoAlign, so every record starts and ends on an O_DIRECT boundary and the
// payload can be read straight into (or written straight from) an aligned caller buffer.
//
// Header block, little-endian:
//   offset size field
//        0    4 magic "KVS2"
//        4    4 header bytes (kSegmentHeaderBytes)
//        8    8 seq: a counter over the whole tier; the highest seq of a key is its current
//               record when the index is rebuilt
//       16   40 the chunk record header (chunk_record.h): magic "KVC1", key, payload size and
//               the payload checksum (xxh3-64 bound to key and size)
//       56    8 header checksum: xxh3-64 of bytes 0..55, seeded with the id of the segment the
//               record was written to
//       64  ... zeros up to kIoAlign
//
// The header checksum lets a scan tell a record start from anything else (a torn header, the
// zeros of unwritten space, payload bytes) without reading the payload; the payload checksum
// is verified on every read. A record whose payload is torn is therefore indexed on a rebuild
// but never served: its first read finds it kCorrupt. Because the checksum is bound to the
// segment id, a record left in a file from an earlier life under another id (the tier reuses
// retired segment files) is not a record of the segment the file is now: it never parses.
// ("KVS1" records, of versions that did not bind the id, do not parse either.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "aligned_buffer.h"
#include "kvtier/core/chunk_key.h"
#include "kvtier/tier/chunk_record.h"

namespace kvtier::tier_internal {

inline constexpr size_t kSegmentHeaderBytes = 64;

struct SegmentRecordHeader {
  ChunkKey key;
  uint64_t payload_bytes = 0;
  uint64_t seq = 0;
};

constexpr uint64_t segment_record_bytes(uint64_t payload_bytes) {
  return kIoAlign + round_up_io(payload_bytes);
}

// Fills `block` (kIoAlign bytes) with the header of a record of (key, payload, seq) in segment
// `segment_id`; computes the payload's checksum.
void encode_segment_header(const ChunkKey& key, std::span<const std::byte> payload, uint64_t seq,
                           uint64_t segment_id, std::span<std::byte> block);

// The header in `block` when its magic, sizes and header checksum (for `segment_id`) hold;
// nullopt otherwise.
std::optional<SegmentRecordHeader> parse_segment_header(std::span<const std::byte> block,
                                                        uint64_t segment_id);

// Checks a header block of segment `segment_id` and the payload read after it against the
// expected key: the header, then the chunk record (key, size, payload checksum).
RecordCheck verify_segment_record(std::span<const std::byte> block, uint64_t segment_id,
                                  const ChunkKey& expected_key, std::span<const std::byte> payload);

struct Scanned {
  SegmentRecordHeader header;
  uint64_t offset = 0;
};

struct ScanResult {
  std::vector<Scanned> records;  // in file order, each whole inside the file, none overlapping
  uint64_t end = 0;              // just past the last record found
};

// Finds the records of segment `segment_id`, a file of `bytes` bytes (read from `fd`): reads the
// header block at each record start and jumps over the payload; where no valid header is, moves on
// one block at a time (reading a larger window ahead), so a torn or corrupt record costs only
// itself. Stops at the end of the file or at a read error. Payloads are not read: a record
// found here is verified (verify_segment_record) when it is read.
ScanResult scan_segment(int fd, uint64_t bytes, uint64_t segment_id);

}  // namespace kvtier::tier_internal
