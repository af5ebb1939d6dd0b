// Codec unit tests: round trips, and every kind of bad frame is an error naming its protocol
// error code (never a crash, never an exception).
#include <gtest/gtest.h>

#include <cstring>
#include <msgpack.hpp>
#include <optional>
#include <tuple>

#include "kvtier/server/protocol.h"

namespace kvtier::server {
namespace {

// A request map with the given version / id / op entries (each left out when empty) and
// `extra` more entries packed by `more`.
template <class More>
std::string frame(std::optional<uint64_t> v, std::optional<std::string> id, std::string op,
                  uint32_t extra, More more) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map((v ? 1 : 0) + (id ? 1 : 0) + 1 + extra);
  if (v) pk.pack("v"), pk.pack(*v);
  if (id) {
    pk.pack("id");
    if (*id == "x") {
      pk.pack("x");
    } else {
      pk.pack(std::stoull(*id));
    }
  }
  pk.pack("op"), pk.pack(op);
  more(pk);
  return std::string(buf.data(), buf.size());
}
std::string frame(std::optional<uint64_t> v, std::optional<std::string> id, std::string op) {
  return frame(v, std::move(id), std::move(op), 0, [](auto&) {});
}

std::string error_code(const Result<Request>& r) {
  EXPECT_FALSE(r.has_value());
  return r ? "" : split_decode_error(r.error()).first;
}

Request store_request() {
  Request r{.id = 42, .op = Op::kStore};
  r.keys = {ChunkKey{1, 2}, ChunkKey{3, 4}};
  r.blocks = {{0, 1}, {2, 3}};
  r.group = 0;
  return r;
}

TEST(ProtocolCodec, RequestRoundTrip) {
  const Request in = store_request();
  auto out = decode_request(as_bytes(encode_request(in)), DecodeLimits{});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->id, 42u);
  EXPECT_EQ(out->op, Op::kStore);
  EXPECT_EQ(out->keys, in.keys);
  EXPECT_EQ(out->blocks, in.blocks);
}

TEST(ProtocolCodec, RegisterRoundTrip) {
  Request in{.id = 7, .op = Op::kRegister};
  in.rank = 3;
  in.layout.groups.push_back(KvGroup{2, 2, 8, 2, 4, 4});
  in.memory = SharedKvMemory{.shm_name = "/x", .bytes = 4096, .groups = {{{0, 2048}, 4}}};
  auto out = decode_request(as_bytes(encode_request(in)), DecodeLimits{});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->rank, 3u);
  EXPECT_EQ(out->layout.groups.at(0).block_size, 4u);
  EXPECT_EQ(out->memory.groups.at(0).offsets, (std::vector<uint64_t>{0, 2048}));
}

TEST(ProtocolCodec, EachOperationRoundTripsItsOwnFields) {
  Request lookup{.id = 1, .op = Op::kLookup, .keys = {ChunkKey{5, 6}}, .lock_ms = 250};
  auto l = decode_request(as_bytes(encode_request(lookup)), DecodeLimits{});
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->keys, lookup.keys);
  EXPECT_EQ(l->lock_ms, 250u);
  Request retrieve = store_request();
  retrieve.op = Op::kRetrieve;
  retrieve.group = 1;
  retrieve.lock = 77;
  auto r = decode_request(as_bytes(encode_request(retrieve)), DecodeLimits{});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->op, Op::kRetrieve);
  EXPECT_EQ(r->group, 1u);
  EXPECT_EQ(r->lock, 77u);
  EXPECT_EQ(r->blocks, retrieve.blocks);
  Request release{.id = 3, .op = Op::kRelease, .hook = TestHook::kStall, .lock = 9};
  auto rel = decode_request(as_bytes(encode_request(release)), DecodeLimits{});
  ASSERT_TRUE(rel) << rel.error().message;
  EXPECT_EQ(rel->lock, 9u);
  EXPECT_EQ(rel->hook, TestHook::kStall);
  Request pin{.id = 4, .op = Op::kPin, .keys = {ChunkKey{7, 8}}, .ttl_ms = 1500};
  auto p = decode_request(as_bytes(encode_request(pin)), DecodeLimits{});
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->op, Op::kPin);
  EXPECT_EQ(p->keys, pin.keys);
  EXPECT_EQ(p->ttl_ms, 1500u);
  Request unpin{.id = 5, .op = Op::kUnpin, .keys = {ChunkKey{7, 8}}};
  auto u = decode_request(as_bytes(encode_request(unpin)), DecodeLimits{});
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->op, Op::kUnpin);
  EXPECT_EQ(u->keys, unpin.keys);
}

