// RedisTier against a real redis-server that the test starts on a free loopback port.
#include "kvtier/tier/redis_tier.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "kvtier/tier/chunk_record.h"
#include "kvtier/tier/health_checked_tier.h"
#include "redis/redis_key_slot.h"
#include "redis_process.h"
#include "redis_test_util.h"
#include "support/kv_event_mirror.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using bench::RedisServerProcess;
using tier_test::all;
using tier_test::chunk;
using tier_test::get_range;
using tier_test::GetOutcome;
using tier_test::kChunk;
using tier_test::key;
using tier_test::keys;
using tier_test::put_range;

constexpr Duration kRedisTimeout = 2s;
constexpr Duration kReady = 10s;

const KeyNamespace kNamespace{.model = "tiny-llama@1", .layout_fingerprint = 0x1234abcd};

std::unique_ptr<RedisTier> open_tier(const std::string& url, const KeyNamespace& ns = kNamespace,
                                     uint32_t pool_size = 4) {
  Result<std::unique_ptr<RedisTier>> tier =
      RedisTier::open({.url = url, .key_prefix = redis_key_prefix(ns), .pool_size = pool_size});
  EXPECT_TRUE(tier) << tier.error().to_string();
  return tier ? std::move(*tier) : nullptr;
}

// One server for the suite, emptied before each test. Tests that kill or stop a server start
// their own.
class RedisTierTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    Result<std::unique_ptr<RedisServerProcess>> s =
        RedisServerProcess::start({.directory = dir_->path()}, kReady);
    ASSERT_TRUE(s) << s.error().to_string();
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(server_->command({"FLUSHALL"}, kRedisTimeout));
  }
  static inline testing::TempDir* dir_ = nullptr;
  static inline RedisServerProcess* server_ = nullptr;
};

TEST_F(RedisTierTest, RoundTripsAPipelinedBatch) {
  auto tier = open_tier(server_->url());
  ASSERT_EQ(put_range(*tier, 0, 64, kRedisTimeout).value(), all(ChunkStatus::kOk, 64));
  GetOutcome g = get_range(*tier, 0, 64, kRedisTimeout);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, 64));
  EXPECT_TRUE(g.ok_chunks_intact);
  EXPECT_FALSE(tier->cluster_mode());
  const TierCounters c = tier->counters();
  EXPECT_EQ(c.hits, 64u);
  EXPECT_EQ(c.bytes_read, 64 * kChunk);
  EXPECT_EQ(c.bytes_written, 64 * kChunk);
  EXPECT_EQ(server_->command({"DBSIZE"}, kRedisTimeout).value(), "64");
}

TEST_F(RedisTierTest, RoundTripsChunksOfAnySizeStraightIntoTheirBuffers) {
  // Values read across many socket reads, and sizes that end anywhere in a read.
  auto tier = open_tier(server_->url());
  const std::vector<size_t> sizes = {0, 1, 4095, (1 << 20) + 3, 3 << 20, 17};
  std::vector<ChunkKey> ks = keys(100, sizes.size());
  std::vector<std::vector<std::byte>> chunks;
  for (size_t i = 0; i < sizes.size(); ++i) chunks.push_back(chunk(100 + i, sizes[i]));
  const std::vector<std::span<const std::byte>> in(chunks.begin(), chunks.end());
  ASSERT_EQ(*tier->put(ks, in, kRedisTimeout), all(ChunkStatus::kOk, sizes.size()));
  std::vector<std::vector<std::byte>> back;
  for (size_t size : sizes) back.emplace_back(size, std::byte{0x5a});
  const std::vector<std::span<std::byte>> out(back.begin(), back.end());
  ASSERT_EQ(*tier->get(ks, out, kRedisTimeout), all(ChunkStatus::kOk, sizes.size()));
  EXPECT_EQ(back, chunks);
  // A destination of another size than the record's: kCorrupt, never a partial copy served.
  // The record (3 MiB) is read aside, and the next reply on the connection is read whole.
  std::vector<std::byte> wrong(4096);
  const std::vector<std::span<std::byte>> wrong_then_right = {std::span<std::byte>(wrong), out[5]};
  const std::vector<ChunkKey> big_then_small = {ks[4], ks[5]};
  std::ranges::fill(back[5], std::byte{0});
  EXPECT_EQ(tier->get(big_then_small, wrong_then_right, kRedisTimeout).value(),
            (std::vector<ChunkStatus>{ChunkStatus::kCorrupt, ChunkStatus::kOk}));
  EXPECT_EQ(back[5], chunks[5]);
}

