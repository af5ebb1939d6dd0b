// The LOOKUP frame readers (lookup_frames.h) against the general decoder: what they accept they
// read exactly as decode_request / decode_batch / decode_replies do, and every frame they are
// not sure of (another shape, a malformed or truncated frame) they decline, for the general
// decoder to answer.
#include "lookup_frames.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <string>
#include <vector>

#include "kvtier/server/protocol.h"

namespace kvtier::server {
namespace {

Request lookup(uint64_t id, std::vector<ChunkKey> keys, uint64_t lock_ms = 0) {
  Request r{.id = id, .op = Op::kLookup};
  r.keys = std::move(keys);
  r.lock_ms = lock_ms;
  return r;
}

std::string batch_of(const std::vector<Request>& requests) {
  std::string body;
  for (const Request& r : requests) append_request(body, r);
  return encode_batch(requests.size(), body);
}

// What the general decoder reads from a frame the reader may take: (id, keys, lock_ms) of each.
std::vector<std::tuple<uint64_t, std::vector<ChunkKey>, uint64_t>> general(const std::string& f) {
  std::vector<std::tuple<uint64_t, std::vector<ChunkKey>, uint64_t>> out;
  const auto add = [&](const Result<Request>& r) {
    EXPECT_TRUE(r) << r.error().message;
    if (r) out.emplace_back(r->id, r->keys, r->lock_ms);
  };
  if (is_batch_frame(as_bytes(f))) {
    const Status st =
        decode_batch(as_bytes(f), DecodeLimits{}, [&](BatchItem item) { add(item.request); });
    EXPECT_TRUE(st) << st.error().message;
  } else {
    add(decode_request(as_bytes(f), DecodeLimits{}));
  }
  return out;
}

std::vector<std::tuple<uint64_t, std::vector<ChunkKey>, uint64_t>> fast(LookupFrame& frame) {
  std::vector<std::tuple<uint64_t, std::vector<ChunkKey>, uint64_t>> out;
  for (const LookupItem& item : frame.items) {
    const auto keys = frame.keys_of(item);
    out.emplace_back(item.id, std::vector<ChunkKey>(keys.begin(), keys.end()), item.lock_ms);
  }
  return out;
}

TEST(LookupFrames, ASingleLookupAndABatchReadAsTheGeneralDecoderReadsThem) {
  LookupFrame frame;
  const std::string one = encode_request(lookup(7, {{1, 2}, {3, 4}}, 250));
  ASSERT_TRUE(read_lookup_frame(as_bytes(one), DecodeLimits{}, frame));
  EXPECT_FALSE(frame.batch);
  EXPECT_EQ(fast(frame), general(one));

  std::vector<Request> many;
  for (uint64_t i = 0; i < 300; ++i) {  // ids past a fixint, key counts 0 .. 20
    std::vector<ChunkKey> keys;
    for (uint64_t k = 0; k < i % 21; ++k) keys.push_back({i * 100 + k, ~k});
    many.push_back(lookup(i * 1000003, std::move(keys), i % 3 == 0 ? 0 : i * 70000));
  }
  const std::string batch = batch_of(many);
  ASSERT_TRUE(read_lookup_frame(as_bytes(batch), DecodeLimits{}, frame));
  EXPECT_TRUE(frame.batch);
  EXPECT_EQ(fast(frame), general(batch));
}

// A LOOKUP map packed by hand: the fields in `order`, each once unless named twice.
std::string lookup_map(const std::vector<std::string>& order) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(static_cast<uint32_t>(order.size()));
  for (const std::string& name : order) {
    pk.pack(name);
    if (name == "v") pk.pack(kProtocolVersion);
    if (name == "id") pk.pack(uint64_t{99});
    if (name == "op") pk.pack(std::string("LOOKUP"));
    if (name == "lock_ms") pk.pack(uint64_t{5});
    if (name == "hook") pk.pack(std::string("slow"));
    if (name == "extra") pk.pack(1);
    if (name == "keys") {
      pk.pack_array(1);
      pk.pack_bin(16);
      pk.pack_bin_body("0123456789abcdef", 16);
    }
  }
  return std::string(buf.data(), buf.size());
}

TEST(LookupFrames, FieldsInAnyOrderAndWithoutLockMsAreRead) {
  LookupFrame frame;
  for (const auto& order : std::vector<std::vector<std::string>>{
           {"keys", "op", "id", "v"}, {"lock_ms", "id", "keys", "v", "op"}}) {
    const std::string f = lookup_map(order);
    ASSERT_TRUE(read_lookup_frame(as_bytes(f), DecodeLimits{}, frame));
    EXPECT_EQ(fast(frame), general(f));
  }
}

TEST(LookupFrames, AnythingButAPlainLookupIsLeftToTheGeneralDecoder) {
  LookupFrame frame;
  const auto declined = [&](const std::string& f) {
    return !read_lookup_frame(as_bytes(f), DecodeLimits{}, frame);
  };
  EXPECT_TRUE(declined(lookup_map({"v", "id", "op"})));                           // no keys
  EXPECT_TRUE(declined(lookup_map({"id", "op", "keys"})));                        // no version
  EXPECT_TRUE(declined(lookup_map({"v", "op", "keys"})));                         // no id
  EXPECT_TRUE(declined(lookup_map({"v", "id", "op", "keys", "hook"})));           // a test hook
  EXPECT_TRUE(declined(lookup_map({"v", "id", "op", "keys", "extra"})));          // unknown field
  EXPECT_TRUE(declined(lookup_map({"v", "id", "op", "keys", "lock_ms", "id"})));  // repeated
  EXPECT_TRUE(declined(encode_request(Request{.id = 1, .op = Op::kPing})));
  Request store{.id = 1, .op = Op::kStore};
  store.keys = {{1, 2}};
  store.blocks = {{0}};
  EXPECT_TRUE(declined(encode_request(store)));
  EXPECT_TRUE(declined(batch_of({lookup(1, {{1, 1}}), Request{.id = 2, .op = Op::kStats}})));

  // Another version, a 15-byte key, a signed id: the general decoder answers each.
  std::string f = lookup_map({"v", "id", "op", "keys"});
  std::string v2 = f;
  v2[3] = static_cast<char>(kProtocolVersion + 1);  // map header, "v" (2 bytes), then v
  ASSERT_EQ(static_cast<uint8_t>(f[3]), kProtocolVersion);
  EXPECT_TRUE(declined(v2));
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(4);
  pk.pack("v"), pk.pack(kProtocolVersion), pk.pack("id"), pk.pack_int8(3);
  pk.pack("op"), pk.pack(std::string("LOOKUP")), pk.pack("keys"), pk.pack_array(1);
  pk.pack_bin(15), pk.pack_bin_body("0123456789abcde", 15);
  EXPECT_TRUE(declined(std::string(buf.data(), buf.size())));

  // Every truncation, and trailing bytes, of a frame it reads.
  const std::string whole = batch_of({lookup(1, {{1, 2}}), lookup(2, {{3, 4}, {5, 6}}, 9)});
  for (size_t n = 0; n < whole.size(); ++n) EXPECT_TRUE(declined(whole.substr(0, n))) << n;
  EXPECT_TRUE(declined(whole + '\0'));
  // Over the frame limit.
  EXPECT_FALSE(read_lookup_frame(as_bytes(whole), DecodeLimits{.max_frame_bytes = 8}, frame));
}

TEST(LookupFrames, LookupRepliesReadAsDecodeRepliesReadsThem) {
  std::string body;
  for (uint64_t i = 0; i < 200; ++i) {
    append_lookup_reply(body, i * 65537, i % 17, i % 5 == 0, i % 3 == 0 ? 0 : i << 33);
  }
  const std::string frame = encode_batch(200, body);
  std::vector<LookupReplyItem> fast;
  ASSERT_TRUE(read_lookup_replies(as_bytes(frame), fast));
  auto general = decode_replies(as_bytes(frame));
  ASSERT_TRUE(general);
  ASSERT_EQ(fast.size(), general->size());
  for (size_t i = 0; i < fast.size(); ++i) {
    const Reply read = fast[i].to_reply();
    EXPECT_EQ(read.id, (*general)[i].id);
    EXPECT_TRUE((*general)[i].ok);
    EXPECT_EQ(read.fields, (*general)[i].fields) << i;
  }
  // Fields in another order are read the same.
  Reply reordered{.id = 5};
  reordered.fields = {{"lock", 9}, {"pending", 1}, {"hits", 4}};
  std::string other;
  append_reply(other, reordered);
  ASSERT_TRUE(read_lookup_replies(as_bytes(encode_batch(1, other)), fast));
  ASSERT_EQ(fast.size(), 1u);
  EXPECT_EQ(fast[0].to_reply().fields,
            (*decode_replies(as_bytes(encode_batch(1, other))))[0].fields);
}

TEST(LookupFrames, OtherRepliesAreLeftToDecodeReplies) {
  std::vector<LookupReplyItem> out;
  const auto declined = [&](const std::string& f) {
    return !read_lookup_replies(as_bytes(f), out);
  };
  std::string one;
  append_lookup_reply(one, 1, 2, false, 0);
  EXPECT_TRUE(declined(one));  // not an array
  std::string body = one;
  append_reply(body, Reply::error(2, codes::kNotRegistered, "REGISTER first"));
  EXPECT_TRUE(declined(encode_batch(2, body)));
  Reply stats{.id = 3};
  stats.fields = {{"hits", 1}, {"pending", 0}, {"extra", 0}};  // six fields, one unknown
  std::string with_stats = one;
  append_reply(with_stats, stats);
  EXPECT_TRUE(declined(encode_batch(2, with_stats)));
  msgpack::sbuffer repeated;  // six fields, "hits" twice and no "pending"
  msgpack::packer<msgpack::sbuffer> pk(repeated);
  pk.pack_array(1), pk.pack_map(6);
  pk.pack("v"), pk.pack(kProtocolVersion), pk.pack("id"), pk.pack(1), pk.pack("ok"), pk.pack(true);
  pk.pack("hits"), pk.pack(1), pk.pack("hits"), pk.pack(2), pk.pack("lock"), pk.pack(0);
  EXPECT_TRUE(declined(std::string(repeated.data(), repeated.size())));
  const std::string whole = encode_batch(1, one);
  for (size_t n = 0; n < whole.size(); ++n) EXPECT_TRUE(declined(whole.substr(0, n))) << n;
  // A count no frame could hold is declined before anything is allocated for it.
  std::string huge = "\xdd\x7f\xff\xff\xff" + one;
  EXPECT_TRUE(declined(huge));
  EXPECT_TRUE(declined(encode_batch(kMaxBatchRequests + 1, one)));
  EXPECT_TRUE(declined(whole + '\0'));
}

}  // namespace
}  // namespace kvtier::server