TEST(ProtocolCodec, F11_AnOperationsRequiredFieldsAreChecked) {
  const DecodeLimits limits;
  EXPECT_EQ(error_code(decode_request(as_bytes(frame(1, "1", "RELEASE")), limits)),
            codes::kMalformed);  // no lock
  EXPECT_EQ(error_code(decode_request(as_bytes(frame(1, "1", "LOOKUP")), limits)),
            codes::kMalformed);  // no keys
  const std::string pin_without_ttl = frame(1, "1", "PIN", 1, [](auto& pk) {
    pk.pack("keys");
    pk.pack_array(0);
  });
  EXPECT_EQ(error_code(decode_request(as_bytes(pin_without_ttl), limits)), codes::kMalformed);
  const std::string register_without_memory = frame(1, "1", "REGISTER", 1, [](auto& pk) {
    pk.pack("layout");
    pk.pack_map(0);
  });
  EXPECT_EQ(error_code(decode_request(as_bytes(register_without_memory), limits)),
            codes::kMalformed);
  // A field of the operation, of the wrong type, is malformed; the error reply can echo the id.
  uint64_t id = 0;
  const std::string bad_lock = frame(1, "8", "RELEASE", 1, [](auto& pk) {
    pk.pack("lock");
    pk.pack("not a number");
  });
  EXPECT_EQ(error_code(decode_request(as_bytes(bad_lock), limits, &id)), codes::kMalformed);
  EXPECT_EQ(id, 8u);
}

TEST(ProtocolCodec, KeysOfAnotherOperationAreIgnoredLikeUnknownOnes) {
  // "keys" is LOOKUP's / STORE's / RETRIEVE's: a PING does not read it, whatever it holds.
  const std::string ping = frame(1, "4", "PING", 2, [](auto& pk) {
    pk.pack("keys");
    pk.pack("not an array");
    pk.pack("frobnicate");
    pk.pack(1);
  });
  auto r = decode_request(as_bytes(ping), DecodeLimits{});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->op, Op::kPing);
  EXPECT_TRUE(r->keys.empty());
  // The common fields are checked before the operation's: an unknown op is unknown_op even
  // with a malformed field beside it.
  const std::string frob = frame(1, "4", "FROB", 1, [](auto& pk) {
    pk.pack("keys");
    pk.pack("not an array");
  });
  EXPECT_EQ(error_code(decode_request(as_bytes(frob), DecodeLimits{})), codes::kUnknownOp);
}

TEST(ProtocolCodec, TestHooksTravelByNameAndUnknownNamesAreInvalid) {
  Request in = store_request();
  in.hook = TestHook::kFailPartway;
  auto out = decode_request(as_bytes(encode_request(in)), DecodeLimits{});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->hook, TestHook::kFailPartway);
  EXPECT_EQ(to_string(TestHook::kFailPartway), "fail_partway");
  EXPECT_EQ(parse_test_hook("no_reply"), TestHook::kNoReply);
  EXPECT_EQ(parse_test_hook(""), TestHook::kNone);
  const auto hooked = [](std::string name) {
    return frame(1, "1", "PING", 1, [name](auto& pk) { pk.pack("hook"), pk.pack(name); });
  };
  auto stall = decode_request(as_bytes(hooked("stall")), DecodeLimits{});
  ASSERT_TRUE(stall) << stall.error().message;
  EXPECT_EQ(stall->hook, TestHook::kStall);
  EXPECT_EQ(error_code(decode_request(as_bytes(hooked("frob")), DecodeLimits{})),
            codes::kInvalidArgument);
}