TEST_F(RedisTierTest, LargeChunksWhoseChecksumsAHelperComputesAheadGoOutWithTheirOwnHeaders) {
  // Chunks of 2 MiB: larger than half of any L2 cache of today, so a helper computes their
  // checksums ahead of the send while the calling thread sends (and computes those the helper
  // has not reached). Every record must carry its own chunk's header: a header sent before it
  // was complete, or another chunk's, reads back as kCorrupt.
  auto tier = open_tier(server_->url());
  constexpr size_t kLarge = 2 << 20;
  constexpr uint64_t kCount = 12;
  std::vector<ChunkKey> ks = keys(300, kCount);
  std::vector<std::vector<std::byte>> chunks;
  for (uint64_t i = 0; i < kCount; ++i) chunks.push_back(chunk(300 + i, kLarge));
  const std::vector<std::span<const std::byte>> in(chunks.begin(), chunks.end());
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(*tier->put(ks, in, kRedisTimeout), all(ChunkStatus::kOk, kCount));
    std::vector<std::vector<std::byte>> back(kCount, std::vector<std::byte>(kLarge));
    const std::vector<std::span<std::byte>> out(back.begin(), back.end());
    ASSERT_EQ(*tier->get(ks, out, kRedisTimeout), all(ChunkStatus::kOk, kCount)) << round;
    EXPECT_EQ(back, chunks) << round;
  }
}

TEST_F(RedisTierTest, MissAndContains) {
  auto tier = open_tier(server_->url());
  ASSERT_TRUE(put_range(*tier, 0, 2, kRedisTimeout));
  EXPECT_EQ(*tier->contains(keys(0, 3), kRedisTimeout), (std::vector<bool>{true, true, false}));
  GetOutcome g = get_range(*tier, 1, 2, kRedisTimeout);
  EXPECT_EQ(*g.statuses, (std::vector{ChunkStatus::kOk, ChunkStatus::kMiss}));
  EXPECT_EQ(tier->counters().misses, 1u);
}

TEST_F(RedisTierTest, KeysAreNamespacedByModelAndLayout) {
  auto tier = open_tier(server_->url());
  ASSERT_TRUE(put_range(*tier, 0, 3, kRedisTimeout));
  EXPECT_EQ(redis_key_prefix(kNamespace), "kvtier:tiny-llama@1:000000001234abcd:");
  EXPECT_EQ(server_->command({"EXISTS", tier->redis_key(key(0))}, kRedisTimeout).value(), "1");
  auto other_layout = open_tier(server_->url(), {.model = "tiny-llama@1", .layout_fingerprint = 7});
  auto other_model =
      open_tier(server_->url(), {.model = "other", .layout_fingerprint = 0x1234abcd});
  EXPECT_EQ(*other_layout->contains(keys(0, 3), kRedisTimeout), std::vector<bool>(3, false));
  EXPECT_EQ(*get_range(*other_model, 0, 3, kRedisTimeout).statuses, all(ChunkStatus::kMiss, 3));
  // A model name never becomes a cluster hash tag.
  EXPECT_EQ(redis_key_prefix({.model = "m{x}", .layout_fingerprint = 1}),
            "kvtier:m_x_:0000000000000001:");
}

