// Hostile clients against a real kvtierd process: nothing a client does to the memory it
// registered, or puts in a request, may crash the server or keep it from serving others (F11:
// every request still gets exactly one decodable reply).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <limits>
#include <msgpack.hpp>

#include "kvtierd_process.h"
#include "raw_peer.h"
#include "server_test_util.h"
#include "shared_kv_region.h"

namespace kvtier::testing {
namespace {

using server::CacheClient;
using server::Op;
using server::Request;

// Whether `s` is well-formed UTF-8 (RFC 3629), checked independently of the server's code.
bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// A request map with its fields in the given order, values as given (for frames with a field
// of the wrong type, in an order no client library would choose).
template <class... Fields>
std::string frame_of(const Fields&... fields) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(sizeof...(Fields));
  (fields(pk), ...);
  return std::string(buf.data(), buf.size());
}
template <class T>
auto field(std::string key, T value) {
  return [key, value](msgpack::packer<msgpack::sbuffer>& pk) { pk.pack(key), pk.pack(value); };
}

class KvtierdHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<KvtierdProcess>(endpoint_, fast_server_settings());
  }

  std::unique_ptr<CacheClient> connect(SharedKvRegion& region) {
    auto client = std::make_unique<CacheClient>(fast_client(endpoint_), region.registration());
    EXPECT_TRUE(client->wait_until_ok(5s)) << client->health().reason;
    return client;
  }
  uint64_t stat(CacheClient& client, const std::string& name) {
    auto reply = client.stats().get();
    return reply ? reply->field(name, ~0ull) : ~0ull;
  }
  // A well-behaved client still gets a byte-exact round trip, and the server process lives.
  void expect_others_served(uint64_t first_key) {
    ASSERT_FALSE(server_->wait_exit(0ms)) << "kvtierd died";
    SharedKvRegion region;
    auto client = connect(region);
    region.fill_block(0, first_key);
    region.fill_block(1, first_key);
    region.fill_block(2, first_key);
    region.fill_block(3, first_key);
    const auto keys = test_keys(first_key, 1);
    TransferResult stored = client->store(1, 0, keys, consecutive_blocks(0, 1, 4)).get();
    ASSERT_EQ(stored.outcome, Outcome::kCompleted) << stored.error;
    TransferResult loaded = client->retrieve(2, 0, keys, consecutive_blocks(4, 1, 4)).get();
    ASSERT_EQ(loaded.outcome, Outcome::kCompleted) << loaded.error;
    for (uint32_t b = 0; b < 4; ++b) EXPECT_EQ(region.block_bytes(4 + b), region.block_bytes(b));
    EXPECT_EQ(stat(*client, "cache_audit_ok"), 1u);
  }

  std::string endpoint_ = unique_endpoint();
  std::unique_ptr<KvtierdProcess> server_;
};

// The SIGBUS crash: a client registers memory it can still shrink, truncates it, then asks for
// copies. kvtierd must refuse such memory at REGISTER (unsealed_memory), so no copy can ever
// touch a page past the end of the file; the STORE and RETRIEVE that follow are answered
// (not_registered), and everyone else is served.
TEST_F(KvtierdHostileTest, F11_ClientThatTruncatesItsMemoryCannotCrashTheServer) {
  uint64_t next_key = 1000;
  for (Backing backing : {Backing::kPosixShm, Backing::kUnsealedMemfd}) {
    SCOPED_TRACE(backing == Backing::kPosixShm ? "POSIX shm object" : "memfd without seals");
    SharedKvRegion region(32, backing);
    RawPeer raw(endpoint_);
    auto registered = raw.call(Request{.id = 1,
                                       .op = Op::kRegister,
                                       .layout = region.layout(),
                                       .memory = region.registration().memory});
    ASSERT_TRUE(registered) << "no reply to REGISTER";
    EXPECT_FALSE(registered->ok);
    EXPECT_EQ(registered->code, server::codes::kUnsealedMemory) << registered->message;
    EXPECT_EQ(registered->id, 1u);
    ASSERT_EQ(region.truncate(0), 0) << "an unsealed object can shrink";
    const auto keys = test_keys(next_key, 2);
    for (Op op : {Op::kStore, Op::kRetrieve}) {
      auto reply =
          raw.call(Request{.id = 2, .op = op, .keys = keys, .blocks = consecutive_blocks(0, 2, 4)});
      ASSERT_TRUE(reply) << "no reply to " << server::to_string(op) << ": did kvtierd die?";
      EXPECT_FALSE(reply->ok);
      EXPECT_EQ(reply->code, server::codes::kNotRegistered) << reply->message;
      EXPECT_FALSE(raw.receive(0ms)) << "exactly one reply";
    }
    expect_others_served(next_key += 10);
  }
}