TEST(ProtocolCodec, ReplyRoundTripBoundsTheMessage) {
  Reply in = Reply::error(9, codes::kInternal, std::string(1000, 'x'));
  auto out = decode_reply(as_bytes(encode_reply(in)));
  ASSERT_TRUE(out);
  EXPECT_FALSE(out->ok);
  EXPECT_EQ(out->id, 9u);
  EXPECT_EQ(out->code, codes::kInternal);
  EXPECT_EQ(out->message.size(), kMaxErrorMessage);
}

// A decoded reply keeps its "v" among its fields; encoded again (a proxy, a test's round trip)
// it carries "v" once, or the decoder, which refuses a field named twice, would refuse it.
TEST(ProtocolCodec, ADecodedReplyEncodesAgainWithItsVersionOnce) {
  Reply in;
  in.id = 5;
  in.fields = {{"hits", 2}};
  auto once = decode_reply(as_bytes(encode_reply(in)));
  ASSERT_TRUE(once) << once.error().message;
  auto twice = decode_reply(as_bytes(encode_reply(*once)));
  ASSERT_TRUE(twice) << twice.error().message;
  EXPECT_EQ(twice->id, 5u);
  EXPECT_EQ(twice->fields, once->fields);
}

TEST(ProtocolCodec, DegradedTiersAreTheDownFieldsSetToOne) {
  Reply in;
  in.fields = {{"boot_id", 1},
               {tier_down_field("redis"), 1},
               {tier_down_field("disk"), 0},
               {"tier.disk.hits", 5},
               {"tier..down", 1}};  // no name: ignored
  auto out = decode_reply(as_bytes(encode_reply(in)));
  ASSERT_TRUE(out);
  EXPECT_EQ(degraded_tiers_of(*out), std::vector<std::string>{"redis"});
  EXPECT_TRUE(degraded_tiers_of(Reply{}).empty());
  // A part of a tier (a Redis Cluster master) is named with its address, dots and all.
  Reply part;
  part.fields = {{tier_down_field("redis/10.0.0.7:6379"), 1}, {"tier.redis.skipped_keys", 4}};
  EXPECT_EQ(degraded_tiers_of(part), std::vector<std::string>{"redis/10.0.0.7:6379"});
}

TEST(ProtocolCodec, TierFieldsAreGroupedByTierName) {
  Reply in;
  in.fields = {{"boot_id", 1},
               {"tiers", 2},
               {tier_down_field("redis"), 1},
               {"tier.redis.errors", 3},
               {tier_down_field("disk"), 0},
               {"tier.disk.hits", 5},
               {"tier..down", 1},
               {"tier.disk.", 7},
               {"tier_writes_enqueued", 4}};
  const auto tiers = tier_fields_of(in);
  const std::map<std::string, std::map<std::string, uint64_t>> want = {
      {"disk", {{"down", 0}, {"hits", 5}}}, {"redis", {{"down", 1}, {"errors", 3}}}};
  EXPECT_EQ(tiers, want);
  EXPECT_TRUE(tier_fields_of(Reply{}).empty());
}

TEST(ProtocolCodec, F11_EveryTruncationIsMalformedNotACrash) {
  const std::string frame = encode_request(store_request());
  for (size_t n = 0; n < frame.size(); ++n) {
    uint64_t id = 0;
    auto r = decode_request(as_bytes(std::string_view(frame).substr(0, n)), DecodeLimits{}, &id);
    EXPECT_EQ(error_code(r), codes::kMalformed) << "prefix of " << n << " bytes";
  }
}