TEST_F(RedisTierTest, FlippedOrTruncatedValueIsAMissNeverServed) {
  auto tier = open_tier(server_->url());
  ASSERT_TRUE(put_range(*tier, 0, 3, kRedisTimeout));
  // Byte 100 of key 0's payload flipped in place; key 1 truncated; key 2 holds key 0's record.
  const std::string k0 = tier->redis_key(key(0));
  const std::string offset = std::to_string(kChunkRecordHeaderBytes + 100);
  const std::string original =
      server_->command({"GETRANGE", k0, offset, offset}, kRedisTimeout).value();
  ASSERT_EQ(original.size(), 1u);
  const std::string flipped(1, static_cast<char>(original[0] ^ 0x01));
  ASSERT_TRUE(server_->command({"SETRANGE", k0, offset, flipped}, kRedisTimeout));
  ASSERT_TRUE(server_->command({"SET", tier->redis_key(key(1)), "short"}, kRedisTimeout));
  ASSERT_TRUE(put_range(*tier, 3, 1, kRedisTimeout));  // key 3 intact, copied over key 2 below
  const std::string k3_record =
      server_->command({"GET", tier->redis_key(key(3))}, kRedisTimeout).value();
  ASSERT_TRUE(server_->command({"SET", tier->redis_key(key(2)), k3_record}, kRedisTimeout));

  GetOutcome g = get_range(*tier, 0, 4, kRedisTimeout);
  ASSERT_TRUE(g.statuses);
  EXPECT_EQ(*g.statuses, (std::vector{ChunkStatus::kCorrupt, ChunkStatus::kCorrupt,
                                      ChunkStatus::kCorrupt, ChunkStatus::kOk}));
  EXPECT_TRUE(g.ok_chunks_intact);
  EXPECT_EQ(tier->counters().corrupt, 3u);
  EXPECT_EQ(tier->counters().hits, 1u);
}

TEST_F(RedisTierTest, EventsAnnounceAtMostTheNewestChunksAndWithdrawWhatAGetFindsMissing) {
  testing::TempDir dir;
  const std::string endpoint = "ipc://" + (dir.path() / "events").string();
  KvEventPublisher pub{{.endpoints = {endpoint}}};
  KvEventSubscriber sub{{.endpoint = endpoint}};
  testing::KvEventMirror mirror;
  ASSERT_TRUE(testing::connected(pub, sub, mirror));
  Result<std::unique_ptr<RedisTier>> tier =
      RedisTier::open({.url = server_->url(),
                       .key_prefix = redis_key_prefix(kNamespace),
                       .max_announced_chunks = 4});
  ASSERT_TRUE(tier) << tier.error().to_string();
  (*tier)->publish_events(&pub, 16);
  ASSERT_EQ(*put_range(**tier, 0, 6, kRedisTimeout), all(ChunkStatus::kOk, 6));
  ASSERT_EQ(*put_range(**tier, 2, 1, kRedisTimeout), all(ChunkStatus::kOk, 1));  // newest again
  ASSERT_EQ(*put_range(**tier, 6, 1, kRedisTimeout), all(ChunkStatus::kOk, 1));
  ASSERT_TRUE(mirror.caught_up(pub, sub));
  EXPECT_EQ(mirror.on("redis"), (std::set<ChunkKey>{key(2), key(4), key(5), key(6)}));
  // Redis drops one on its own; the get that finds it missing withdraws it.
  ASSERT_TRUE(server_->command({"DEL", (*tier)->redis_key(key(5))}, kRedisTimeout));
  GetOutcome g = get_range(**tier, 4, 3, kRedisTimeout);
  ASSERT_TRUE(g.statuses);
  EXPECT_EQ(*g.statuses, (std::vector{ChunkStatus::kOk, ChunkStatus::kMiss, ChunkStatus::kOk}));
  ASSERT_TRUE(mirror.caught_up(pub, sub));
  EXPECT_EQ(mirror.on("redis"), (std::set<ChunkKey>{key(2), key(4), key(6)}));
}

