// libFuzzer target for the tier records: chunk records (a Redis value, the chunk header inside a
// disk record) and disk segment records (a header block, and a segment file scanned for records
// when the disk tier rebuilds its index). No bytes may crash, hang, leak or trip a sanitizer, and
// no corrupt record may pass as valid.
//
// Input: the expected key (16 bytes), a mode byte, then the rest.
//   mode bit 0 clear: the rest is a record and a segment file as found. A record that verifies
//     must be byte for byte the one the encoder writes for its key and payload; a scan may find
//     only records whose header block parses, each inside the file, in order, none overlapping.
//     Mode bit 1 seals every header block of the file first (a valid header checksum over what
//     the input put there), so that scans meet headers of any size and sequence number.
//   mode bit 0 set: the rest describes records, which the encoder writes (a segment file of up
//     to four, and a chunk record), then bytes changed at offsets the input names. A record
//     verifies exactly when none of its bytes changed, and a scan finds every unchanged record.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "checksum/xxh3_kernels.h"
#include "disk/segment_record.h"
#include "kvtier/tier/chunk_record.h"

namespace {

using namespace kvtier;
using tier_internal::kIoAlign;
using tier_internal::kSegmentHeaderBytes;
using tier_internal::segment_record_bytes;
using Bytes = std::span<const std::byte>;
constexpr uint64_t kSegmentId = 7;  // every record of the input's segment file belongs to it

bool equal(Bytes a, Bytes b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

RecordCheck verify_whole(Bytes record, const ChunkKey& key) {
  return verify_chunk_record(record.first(kChunkRecordHeaderBytes), key,
                             record.subspan(kChunkRecordHeaderBytes));
}

tier_internal::ScanResult scan(Bytes file) {
  static const int fd = memfd_create("kvtier_fuzz_segment", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, 0) != 0) std::abort();
  if (!file.empty() && pwrite(fd, file.data(), file.size(), 0) != ssize_t(file.size())) {
    std::abort();
  }
  return tier_internal::scan_segment(fd, file.size() / kIoAlign * kIoAlign, kSegmentId);
}

// Records found are whole, in order, apart, and their header blocks parse to what was found.
void check_scan(Bytes file, const tier_internal::ScanResult& result) {
  uint64_t next = 0;
  for (const tier_internal::Scanned& r : result.records) {
    const uint64_t size = segment_record_bytes(r.header.payload_bytes);
    if (r.offset < next || r.offset % kIoAlign != 0 || size > file.size() ||
        r.offset + size > file.size()) {
      std::abort();
    }
    const auto header =
        tier_internal::parse_segment_header(file.subspan(r.offset, kIoAlign), kSegmentId);
    if (!header || header->key != r.header.key || header->seq != r.header.seq ||
        header->payload_bytes != r.header.payload_bytes) {
      std::abort();
    }
    next = r.offset + size;
  }
  if (result.end != next) std::abort();
}

void check_found(Bytes input, const ChunkKey& key, bool seal) {
  // As a Redis value.
  if (input.size() >= kChunkRecordHeaderBytes && verify_whole(input, key) == RecordCheck::kOk &&
      !equal(input, encode_chunk_record(key, input.subspan(kChunkRecordHeaderBytes)))) {
    std::abort();
  }
  // As a disk record: a header block and its payload.
  std::vector<std::byte> file(input.begin(), input.end());
  if (seal) {
    // The header checksum (segment_record.h): xxh3-64 of the block's first 56 bytes, seeded
    // with the segment id.
    for (size_t at = 0; at + kIoAlign <= file.size(); at += kIoAlign) {
      if (std::memcmp(file.data() + at, "KVS2", 4) != 0) continue;
      const uint64_t sum = tier_internal::xxh3_64_seeded(file.data() + at, 56, kSegmentId);
      std::memcpy(file.data() + at + 56, &sum, 8);
    }
  }
  if (file.size() >= kIoAlign) {
    const Bytes block = std::span(file).first(kIoAlign);
    const Bytes payload = std::span(file).subspan(kIoAlign);
    if (tier_internal::verify_segment_record(block, kSegmentId, key, payload) == RecordCheck::kOk) {
      const auto header = tier_internal::parse_segment_header(block, kSegmentId);
      if (!header) std::abort();
      // Of this segment only.
      if (tier_internal::parse_segment_header(block, kSegmentId + 1)) std::abort();
      std::vector<std::byte> good(kIoAlign);
      tier_internal::encode_segment_header(key, payload, header->seq, kSegmentId, good);
      if (!equal(block.first(kSegmentHeaderBytes), std::span(good).first(kSegmentHeaderBytes))) {
        std::abort();
      }
    }
  }
  check_scan(file, scan(file));
}

struct Written {
  ChunkKey key;
  uint64_t offset = 0;
  uint64_t payload_bytes = 0;
};

void check_written(Bytes input, const ChunkKey& key) {
  if (input.empty()) return;
  const size_t count = static_cast<size_t>(input[0]) % 4 + 1;
  input = input.subspan(1);
  std::vector<std::byte> file;
  std::vector<Written> written;
  for (size_t i = 0; i < count && input.size() >= 3; ++i, input = input.subspan(3)) {
    const uint64_t seq = static_cast<uint64_t>(input[0]);
    const size_t payload_bytes =
        (static_cast<size_t>(input[1]) | static_cast<size_t>(input[2]) << 8) % 9000;
    std::vector<std::byte> payload(payload_bytes);
    for (size_t b = 0; b < payload_bytes; ++b) payload[b] = std::byte(b * 131 + seq * 7 + i);
    const Written w{ChunkKey{key.lo + i, key.hi}, file.size(), payload_bytes};
    file.resize(file.size() + segment_record_bytes(payload_bytes));
    tier_internal::encode_segment_header(w.key, payload, seq, kSegmentId,
                                         std::span(file).subspan(w.offset, kIoAlign));
    std::ranges::copy(payload, file.begin() + static_cast<ptrdiff_t>(w.offset + kIoAlign));
    written.push_back(w);
  }
  if (written.empty()) return;
  std::vector<std::byte> record =
      encode_chunk_record(key, std::span(file).subspan(kIoAlign, written[0].payload_bytes));
  const std::vector<std::byte> clean_file = file;
  const std::vector<std::byte> clean_record = record;
  // The changes: (offset: 3 bytes, xor: 1 byte) each.
  for (; input.size() >= 4; input = input.subspan(4)) {
    const size_t offset = static_cast<size_t>(input[0]) | static_cast<size_t>(input[1]) << 8 |
                          static_cast<size_t>(input[2]) << 16;
    const std::byte flip = input[3] == std::byte{0} ? std::byte{1} : input[3];
    file[offset % file.size()] ^= flip;
    record[offset % record.size()] ^= flip;
  }

  if ((verify_whole(record, key) == RecordCheck::kOk) != equal(record, clean_record)) {
    std::abort();
  }
  const tier_internal::ScanResult result = scan(file);
  check_scan(file, result);
  for (const Written& w : written) {
    const auto block = std::span(file).subspan(w.offset, kIoAlign);
    const auto payload = std::span(file).subspan(w.offset + kIoAlign, w.payload_bytes);
    const auto clean_block = std::span(clean_file).subspan(w.offset, kSegmentHeaderBytes);
    const auto clean_payload = std::span(clean_file).subspan(w.offset + kIoAlign, w.payload_bytes);
    const bool unchanged =
        equal(block.first(kSegmentHeaderBytes), clean_block) && equal(payload, clean_payload);
    if ((tier_internal::verify_segment_record(block, kSegmentId, w.key, payload) ==
         RecordCheck::kOk) != unchanged) {
      std::abort();
    }
    const bool found = std::ranges::any_of(result.records, [&](const tier_internal::Scanned& r) {
      return r.offset == w.offset && r.header.key == w.key &&
             r.header.payload_bytes == w.payload_bytes;
    });
    if (unchanged && !found) std::abort();  // a corrupt record costs only itself
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 17) return 0;
  ChunkKey key;
  std::memcpy(&key.lo, data, 8);
  std::memcpy(&key.hi, data + 8, 8);
  const uint8_t mode = data[16];
  const Bytes rest(reinterpret_cast<const std::byte*>(data) + 17, size - 17);
  if (mode & 1) {
    check_written(rest, key);
  } else {
    check_found(rest, key, (mode & 2) != 0);
  }
  return 0;
}