TEST(ProtocolCodec, F11_BadFramesNameTheirErrorCode) {
  const DecodeLimits limits{.max_frame_bytes = 64};
  EXPECT_EQ(error_code(decode_request(as_bytes(std::string(65, 'a')), limits)), codes::kTooLarge);
  EXPECT_EQ(error_code(decode_request(as_bytes("\xc1"), limits)), codes::kMalformed);
  msgpack::sbuffer array;
  msgpack::pack(array, std::vector<int>{1, 2});
  EXPECT_EQ(error_code(decode_request(as_bytes({array.data(), array.size()}), limits)),
            codes::kMalformed);
  uint64_t id = 0;
  EXPECT_EQ(error_code(decode_request(as_bytes(frame(1, "5", "FROB")), limits, &id)),
            codes::kUnknownOp);
  EXPECT_EQ(id, 5u);  // the error reply can echo it
  EXPECT_EQ(error_code(decode_request(as_bytes(frame(2, "5", "PING")), limits)),
            codes::kUnsupportedVersion);
  EXPECT_EQ(error_code(decode_request(as_bytes(frame(1, std::nullopt, "PING")), limits)),
            codes::kMalformed);
  EXPECT_EQ(error_code(decode_request(as_bytes(frame(std::nullopt, "1", "PING")), limits)),
            codes::kMalformed);
  EXPECT_EQ(error_code(decode_request(as_bytes(frame(1, "x", "PING")), limits)), codes::kMalformed);
  EXPECT_EQ(error_code(decode_request(as_bytes(frame(1, "1", "STORE")), limits)),
            codes::kMalformed);  // keys and blocks missing
  EXPECT_TRUE(decode_request(as_bytes(frame(1, "1", "PING")), limits));
}

TEST(ProtocolCodec, F11_KeysOfWrongSizeAndMismatchedBlocksAreMalformed) {
  Request r = store_request();
  r.blocks.pop_back();
  EXPECT_EQ(error_code(decode_request(as_bytes(encode_request(r)), DecodeLimits{})),
            codes::kMalformed);
  const std::string bad_key = frame(1, "1", "LOOKUP", 1, [](auto& pk) {
    pk.pack("keys");
    pk.pack_array(1);
    pk.pack_bin(3);
    pk.pack_bin_body("abc", 3);
  });
  EXPECT_EQ(error_code(decode_request(as_bytes(bad_key), DecodeLimits{})), codes::kMalformed);
}

TEST(ProtocolCodec, F11_ErrorMessagesAreValidUtf8AndNeverCutACharacter) {
  EXPECT_EQ(utf8_message("plain"), "plain");
  EXPECT_EQ(utf8_message("caf\xc3\xa9 \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xf0\x9f\x98\x80");
  // Each byte of a malformed sequence becomes '?': a lone lead, a stray continuation, an
  // overlong form, a surrogate, a code point past U+10FFFF.
  EXPECT_EQ(utf8_message("a\xc3"), "a?");
  EXPECT_EQ(utf8_message("\x80"
                         "b"),
            "?b");
  EXPECT_EQ(utf8_message("\xc0\xaf"), "??");
  EXPECT_EQ(utf8_message("\xed\xa0\x80"), "???");
  EXPECT_EQ(utf8_message("\xf4\x90\x80\x80"), "????");
  // 255 ASCII bytes and a two-byte character: the cut falls before it, not inside.
  const std::string cut = utf8_message(std::string(255, 'x') + "\xc3\xa9tail");
  EXPECT_EQ(cut, std::string(255, 'x'));
  EXPECT_EQ(utf8_message(std::string(1000, 'y')).size(), kMaxErrorMessage);
  // Reply::error applies it, and so does the encoder's round trip.
  Reply r = Reply::error(9, codes::kUnknownOp, std::string(254, 'z') + "\xe2\x82\xac\xff");
  EXPECT_EQ(r.message, std::string(254, 'z'));
  EXPECT_EQ(decode_reply(as_bytes(encode_reply(r)))->message, r.message);
}

TEST(ProtocolCodec, F11_IdIsEchoedWhenAFieldBeforeItIsBad) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(3);
  pk.pack("op"), pk.pack(7);  // not a string, and before the id
  pk.pack("v"), pk.pack(1);
  pk.pack("id"), pk.pack(4242);
  uint64_t id = 0;
  auto r = decode_request(as_bytes(std::string_view(buf.data(), buf.size())), DecodeLimits{}, &id);
  EXPECT_EQ(error_code(r), codes::kMalformed);
  EXPECT_EQ(id, 4242u);
}