TEST_F(RedisTierTest, PoolServesConcurrentCallersWithinItsSize) {
  auto tier = open_tier(server_->url(), kNamespace, /*pool_size=*/3);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint64_t t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t round = 0; round < 10; ++round) {
        const uint64_t first = t * 1000 + round * 4;
        Result<std::vector<ChunkStatus>> put = put_range(*tier, first, 4, kRedisTimeout);
        GetOutcome g = get_range(*tier, first, 4, kRedisTimeout);
        if (!put || *put != all(ChunkStatus::kOk, 4) || !g.statuses ||
            *g.statuses != all(ChunkStatus::kOk, 4) || !g.ok_chunks_intact) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  // The tier's connections, plus the one that asks.
  const std::string info = server_->command({"INFO", "clients"}, kRedisTimeout).value();
  const size_t at = info.find("connected_clients:");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LE(std::stoi(info.substr(at + 18)), 3 + 1) << info;
}

TEST(RedisTier, ALargeCallIsSpreadOverThePoolAndEveryReplyFindsItsChunk) {
  // A server of its own: the connections it counts are this test's alone.
  testing::TempDir dir;
  Result<std::unique_ptr<RedisServerProcess>> server =
      RedisServerProcess::start({.directory = dir.path()}, kReady);
  ASSERT_TRUE(server) << server.error().to_string();
  auto tier = open_tier((*server)->url(), kNamespace, /*pool_size=*/4);
  constexpr size_t kLarge = 256 << 10;  // 32 of them: 8 MiB, spread over the 4 connections
  constexpr uint64_t kCount = 32;
  std::vector<std::vector<std::byte>> chunks;
  for (uint64_t i = 0; i < kCount; ++i) chunks.push_back(chunk(i, kLarge));
  // Every other chunk is stored, so that a reply matched to the wrong command shows.
  std::vector<ChunkKey> even;
  std::vector<std::span<const std::byte>> even_chunks;
  for (uint64_t i = 0; i < kCount; i += 2) {
    even.push_back(key(i));
    even_chunks.emplace_back(chunks[i]);
  }
  ASSERT_EQ(tier->put(even, even_chunks, kRedisTimeout).value(), all(ChunkStatus::kOk, kCount / 2));
  std::vector<std::vector<std::byte>> out(kCount, std::vector<std::byte>(kLarge));
  std::vector<std::span<std::byte>> spans(out.begin(), out.end());
  Result<std::vector<ChunkStatus>> got = tier->get(keys(0, kCount), spans, kRedisTimeout);
  ASSERT_TRUE(got) << got.error().to_string();
  for (uint64_t i = 0; i < kCount; ++i) {
    if (i % 2 == 0) {
      EXPECT_EQ((*got)[i], ChunkStatus::kOk) << i;
      EXPECT_EQ(out[i], chunks[i]) << i;
    } else {
      EXPECT_EQ((*got)[i], ChunkStatus::kMiss) << i;
    }
  }
  // The tier's four connections, plus the one that asks.
  const std::string info = (*server)->command({"INFO", "clients"}, kRedisTimeout).value();
  const size_t at = info.find("connected_clients:");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(std::stoi(info.substr(at + 18)), 4 + 1) << info;
}

// The chaos bench counts a cache server's death as a crash unless the bench killed it.
TEST(RedisServerProcess, CrashedNamesADeathItsOwnerDidNotCause) {
  testing::TempDir dir;
  auto server = RedisServerProcess::start({.directory = dir.path()}, kReady);
  ASSERT_TRUE(server) << server.error().to_string();
  EXPECT_EQ((*server)->crashed(), std::nullopt);
  ASSERT_EQ(::kill((*server)->pid(), SIGSEGV), 0);
  while ((*server)->running()) std::this_thread::sleep_for(10ms);  // until it is reaped
  EXPECT_EQ((*server)->crashed(),
            std::optional<std::string>("killed by signal 11 (Segmentation fault)"));
  ASSERT_TRUE((*server)->restart(kReady));
  EXPECT_EQ((*server)->crashed(), std::nullopt);
  (*server)->kill();
  EXPECT_FALSE((*server)->running());
  EXPECT_EQ((*server)->crashed(), std::nullopt) << "killed by its owner";
}

