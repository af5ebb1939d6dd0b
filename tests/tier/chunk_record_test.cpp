#include "kvtier/tier/chunk_record.h"

#include <gtest/gtest.h>

#include "redis/redis_key_slot.h"
#include "support/byte_pattern.h"

namespace kvtier {
namespace {

constexpr ChunkKey kKey{.lo = 0x1234, .hi = 0xabcd};

std::vector<std::byte> payload(size_t n, uint64_t seed) {
  std::vector<std::byte> p(n);
  testing::fill_pattern(p.data(), n, seed);
  return p;
}

RecordCheck check(const std::vector<std::byte>& record, const ChunkKey& key) {
  const std::span<const std::byte> r(record);
  return verify_chunk_record(r.first(kChunkRecordHeaderBytes), key,
                             r.subspan(kChunkRecordHeaderBytes));
}

TEST(ChunkRecord, IntactRecordVerifies) {
  const std::vector<std::byte> record = encode_chunk_record(kKey, payload(1000, 1));
  ASSERT_EQ(record.size(), kChunkRecordHeaderBytes + 1000);
  EXPECT_EQ(check(record, kKey), RecordCheck::kOk);
  EXPECT_EQ(check(encode_chunk_record(kKey, {}), kKey), RecordCheck::kOk);
}

TEST(ChunkRecord, EveryFlippedByteIsCaught) {
  const std::vector<std::byte> intact = encode_chunk_record(kKey, payload(256, 2));
  for (size_t i = 0; i < intact.size(); ++i) {
    std::vector<std::byte> record = intact;
    record[i] ^= std::byte{0x01};
    EXPECT_EQ(check(record, kKey), RecordCheck::kCorrupt) << "byte " << i;
  }
}

TEST(ChunkRecord, OtherKeyOrSizeIsCorrupt) {
  std::vector<std::byte> record = encode_chunk_record(kKey, payload(256, 3));
  EXPECT_EQ(check(record, ChunkKey{.lo = 0x1235, .hi = 0xabcd}), RecordCheck::kCorrupt);
  record.pop_back();  // truncated
  EXPECT_EQ(check(record, kKey), RecordCheck::kCorrupt);
}

TEST(RedisKeySlot, MatchesTheClusterSpecification) {
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);  // the specification's test vector
  EXPECT_EQ(redis_key_slot("foo"), 12182);       // CLUSTER KEYSLOT foo
  EXPECT_EQ(redis_key_slot("bar"), 5061);
  EXPECT_EQ(redis_key_slot("{user1000}.following"), redis_key_slot("user1000"));
  EXPECT_EQ(redis_key_slot("{user1000}.followers"), redis_key_slot("user1000"));
  EXPECT_EQ(redis_key_slot("foo{}{bar}"), crc16_xmodem("foo{}{bar}") % 16384);  // empty tag
  EXPECT_EQ(redis_key_slot("foo{{bar}}zap"), redis_key_slot("{bar"));
  EXPECT_EQ(redis_key_slot("foo{bar}{zap}"), redis_key_slot("bar"));
}

}  // namespace
}  // namespace kvtier
