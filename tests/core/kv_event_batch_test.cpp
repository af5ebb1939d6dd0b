// The KV event format (docs/events.md): a batch survives encode/decode, its bytes have the
// documented shape, and anything else is refused with a reason.
#include "kvtier/core/kv_event_batch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <msgpack.hpp>

namespace kvtier {
namespace {

KvEventBatch sample() {
  return KvEventBatch{
      .ts = 1700000000.25,
      .events = {KvEvent{.kind = KvEventKind::kBlockStored,
                         .block_hashes = {ChunkKey{.lo = 1, .hi = 2}, ChunkKey{.lo = 3, .hi = 4}},
                         .parent = ChunkKey{.lo = 5, .hi = 6},
                         .token_ids = {10, 11, 12, 13},
                         .block_size = 2,
                         .medium = "device"},
                 KvEvent{.kind = KvEventKind::kBlockRemoved,
                         .block_hashes = {ChunkKey{.lo = 7, .hi = 8}},
                         .medium = "host"},
                 KvEvent{.kind = KvEventKind::kAllBlocksCleared}},
      .data_parallel_rank = 3};
}

TEST(KvEventBatch, RoundTrips) {
  const KvEventBatch batch = sample();
  Result<KvEventBatch> back = decode_kv_event_batch(encode_kv_event_batch(batch));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, batch);
  KvEventBatch no_rank{.ts = 1, .events = {}};
  EXPECT_EQ(*decode_kv_event_batch(encode_kv_event_batch(no_rank)), no_rank);
}

TEST(KvEventBatch, HasTheDocumentedShape) {
  const std::string bytes = encode_kv_event_batch(sample());
  msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& o = h.get();
  ASSERT_EQ(o.type, msgpack::type::ARRAY);
  ASSERT_EQ(o.via.array.size, 3u);
  EXPECT_EQ(o.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(o.via.array.ptr[2].as<int>(), 3);
  const msgpack::object& stored = o.via.array.ptr[1].via.array.ptr[0];
  ASSERT_EQ(stored.via.array.size, 7u);
  EXPECT_EQ(stored.via.array.ptr[0].as<std::string>(), "BlockStored");
  const msgpack::object& hash = stored.via.array.ptr[1].via.array.ptr[0];
  ASSERT_EQ(hash.type, msgpack::type::BIN);
  // lo then hi, little-endian, as kvtierd's protocol writes a key.
  const std::string expected{"\x01\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0", 16};
  EXPECT_EQ(std::string(hash.via.bin.ptr, hash.via.bin.size), expected);
  EXPECT_EQ(stored.via.array.ptr[4].as<uint32_t>(), 2u);
  EXPECT_EQ(stored.via.array.ptr[5].type, msgpack::type::NIL);  // lora_id
  EXPECT_EQ(stored.via.array.ptr[6].as<std::string>(), "device");
  const msgpack::object& removed = o.via.array.ptr[1].via.array.ptr[1];
  EXPECT_EQ(removed.via.array.size, 3u);
  EXPECT_EQ(removed.via.array.ptr[0].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(o.via.array.ptr[1].via.array.ptr[2].via.array.size, 1u);
}

std::string packed(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& f) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  f(pk);
  return std::string(b.data(), b.size());
}

TEST(KvEventBatch, RefusesWhatIsNotABatchWithAReason) {
  auto reason = [](const std::string& bytes) {
    Result<KvEventBatch> r = decode_kv_event_batch(bytes);
    return r ? std::string("decoded") : r.error().message;
  };
  EXPECT_NE(reason("").find("not MessagePack"), std::string::npos);
  EXPECT_NE(reason(packed([](auto& pk) { pk.pack_map(0); })).find("not an array"),
            std::string::npos);
  EXPECT_NE(reason(packed([](auto& pk) {
              pk.pack_array(3), pk.pack(1.0), pk.pack_array(1), pk.pack_array(1);
              pk.pack(std::string("Nope")), pk.pack_nil();
            })).find("unknown event tag 'Nope'"),
            std::string::npos);
  EXPECT_NE(reason(packed([](auto& pk) {
              pk.pack_array(3), pk.pack(1.0), pk.pack_array(1), pk.pack_array(3);
              pk.pack(std::string("BlockRemoved")), pk.pack_array(1), pk.pack(5);
              pk.pack(std::string("host")), pk.pack_nil();
            })).find("16-byte block hash"),
            std::string::npos);
  for (double ts : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    EXPECT_NE(reason(packed([ts](auto& pk) {
                pk.pack_array(3), pk.pack(ts), pk.pack_array(0), pk.pack_nil();
              })).find("ts is not a finite number"),
              std::string::npos);
  }
}

TEST(KvEventBatch, SequenceFramesAreEightBytesBigEndian) {
  EXPECT_EQ(encode_sequence(0x0102), std::string("\0\0\0\0\0\0\x01\x02", 8));
  EXPECT_EQ(decode_sequence(encode_sequence(123456789)), 123456789u);
  EXPECT_EQ(decode_sequence("1234567"), std::nullopt);
}

}  // namespace
}  // namespace kvtier