TEST(RedisTier, ChunksRedisEvictsAreMissesNotErrors) {
  testing::TempDir dir;
  auto server = RedisServerProcess::start(
      {.directory = dir.path(),
       .extra_args = {"--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"}},
      kReady);
  ASSERT_TRUE(server) << server.error().to_string();
  HealthCheckedTier tier(open_tier((*server)->url()), {});
  for (uint64_t first = 0; first < 1024; first += 64) {  // 16 MiB through a 4 MiB server
    ASSERT_EQ(*put_range(tier, first, 64, kRedisTimeout), all(ChunkStatus::kOk, 64));
  }
  GetOutcome g = get_range(tier, 0, 1024, kRedisTimeout);
  ASSERT_TRUE(g.statuses) << g.statuses.error().to_string();
  EXPECT_GT(std::ranges::count(*g.statuses, ChunkStatus::kMiss), 512);  // the oldest went
  EXPECT_GT(std::ranges::count(*g.statuses, ChunkStatus::kOk), 0);      // the newest stayed
  EXPECT_EQ(std::ranges::count(*g.statuses, ChunkStatus::kError), 0);
  EXPECT_TRUE(g.ok_chunks_intact);
  EXPECT_EQ(tier.state(), TierState::kUp);
}

// A TCP socket listening on a loopback port of its own, with `backlog`; its address in `addr`.
int listen_on_loopback(int backlog, sockaddr_in& addr) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  addr = sockaddr_in{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  EXPECT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(::listen(listener, backlog), 0);
  EXPECT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  return listener;
}