TEST(ProtocolCodec, MemfdRegistrationRoundTrips) {
  Request in{.id = 3, .op = Op::kRegister, .rank = 1};
  in.layout = KvLayout{DeviceLayout::kCrossLayer,
                       {KvGroup{.layers = 2,
                                .kv_heads = 1,
                                .head_dim = 8,
                                .dtype_bytes = 2,
                                .block_size = 4,
                                .blocks_per_chunk = 2}}};
  in.memory = SharedKvMemory{.pid = 1234, .fd = 17, .bytes = 4096, .groups = {{{0}, 4}}};
  auto out = decode_request(as_bytes(encode_request(in)), DecodeLimits{});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->memory.pid, 1234u);
  EXPECT_EQ(out->memory.fd, 17u);
  EXPECT_TRUE(out->memory.shm_name.empty());
  EXPECT_EQ(out->memory.bytes, 4096u);
}

// Unsigned values at each edge of MessagePack's integer forms.
const std::vector<uint64_t> kEveryWidth = {0,     127,   128,        255,        256,
                                           65535, 65536, 0xffffffff, 1ull << 32, ~0ull};

// The socket loop's LOOKUP reply, encoded without a Reply, is the Reply the service would send.
TEST(ProtocolCodec, LookupReplyWithoutAReplyIsTheSameBytes) {
  for (size_t i = 0; i < kEveryWidth.size(); ++i) {
    const uint64_t id = kEveryWidth[i];
    const uint64_t hits = kEveryWidth[(i + 3) % kEveryWidth.size()];
    const uint64_t lock = kEveryWidth[(i + 7) % kEveryWidth.size()];
    const bool pending = i % 2 == 1;
    Reply in;
    in.id = id;
    in.fields = {{"hits", hits}, {"pending", pending ? 1u : 0u}, {"lock", lock}};
    std::string fast = "prefix";
    append_lookup_reply(fast, in.id, hits, pending, lock);
    EXPECT_EQ(fast, "prefix" + encode_reply(in)) << i;
  }
}

// A LOOKUP request, encoded by hand, is the map msgpack-c packs for it, at every integer width
// and every form of the keys' array header.
TEST(ProtocolCodec, LookupRequestIsTheMapMsgpackPacks) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{65535}, size_t{65536}}) {
    for (size_t i = 0; i < kEveryWidth.size(); ++i) {
      const uint64_t id = kEveryWidth[i];
      const uint64_t lock_ms = kEveryWidth[(i + 5) % kEveryWidth.size()];
      std::vector<ChunkKey> keys;
      for (size_t k = 0; k < n; ++k) keys.push_back(ChunkKey{k * 0x0101010101ull, ~k});
      msgpack::sbuffer expected;
      msgpack::packer<msgpack::sbuffer> pk(expected);
      pk.pack_map(5);
      pk.pack("v"), pk.pack(kProtocolVersion);
      pk.pack("id"), pk.pack(id);
      pk.pack("op"), pk.pack(std::string("LOOKUP"));
      pk.pack("keys"), pk.pack_array(static_cast<uint32_t>(n));
      for (const ChunkKey& k : keys) {
        char bytes[16];
        std::memcpy(bytes, &k.lo, 8);
        std::memcpy(bytes + 8, &k.hi, 8);
        pk.pack_bin(16), pk.pack_bin_body(bytes, 16);
      }
      pk.pack("lock_ms"), pk.pack(lock_ms);
      std::string fast = "prefix";
      append_lookup_request(fast, id, keys, lock_ms);
      ASSERT_EQ(fast, "prefix" + std::string(expected.data(), expected.size())) << n << " " << i;
      Request r{.id = id, .op = Op::kLookup, .keys = keys, .lock_ms = lock_ms};
      EXPECT_EQ(encode_request(r), fast.substr(6));  // append_request sends a LOOKUP the same way
    }
  }
}

TEST(ProtocolCodec, ABatchBuiltInPlaceIsTheArrayMsgpackPacks) {
  BatchFrame frame;
  for (size_t count : {size_t{1}, size_t{15}, size_t{16}, size_t{65535}, size_t{65536}}) {
    frame.clear();
    append_reply(frame.bytes, Reply{.id = count});
    append_lookup_reply(frame.bytes, count + 1, 2, true, 3);
    EXPECT_EQ(frame.body_size(), frame.body().size());
    msgpack::sbuffer header;  // the array header as msgpack-c packs it
    msgpack::packer<msgpack::sbuffer>(header).pack_array(static_cast<uint32_t>(count));
    const std::string expected =
        std::string(header.data(), header.size()) + std::string(frame.body());
    EXPECT_EQ(frame.batch(count), expected) << count;
    EXPECT_EQ(encode_batch(count, frame.body()), expected) << count;
    EXPECT_TRUE(frame.body().starts_with(encode_reply(Reply{.id = count})));
  }
}