// Sealed memory (what clients must register) can never shrink under the server: the kernel
// refuses the truncate, and the client keeps being served.
TEST_F(KvtierdHostileTest, F11_SealedClientMemoryCannotBeShrunk) {
  SharedKvRegion region;
  auto client = connect(region);
  errno = 0;
  EXPECT_EQ(region.truncate(0), -1);
  EXPECT_EQ(errno, EPERM);
  region.fill_block(0, 7);
  const auto keys = test_keys(1, 1);
  EXPECT_EQ(client->store(1, 0, keys, consecutive_blocks(0, 1, 4)).get().outcome,
            Outcome::kCompleted);
  EXPECT_EQ(client->retrieve(2, 0, keys, consecutive_blocks(8, 1, 4)).get().outcome,
            Outcome::kCompleted);
  EXPECT_EQ(region.block_bytes(8), region.block_bytes(0));
  expect_others_served(2000);
}

// A layout whose chunk byte size overflows 64 bits used to wrap to a small size and pass every
// check sized by it; it is refused at REGISTER, with one reply.
TEST_F(KvtierdHostileTest, F11_LayoutWhoseByteSizeOverflowsIsRefused) {
  SharedKvRegion region;
  server::Registration reg = region.registration();
  // 2 * 2^16 * 2^16 * 2^16 * 2^16 = 2^65: wraps to 0 in 64 bits.
  reg.layout.groups = {KvGroup{.layers = 1,
                               .kv_heads = 1u << 16,
                               .head_dim = 1u << 16,
                               .dtype_bytes = 1u << 16,
                               .block_size = 1u << 16,
                               .blocks_per_chunk = 1}};
  reg.memory.groups[0].offsets.resize(1);
  RawPeer raw(endpoint_);
  auto reply =
      raw.call(Request{.id = 5, .op = Op::kRegister, .layout = reg.layout, .memory = reg.memory});
  ASSERT_TRUE(reply);
  EXPECT_FALSE(reply->ok);
  EXPECT_EQ(reply->code, server::codes::kInvalidArgument);
  EXPECT_NE(reply->message.find("overflows"), std::string::npos) << reply->message;
  EXPECT_EQ(reply->id, 5u);
  EXPECT_FALSE(raw.receive(0ms)) << "exactly one reply";
  expect_others_served(3000);
}

// lock_ms is a uint64 of milliseconds: the largest one is capped at server.lock_ttl_s, never
// wrapped into a lock that expired before it was taken.
TEST_F(KvtierdHostileTest, F11_HugeLockTtlIsCappedNotWrapped) {
  SharedKvRegion region;
  auto client = connect(region);
  const auto keys = test_keys(1, 1);
  ASSERT_EQ(client->store(1, 0, keys, consecutive_blocks(0, 1, 4)).get().outcome,
            Outcome::kCompleted);
  auto found = client
                   ->call(Request{.op = Op::kLookup,
                                  .keys = keys,
                                  .lock_ms = std::numeric_limits<uint64_t>::max()},
                          2s)
                   .get();
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->field("hits", 0), 1u);
  const uint64_t lock = found->field("lock", 0);
  ASSERT_NE(lock, 0u);
  EXPECT_EQ(stat(*client, "locks"), 1u);  // still held after the service's expiry sweep
  auto released = client->call(Request{.op = Op::kRelease, .lock = lock}, 2s).get();
  EXPECT_TRUE(released) << released.error().message;
  EXPECT_EQ(stat(*client, "locks"), 0u);
}

// Error replies are valid MessagePack with valid UTF-8 strings, also when the message quotes
// invalid UTF-8 the client sent, and echo the request id even when a field before it is bad.
TEST_F(KvtierdHostileTest, F11_ErrorRepliesAreValidUtf8AndEchoTheId) {
  RawPeer raw(endpoint_);
  const std::string bad_utf8 = "\xc3(\xff\xfe\xed\xa0\x80";  // a cut é, bytes never valid
  const struct {
    std::string frame;
    uint64_t id;
    std::string_view code;
  } cases[] = {
      {frame_of(field("v", 1), field("id", 11), field("op", bad_utf8)), 11,
       server::codes::kUnknownOp},
      {frame_of(field("op", 5), field("v", 1), field("id", 12)), 12, server::codes::kMalformed},
      {frame_of(field("v", "1"), field("op", "PING"), field("id", 13)), 13,
       server::codes::kMalformed},
      {frame_of(field("hook", bad_utf8), field("v", 1), field("op", "PING"), field("id", 14)), 14,
       server::codes::kInvalidArgument},
      {frame_of(field("v", 1), field("op", "LOOKUP"), field("keys", 3), field("id", 15)), 15,
       server::codes::kMalformed},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.id);
    raw.send({c.frame});
    auto reply = raw.receive();  // decodes as MessagePack, or fails the test
    ASSERT_TRUE(reply);
    EXPECT_FALSE(reply->ok);
    EXPECT_EQ(reply->code, c.code) << reply->message;
    EXPECT_EQ(reply->id, c.id) << reply->message;
    EXPECT_TRUE(valid_utf8(reply->message)) << reply->message;
    EXPECT_LE(reply->message.size(), server::kMaxErrorMessage);
    EXPECT_FALSE(raw.receive(0ms)) << "exactly one reply";
  }
  expect_others_served(4000);
}

}  // namespace
}  // namespace kvtier::testing