// A stand-in for a server on a loopback port, for what no real redis-server sends on demand:
// it reads each command whole, then sends a scripted reply ("{port}": its own) one byte per
// send().
class ScriptedServer {
 public:
  explicit ScriptedServer(std::vector<std::string> replies) : replies_(std::move(replies)) {
    sockaddr_in addr{};
    listener_ = listen_on_loopback(1, addr);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedServer() {
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  void serve() {
    const int fd = ::accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string in;
    for (std::string reply : replies_) {
      if (const size_t at = reply.find("{port}"); at != std::string::npos) {
        reply.replace(at, 6, std::to_string(port_));
      }
      // A command of n arguments is "*n\r\n" and two lines per argument.
      for (;;) {
        const size_t lines = count_lines(in);
        if (lines > 0 && lines >= 1 + 2 * std::stoul(in.substr(1))) break;
        char buffer[4096];
        const ssize_t got = ::read(fd, buffer, sizeof buffer);
        if (got <= 0) {
          ::close(fd);
          return;
        }
        in.append(buffer, static_cast<size_t>(got));
      }
      in.clear();
      for (char c : reply) {
        if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
      }
    }
    char buffer[64];
    while (::read(fd, buffer, sizeof buffer) > 0) {
    }
    ::close(fd);
  }
  static size_t count_lines(const std::string& text) {
    size_t lines = 0;
    for (size_t at = text.find("\r\n"); at != std::string::npos; at = text.find("\r\n", at + 2)) {
      ++lines;
    }
    return lines;
  }

  std::vector<std::string> replies_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(RedisTier, ReadsRepliesThatArriveByteByByte) {
  const std::vector<std::byte> payload = chunk(7, 3000);
  const std::vector<std::byte> record = encode_chunk_record(key(7), payload);
  const std::string value(reinterpret_cast<const char*>(record.data()), record.size());
  ScriptedServer server({"-ERR This instance has cluster support disabled\r\n",
                         "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n", "$-1\r\n",
                         ":1\r\n", "+OK\r\n"});
  auto tier = open_tier(server.url(), kNamespace, /*pool_size=*/1);
  std::vector<std::byte> back(payload.size());
  const std::span<std::byte> dst(back);
  const ChunkKey k = key(7);
  EXPECT_EQ(*tier->get(std::span(&k, 1), std::span(&dst, 1), kRedisTimeout),
            all(ChunkStatus::kOk, 1));
  EXPECT_EQ(back, payload);
  EXPECT_EQ(*tier->get(std::span(&k, 1), std::span(&dst, 1), kRedisTimeout),
            all(ChunkStatus::kMiss, 1));
  EXPECT_EQ(*tier->contains(std::span(&k, 1), kRedisTimeout), std::vector<bool>{true});
  const std::span<const std::byte> in(payload);
  EXPECT_EQ(*tier->put(std::span(&k, 1), std::span(&in, 1), kRedisTimeout),
            all(ChunkStatus::kOk, 1));
}

TEST(RedisTier, GarbledRepliesFailTheCallWithAClearError) {
  for (const std::string garbled : {"$5\r\nabcdeXY", "%3\r\n", "$1x\r\n", "*1\r\n?\r\n"}) {
    ScriptedServer server({"-ERR This instance has cluster support disabled\r\n", garbled});
    auto tier = open_tier(server.url(), kNamespace, /*pool_size=*/1);
    std::vector<std::byte> back(16);
    const std::span<std::byte> dst(back);
    const ChunkKey k = key(1);
    Result<std::vector<ChunkStatus>> r =
        tier->get(std::span(&k, 1), std::span(&dst, 1), kRedisTimeout);
    ASSERT_FALSE(r) << garbled;
    EXPECT_EQ(r.error().code, ErrorCode::kUnavailable) << garbled;
    EXPECT_NE(r.error().message.find("protocol error"), std::string::npos) << r.error().message;
  }
}

// The process's peak resident memory, in bytes.
size_t peak_rss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("VmHWM:")) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// A server that names a value of hundreds of MiB costs the client no memory for it: a value of
// another size than the record a GET reads is read aside in pieces, and any other reply over
// 64 MiB fails the connection before it is read.
TEST(RedisTier, AHugeValueTheServerNamesIsNeverHeldWhole) {
  const size_t before = peak_rss();
  {
    ScriptedServer server({"-ERR This instance has cluster support disabled\r\n",
                           "$400000000\r\nabc"});  // and then nothing
    auto tier = open_tier(server.url(), kNamespace, /*pool_size=*/1);
    std::vector<std::byte> back(4096);
    const std::span<std::byte> dst(back);
    const ChunkKey k = key(1);
    EXPECT_FALSE(tier->get(std::span(&k, 1), std::span(&dst, 1), 300ms));
  }
  {
    ScriptedServer server(
        {"-ERR This instance has cluster support disabled\r\n", "$300000000\r\nabc"});
    auto tier = open_tier(server.url(), kNamespace, /*pool_size=*/1);
    const ChunkKey k = key(1);
    Result<std::vector<bool>> held = tier->contains(std::span(&k, 1), kRedisTimeout);
    ASSERT_FALSE(held);
    EXPECT_NE(held.error().message.find("over 64 MiB"), std::string::npos) << held.error().message;
  }
  EXPECT_LT(peak_rss(), before + (size_t{64} << 20));
}

// Two masters, half the slots each: a, the seed, serves the slot map and then its key's record;
// b, at `b_port`, is whatever the test puts there. A GET of a key of each must give a's chunk
// and skip b's, with the tier DEGRADED and b alone down; its error names `b_error`.
void expect_only_the_second_master_down(int b_port, const std::string& b_error) {
  auto tier_key = [](uint64_t id) { return redis_key_prefix(kNamespace) + key(id).hex(); };
  uint64_t on_a = 0, on_b = 0;
  while (redis_key_slot(tier_key(on_a)) >= 8192) ++on_a;
  while (redis_key_slot(tier_key(on_b)) < 8192) ++on_b;
  const std::vector<std::byte> payload = chunk(on_a, 100);
  const std::vector<std::byte> record = encode_chunk_record(key(on_a), payload);
  const std::string value(reinterpret_cast<const char*>(record.data()), record.size());
  const std::string slots =
      "*2\r\n*3\r\n:0\r\n:8191\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n"
      "*3\r\n:8192\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" +
      std::to_string(b_port) + "\r\n";
  ScriptedServer a({slots, "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n"});
  HealthCheckedTier tier(open_tier(a.url(), kNamespace, /*pool_size=*/1), {});
  const std::vector<ChunkKey> ks = {key(on_a), key(on_b)};
  std::vector<std::byte> x(payload.size()), y(payload.size());
  const std::vector<std::span<std::byte>> dst = {x, y};
  Result<std::vector<ChunkStatus>> r = tier.get(ks, dst, kRedisTimeout);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(*r, (std::vector{ChunkStatus::kOk, ChunkStatus::kSkipped}));
  EXPECT_EQ(x, payload);
  EXPECT_EQ(tier.state(), TierState::kDegraded);
  const TierMetrics m = tier.metrics();
  ASSERT_EQ(m.down_parts.size(), 1u);
  EXPECT_EQ(m.down_parts[0].name, "127.0.0.1:" + std::to_string(b_port));
  EXPECT_NE(m.down_parts[0].error.find(b_error), std::string::npos) << m.down_parts[0].error;
}

// b answers with an error that is its state, not the key's: CLUSTERDOWN (a restarted node that
// has not rejoined yet), BUSY (a long script runs there), NOAUTH (it refuses this client).
TEST(RedisTier, H7_AClusterMasterAnsweringClusterDownIsDownNotAKeyError) {
  for (const std::string state :
       {"CLUSTERDOWN The cluster is down",
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "NOAUTH Authentication required."}) {
    SCOPED_TRACE(state);
    ScriptedServer b({"-" + state + "\r\n"});
    expect_only_the_second_master_down(b.port(), state.substr(0, state.find(' ')));
  }
}

// A seed node still loading its data when first asked for the slot map says nothing of whether
// it is in a cluster: the call fails, and the next one asks again (it used to be taken for a
// single server until a redirection came).
TEST(RedisTier, H7_ASeedLoadingItsDataIsAskedForTheSlotMapAgain) {
  const std::vector<std::byte> payload = chunk(7, 100);
  const std::vector<std::byte> record = encode_chunk_record(key(7), payload);
  const std::string value(reinterpret_cast<const char*>(record.data()), record.size());
  ScriptedServer a({"-LOADING Redis is loading the dataset in memory\r\n",
                    "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n",
                    "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n"});
  auto tier = open_tier(a.url(), kNamespace, /*pool_size=*/1);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> x(payload.size());
  const std::vector<std::span<std::byte>> dst = {x};
  Result<std::vector<ChunkStatus>> first = tier->get(std::vector{key(7)}, dst, kRedisTimeout);
  ASSERT_FALSE(first);
  EXPECT_NE(first.error().message.find("LOADING"), std::string::npos) << first.error().message;
  Result<std::vector<ChunkStatus>> second = tier->get(std::vector{key(7)}, dst, kRedisTimeout);
  ASSERT_TRUE(second) << second.error().to_string();
  EXPECT_TRUE(tier->cluster_mode());
  EXPECT_EQ(*second, std::vector{ChunkStatus::kOk});
  EXPECT_EQ(x, payload);
}

// A listening port whose connection attempts get no answer, as a master's host that lost power
// or is cut off: its accept queue is full (and never read), so new SYNs are dropped.
class BlackHole {
 public:
  BlackHole() {
    sockaddr_in addr{};
    listener_ = listen_on_loopback(0, addr);
    port_ = ntohs(addr.sin_port);
    for (int i = 0; i < 3; ++i) {  // fill the queue
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      static_cast<void>(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr));
      fillers_.push_back(fd);
    }
  }
  ~BlackHole() {
    for (int fd : fillers_) ::close(fd);
    ::close(listener_);
  }
  int port() const { return port_; }

 private:
  int listener_ = -1;
  int port_ = 0;
  std::vector<int> fillers_;
};

// H7: a master whose connection attempts get no answer is down and its keys are skipped, while
// the other master answers in the same call (it used to time out too, after the first took the
// whole call's time connecting, and be marked down with it: the whole tier down).
TEST(RedisTier, H7_AMasterThatNeverAnswersAConnectIsDownAloneNotTheWholeCluster) {
  BlackHole b;
  expect_only_the_second_master_down(b.port(), "connect");
}

TEST(RedisTier, UnreachableServerFailsTheCallNotTheOpen) {
  const int port = bench::free_loopback_port();
  auto tier = open_tier("redis://127.0.0.1:" + std::to_string(port));
  ASSERT_NE(tier, nullptr);
  Result<std::vector<bool>> r = tier->contains(keys(0, 1), 500ms);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable) << r.error().to_string();
  EXPECT_FALSE(tier->ping(500ms));
}