TEST(ProtocolCodec, ReplyFieldsKeepOneValuePerNameInTheOrderAdded) {
  ReplyFields f = {{"b", 1}, {"a", 2}, {"b", 3}};
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f.begin()->first, "b");
  EXPECT_EQ(f.find("b")->second, 3u);
  f["c"] = 4;
  EXPECT_TRUE(f.contains("c"));
  EXPECT_EQ(f.find("zz"), f.end());
  EXPECT_EQ(f, ReplyFields({{"c", 4}, {"a", 2}, {"b", 3}}));  // equal as maps
  Reply r;
  r.fields = f;
  EXPECT_EQ(r.field("a"), 2u);
  EXPECT_EQ(r.field("zz", 9), 9u);
}

TEST(ProtocolCodec, BatchRoundTripKeepsEachElementsOwnResult) {
  std::string body;
  append_request(body, store_request());
  append_request(body, Request{.id = 7, .op = Op::kPing});
  body += "\x81\xa2id\x09";  // {"id": 9}: no v, no op
  const std::string batch = encode_batch(3, body);
  ASSERT_TRUE(is_batch_frame(as_bytes(batch)));
  EXPECT_FALSE(is_batch_frame(as_bytes(encode_request(store_request()))));
  std::vector<BatchItem> items;
  ASSERT_TRUE(decode_batch(as_bytes(batch), DecodeLimits{},
                           [&](BatchItem item) { items.push_back(std::move(item)); }));
  ASSERT_EQ(items.size(), 3u);
  ASSERT_TRUE(items[0].request);
  EXPECT_EQ(items[0].request->keys, store_request().keys);
  ASSERT_TRUE(items[1].request);
  EXPECT_EQ(items[1].request->op, Op::kPing);
  EXPECT_EQ(items[1].id, 7u);
  EXPECT_EQ(error_code(items[2].request), codes::kMalformed);
  EXPECT_EQ(items[2].id, 9u);  // echoed though the element is bad
}

TEST(ProtocolCodec, F11_BadBatchFramesAreOneErrorAndNoElement) {
  const auto code_of = [](const std::string& frame, size_t max_bytes = 1 << 20) {
    size_t calls = 0;
    Status st = decode_batch(as_bytes(frame), DecodeLimits{.max_frame_bytes = max_bytes},
                             [&](BatchItem) { ++calls; });
    EXPECT_EQ(calls, 0u);
    return st ? std::string("ok") : split_decode_error(st.error()).first;
  };
  EXPECT_EQ(code_of("\x90"), codes::kMalformed);  // empty
  EXPECT_EQ(
      code_of(encode_batch(kMaxBatchRequests + 1, std::string(kMaxBatchRequests + 1, '\xc0'))),
      codes::kMalformed);                                 // too many
  EXPECT_EQ(code_of("\x92\xc0"), codes::kMalformed);      // truncated
  EXPECT_EQ(code_of("\x91\xc0\xc0"), codes::kMalformed);  // trailing bytes
  EXPECT_EQ(code_of(encode_batch(1, std::string(100, '\xc0')), 50), codes::kTooLarge);
}

TEST(ProtocolCodec, RepliesDecodeFromOneReplyOrABatchOfThem) {
  Reply a;
  a.id = 1;
  a.fields = {{"hits", 2}};
  const Reply b = Reply::error(2, codes::kNotFound, "gone");
  auto one = decode_replies(as_bytes(encode_reply(a)));
  ASSERT_TRUE(one);
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(one->front().field("hits"), 2u);
  std::string body;
  append_reply(body, a);
  append_reply(body, b);
  auto two = decode_replies(as_bytes(encode_batch(2, body)));
  ASSERT_TRUE(two);
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].code, codes::kNotFound);
  EXPECT_FALSE(decode_replies(as_bytes(encode_batch(2, body + "\xc0"))));  // not a reply
}

}  // namespace
}  // namespace kvtier::server