TEST(RedisTier, BadUrlIsRejected) {
  for (const char* url : {"redis://", "redis://host:0", "redis://host:99999", "redis://h:1/2",
                          "redis://user:pw@h:1", "h:port"}) {
    Result<std::unique_ptr<RedisTier>> tier = RedisTier::open({.url = url, .key_prefix = "p:"});
    ASSERT_FALSE(tier) << url;
    EXPECT_EQ(tier.error().code, ErrorCode::kInvalidArgument) << url;
  }
  EXPECT_FALSE(RedisTier::open({.url = "redis://h:1", .key_prefix = "p:", .pool_size = 0}));
}

TEST(RedisTier, TimeoutBoundsACallToAHungServer) {
  testing::TempDir dir;
  auto server = RedisServerProcess::start({.directory = dir.path()}, kReady);
  ASSERT_TRUE(server) << server.error().to_string();
  auto tier = open_tier((*server)->url());
  ASSERT_TRUE(put_range(*tier, 0, 1, kRedisTimeout));
  (*server)->pause();
  const auto t0 = std::chrono::steady_clock::now();
  GetOutcome g = get_range(*tier, 0, 1, 200ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  (*server)->resume();
  ASSERT_FALSE(g.statuses);
  EXPECT_EQ(g.statuses.error().code, ErrorCode::kDeadlineExceeded)
      << g.statuses.error().to_string();
  EXPECT_LT(took, 5s);  // returned: the call did not hang on the stopped server
  // The broken connection was dropped; a fresh one works.
  EXPECT_EQ(*get_range(*tier, 0, 1, kRedisTimeout).statuses, all(ChunkStatus::kOk, 1));
}

TEST(RedisTier, H7_KilledServerGoesDownAndRecoversAfterRestart) {
  testing::TempDir dir;
  auto server = RedisServerProcess::start({.directory = dir.path()}, kReady);
  ASSERT_TRUE(server) << server.error().to_string();
  ManualClock clock;
  HealthCheckedTier tier(
      open_tier((*server)->url()),
      {.probe_initial = 1s, .probe_max = 8s, .probe_timeout = 500ms, .clock = &clock});
  ASSERT_EQ(*put_range(tier, 0, 4, kRedisTimeout), all(ChunkStatus::kOk, 4));

  (*server)->kill();
  GetOutcome g = get_range(tier, 0, 4, kRedisTimeout);
  ASSERT_FALSE(g.statuses);
  EXPECT_EQ(tier.state(), TierState::kDown);
  EXPECT_FALSE(tier.contains(keys(0, 4), kRedisTimeout));  // skipped, not sent
  EXPECT_EQ(tier.counters().skipped_calls, 1u);
  clock.advance(1s);
  EXPECT_EQ(tier.probe_if_due(), TierState::kDown);  // still dead: backoff doubles

  ASSERT_TRUE((*server)->restart(kReady));
  EXPECT_EQ(tier.probe_if_due(), TierState::kDown);  // next probe not due yet
  clock.advance(2s);
  EXPECT_EQ(tier.probe_if_due(), TierState::kUp);
  // The restarted server lost its data (no persistence): misses, then a fresh round trip.
  EXPECT_EQ(*get_range(tier, 0, 4, kRedisTimeout).statuses, all(ChunkStatus::kMiss, 4));
  ASSERT_EQ(*put_range(tier, 0, 4, kRedisTimeout), all(ChunkStatus::kOk, 4));
  g = get_range(tier, 0, 4, kRedisTimeout);
  EXPECT_EQ(*g.statuses, all(ChunkStatus::kOk, 4));
  EXPECT_TRUE(g.ok_chunks_intact);
}

}  // namespace
}  // namespace kvtier
