// kvtierd's access control and tenants against a real server process (docs/operations.md):
// CURVE admits only listed keys, a tenant never reaches another's chunks, a sharing group
// shares, per-tenant quotas and pins hold under eviction pressure, pins expire.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <msgpack.hpp>

#include "curve_key_dir.h"
#include "kvtier/server/curve_keys.h"
#include "kvtierd_process.h"
#include "raw_peer.h"
#include "server_test_util.h"
#include "shared_kv_region.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;
using server::CacheClient;
using server::CurveKeyPair;

// Tenants: alice (at most 8 slots, 2 pins) and carol share the group "prompts"; bob keeps 16
// slots whatever others store and has one transfer in flight at most; dave has no slot quota,
// 3 pins and 2 read-locked keys; erin may have no transfer at all and 2 clients registered at
// once. mallory is nobody's.
class KvtierdTenantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server::curve_available()) GTEST_SKIP() << "libzmq without CURVE";
    server_keys_ = dir_.make("server");
    for (const char* name : {"alice", "bob", "carol", "dave", "erin", "mallory"})
      keys_[name] = dir_.make(name);
    const auto key = [&](const char* name) { return "[\"" + keys_[name].public_key + "\"]"; };
    tenants_file_ = dir_.write("tenants.yaml",
                               "tenants:\n"
                               "  alice: {keys: " +
                                   key("alice") +
                                   ", max_slots: 8, max_pins: 2}\n"
                                   "  bob: {keys: " +
                                   key("bob") +
                                   ", guaranteed_slots: 16, max_transfers: 1}\n"
                                   "  carol: {keys: " +
                                   key("carol") +
                                   "}\n"
                                   "  dave: {keys: " +
                                   key("dave") +
                                   ", max_pins: 3, max_locks: 2}\n"
                                   "  erin: {keys: " +
                                   key("erin") +
                                   ", max_transfers: 0, max_sessions: 2}\n"
                                   "sharing_groups:\n"
                                   "  prompts: [alice, carol]\n");
  }
  void start(std::vector<std::string> extra = {}) {
    std::vector<std::string> settings = fast_server_settings();  // 64 slots
    settings.push_back("server.tenants_file=" + tenants_file_.string());
    settings.push_back("server.curve_key_file=" + dir_.file("server.key").string());
    settings.insert(settings.end(), extra.begin(), extra.end());
    server_ = std::make_unique<KvtierdProcess>(unique_endpoint(), settings);
  }
  server::ClientOptions options_for(const std::string& name) {
    server::ClientOptions o = fast_client(server_->endpoint());
    o.curve_server_key = server_keys_.public_key;
    o.curve_keys = keys_.at(name);
    return o;
  }
  std::unique_ptr<CacheClient> connect(const std::string& name, SharedKvRegion& region) {
    auto client = std::make_unique<CacheClient>(options_for(name), region.registration());
    EXPECT_TRUE(client->wait_until_ok(5s)) << name << ": " << client->health().reason;
    return client;
  }
  static uint64_t stat(CacheClient& client, const std::string& name) {
    auto reply = client.stats().get();
    EXPECT_TRUE(reply) << reply.error().message;
    return reply ? reply->field(name, ~0ull) : ~0ull;
  }
  static size_t hits(CacheClient& client, const std::vector<ChunkKey>& keys) {
    auto found = client.lookup(keys).get();
    EXPECT_TRUE(found) << found.error().message;
    return found ? found->hits : ~size_t{0};
  }
  // Stores `keys` from blocks 0.. of `region` (8 chunks at most per call: 32 blocks).
  static TransferResult store(CacheClient& client, SharedKvRegion& region,
                              const std::vector<ChunkKey>& keys) {
    static JobId job = 1;
    return client
        .store(job++, 0, keys, consecutive_blocks(0, keys.size(), region.blocks_per_chunk()))
        .get();
  }
  // Stores `n` chunks of fresh keys from `first` on, 8 at a time.
  static void flood(CacheClient& client, SharedKvRegion& region, uint64_t first, size_t n) {
    for (size_t done = 0; done < n; done += 8) {
      const TransferResult r =
          store(client, region, test_keys(first + done, std::min<size_t>(8, n - done)));
      ASSERT_EQ(r.outcome, Outcome::kCompleted) << r.error;
    }
  }

  CurveKeyDir dir_;
  CurveKeyPair server_keys_;
  std::map<std::string, CurveKeyPair> keys_;
  fs::path tenants_file_;
  std::unique_ptr<KvtierdProcess> server_;
};

TEST_F(KvtierdTenantTest, AClientWithoutAListedKeyIsRefused) {
  start();
  SharedKvRegion region;
  // mallory has a key pair, but no tenant lists it; a plain client has no CURVE at all.
  CacheClient mallory(options_for("mallory"), region.registration());
  CacheClient plain(fast_client(server_->endpoint()), region.registration());
  server::ClientOptions wrong_server = options_for("alice");
  wrong_server.curve_server_key = keys_["bob"].public_key;  // not the server's key
  CacheClient impostor(wrong_server, region.registration());
  auto alice = connect("alice", region);
  EXPECT_TRUE(eventually([&] { return stat(*alice, "auth_refused") >= 1; }))
      << "the ZAP handler refused no one";
  EXPECT_FALSE(mallory.wait_until_ok(1s));
  EXPECT_FALSE(plain.wait_until_ok(100ms));
  EXPECT_FALSE(impostor.wait_until_ok(100ms));
  EXPECT_EQ(stat(*alice, "clients"), 1u);  // only alice ever registered
}

TEST_F(KvtierdTenantTest, ATenantNeverHitsOrLoadsAnotherTenantsChunks) {
  start();
  SharedKvRegion a_region, b_region;
  auto alice = connect("alice", a_region);
  auto bob = connect("bob", b_region);
  const auto keys = test_keys(10, 4);
  for (uint32_t b = 0; b < 16; ++b) a_region.fill_block(b, 500 + b);
  ASSERT_EQ(store(*alice, a_region, keys).outcome, Outcome::kCompleted);
  EXPECT_EQ(hits(*alice, keys), 4u);
  EXPECT_EQ(hits(*bob, keys), 0u);  // the same client keys, another namespace
  const TransferResult stolen = bob->retrieve(1, 0, keys, consecutive_blocks(16, 4, 4)).get();
  EXPECT_EQ(stolen.outcome, Outcome::kFailed);
  EXPECT_NE(stolen.error.find("not_found"), std::string::npos) << stolen.error;
  // bob storing the same keys stores his own chunks: alice still loads hers.
  for (uint32_t b = 0; b < 16; ++b) b_region.fill_block(b, 900 + b);
  ASSERT_EQ(store(*bob, b_region, keys).outcome, Outcome::kCompleted);
  const TransferResult mine = alice->retrieve(2, 0, keys, consecutive_blocks(16, 4, 4)).get();
  ASSERT_EQ(mine.outcome, Outcome::kCompleted) << mine.error;
  for (uint32_t b = 0; b < 16; ++b) {
    EXPECT_EQ(a_region.block_bytes(16 + b), a_region.block_bytes(b)) << "block " << b;
  }
  EXPECT_EQ(stat(*alice, "tenant_slots"), 4u);
  EXPECT_EQ(stat(*bob, "tenant_slots"), 4u);
}

TEST_F(KvtierdTenantTest, ASharingGroupSharesItsChunks) {
  start();
  SharedKvRegion a_region, c_region;
  auto alice = connect("alice", a_region);
  auto carol = connect("carol", c_region);
  const auto prompt = test_keys(70, 2);
  for (uint32_t b = 0; b < 8; ++b) a_region.fill_block(b, 300 + b);
  ASSERT_EQ(store(*alice, a_region, prompt).outcome, Outcome::kCompleted);
  EXPECT_EQ(hits(*carol, prompt), 2u);
  const TransferResult loaded = carol->retrieve(1, 0, prompt, consecutive_blocks(8, 2, 4)).get();
  ASSERT_EQ(loaded.outcome, Outcome::kCompleted) << loaded.error;
  for (uint32_t b = 0; b < 8; ++b) EXPECT_EQ(c_region.block_bytes(8 + b), a_region.block_bytes(b));
}

TEST_F(KvtierdTenantTest, QuotasHoldUnderEvictionPressure) {
  start();
  SharedKvRegion a_region, b_region, c_region;
  auto alice = connect("alice", a_region);
  auto bob = connect("bob", b_region);
  auto carol = connect("carol", c_region);
  // alice's max_slots (8): a ninth chunk evicts her own oldest, never anyone else's.
  ASSERT_NO_FATAL_FAILURE(flood(*bob, b_region, 1000, 16));
  ASSERT_NO_FATAL_FAILURE(flood(*alice, a_region, 2000, 8));
  ASSERT_NO_FATAL_FAILURE(flood(*alice, a_region, 2008, 4));
  EXPECT_EQ(stat(*alice, "tenant_slots"), 8u);
  EXPECT_EQ(hits(*alice, test_keys(2000, 4)), 0u);
  EXPECT_EQ(hits(*alice, test_keys(2004, 8)), 8u);
  // All eight locked (not evictable): one more is quota_exceeded, and nothing of hers went.
  auto locked = alice->lookup(test_keys(2004, 8), 10s).get();
  ASSERT_TRUE(locked && locked->lock != 0);
  const TransferResult over = store(*alice, a_region, test_keys(2100, 1));
  EXPECT_EQ(over.outcome, Outcome::kFailed);
  EXPECT_NE(over.error.find("quota_exceeded"), std::string::npos) << over.error;
  EXPECT_GE(stat(*alice, "quota_rejections"), 1u);
  ASSERT_TRUE(alice->release(locked->lock).get());
  // carol (no quota) stores far more than the pool holds: she evicts bob only down to his
  // guaranteed 16, and alice's chunks are hers to lose.
  ASSERT_NO_FATAL_FAILURE(flood(*carol, c_region, 3000, 120));
  EXPECT_EQ(hits(*bob, test_keys(1000, 16)), 16u);
  EXPECT_EQ(stat(*bob, "tenant_slots"), 16u);
  EXPECT_EQ(stat(*carol, "cache_audit_ok"), 1u);
}

TEST_F(KvtierdTenantTest, ReadThroughIsChargedToTheAskingTenantWithinItsQuota) {
  TempDir disk;
  start({"tiers.disk_path=" + disk.path().string(), "tiers.write_policy=on_evict"});
  SharedKvRegion a_region;
  auto alice = connect("alice", a_region);
  // alice's max_slots (8): four more chunks evict her four oldest, down to the disk.
  ASSERT_NO_FATAL_FAILURE(flood(*alice, a_region, 2000, 8));
  ASSERT_NO_FATAL_FAILURE(flood(*alice, a_region, 2008, 4));
  ASSERT_TRUE(eventually([&] { return stat(*alice, "tier_chunks_demoted") >= 4; }));
  // Her LOOKUP brings them up from the disk as her chunks: they evict her oldest others, and
  // the cache never holds more of hers than max_slots (charged to no one, they would not count).
  const auto demoted = test_keys(2000, 4);
  ASSERT_TRUE(eventually([&] {
    auto found = alice->lookup(demoted).get();
    return found && found->hits == 4 && !found->pending;
  }));
  EXPECT_EQ(stat(*alice, "tenant_slots"), 8u);
  EXPECT_EQ(stat(*alice, "slots_ready"), 8u);
  EXPECT_EQ(stat(*alice, "cache_audit_ok"), 1u);
}

// A chunk smaller than a slot (a layout of fewer blocks per chunk) never carries what its slot
// held before: carol's one-block chunks take the slots of dave's four-block ones, and carol's
// RETRIEVE of them as four-block chunks reads her bytes and zeros, none of dave's.
TEST_F(KvtierdTenantTest, ASmallChunkNeverCarriesWhatItsSlotHeldBefore) {
  start();
  SharedKvRegion d_region, big_region;                        // 4 blocks a chunk: a whole slot
  SharedKvRegion small_region(32, Backing::kSealedMemfd, 1);  // 1 block: a quarter of one
  auto dave = connect("dave", d_region);
  auto carol_small = connect("carol", small_region);
  auto carol_big = connect("carol", big_region);
  for (uint32_t b = 0; b < 32; ++b) d_region.fill_block(b, 700 + b);
  for (uint32_t b = 0; b < 32; ++b) small_region.fill_block(b, 100 + b);
  ASSERT_NO_FATAL_FAILURE(flood(*dave, d_region, 4000, 64));  // every slot of the pool
  ASSERT_NO_FATAL_FAILURE(flood(*carol_small, small_region, 5000, 64));
  ASSERT_EQ(stat(*carol_small, "tenant_slots"), 64u) << "carol's chunks took every slot";
  const size_t lb = big_region.layout().groups[0].layer_block_bytes();
  const auto zeros = std::vector<std::byte>(lb);
  for (uint64_t call = 0; call < 8; ++call) {
    const TransferResult r =
        carol_big
            ->retrieve(10 + call, 0, test_keys(5000 + call * 8, 8), consecutive_blocks(0, 8, 4))
            .get();
    ASSERT_EQ(r.outcome, Outcome::kCompleted) << r.error;
    for (uint32_t c = 0; c < 8; ++c) {
      const std::vector<std::byte> stored = small_region.block_bytes(c);  // the slot's first bytes
      for (uint32_t j = 0; j < 4; ++j) {
        const std::vector<std::byte> got = big_region.block_bytes(c * 4 + j);
        for (uint32_t l = 0; l < 3; ++l) {
          const size_t at = (l * 4 + j) * lb;  // where the piece lies in the slot
          const auto piece =
              std::vector<std::byte>(got.begin() + l * lb, got.begin() + (l + 1) * lb);
          const auto want = at < stored.size() ? std::vector<std::byte>(stored.begin() + at,
                                                                        stored.begin() + at + lb)
                                               : zeros;
          ASSERT_EQ(piece, want) << "chunk " << call * 8 + c << ", slot bytes from " << at;
        }
      }
    }
  }
}

TEST_F(KvtierdTenantTest, LockAndTransferQuotasAreQuotaExceeded) {
  start();
  SharedKvRegion b_region, d_region;
  auto bob = connect("bob", b_region);
  auto dave = connect("dave", d_region);
  // dave's max_locks (2): locking three hits is refused; two are fine.
  ASSERT_EQ(store(*dave, d_region, test_keys(80, 3)).outcome, Outcome::kCompleted);
  auto three = dave->lookup(test_keys(80, 3), 10s).get();
  ASSERT_FALSE(three);
  EXPECT_NE(three.error().message.find("quota_exceeded"), std::string::npos)
      << three.error().message;
  auto two = dave->lookup(test_keys(80, 2), 10s).get();
  ASSERT_TRUE(two) << two.error().message;
  EXPECT_EQ(stat(*dave, "tenant_locked_keys"), 2u);
  // bob's max_transfers (1): while one STORE's copies hang, a second one is refused.
  auto hung = bob->store(100, 0, test_keys(90, 1), consecutive_blocks(0, 1, 4),
                         server::TestHook::kHangCopies);
  ASSERT_TRUE(eventually([&] { return stat(*bob, "tenant_transfers_in_flight") == 1; }));
  const TransferResult second = store(*bob, b_region, test_keys(91, 1));
  EXPECT_EQ(second.outcome, Outcome::kFailed);
  EXPECT_NE(second.error.find("quota_exceeded"), std::string::npos) << second.error;
  // Another tenant's transfers are not bob's to count.
  EXPECT_EQ(store(*dave, d_region, test_keys(92, 1)).outcome, Outcome::kCompleted);
  EXPECT_EQ(stat(*dave, "quota_rejections"), 2u);
  // erin's max_transfers (0): not even one.
  SharedKvRegion e_region;
  auto erin = connect("erin", e_region);
  const TransferResult none = store(*erin, e_region, test_keys(93, 1));
  EXPECT_EQ(none.outcome, Outcome::kFailed);
  EXPECT_NE(none.error.find("quota_exceeded"), std::string::npos) << none.error;
  server_->kill_now();  // the hung copies end with the process
}

// erin's max_sessions (2): a third client's REGISTER is quota_exceeded (the client stays
// DEGRADED, saying so, and asks again on each heartbeat); another tenant's clients are not
// erin's to count; once one of erin's clients unregistered, the third registers.
TEST_F(KvtierdTenantTest, RegisteredClientsPastATenantsMaxSessionsAreRefused) {
  start();
  SharedKvRegion first_region, second_region, third_region, b_region;
  auto first = connect("erin", first_region);
  auto second = connect("erin", second_region);
  auto bob = connect("bob", b_region);
  auto third = std::make_unique<CacheClient>(options_for("erin"), third_region.registration());
  ASSERT_TRUE(eventually([&] {
    return third->health().reason.find("quota_exceeded") != std::string::npos;
  })) << third->health().reason;
  EXPECT_EQ(third->health().state, server::ClientState::kDegraded);
  auto bobs_second = connect("bob", second_region);  // bob has no more than the default
  ASSERT_TRUE(first->unregister().get());
  EXPECT_TRUE(third->wait_until_ok(5s)) << third->health().reason;
}

TEST_F(KvtierdTenantTest, PinsHoldUnderEvictionPressureUntilUnpinned) {
  start();
  SharedKvRegion d_region, c_region;
  auto dave = connect("dave", d_region);
  auto carol = connect("carol", c_region);
  const auto prompt = test_keys(40, 4);
  ASSERT_EQ(store(*dave, d_region, prompt).outcome, Outcome::kCompleted);
  const std::vector<ChunkKey> pinned(prompt.begin(), prompt.begin() + 2);
  auto pin = dave->pin(pinned, 60s).get();
  ASSERT_TRUE(pin) << pin.error().message;
  EXPECT_EQ(pin->field("pinned"), 2u);
  EXPECT_EQ(stat(*dave, "tenant_pinned_keys"), 2u);
  EXPECT_EQ(stat(*carol, "pins"), 2u);                // every tenant's pins
  EXPECT_EQ(stat(*carol, "tenant_pinned_keys"), 0u);  // carol's tenant has none
  ASSERT_NO_FATAL_FAILURE(flood(*carol, c_region, 5000, 120));
  EXPECT_EQ(hits(*dave, pinned), 2u);
  EXPECT_EQ(hits(*dave, {prompt[2]}), 0u);  // unpinned: evicted like any chunk
  // The pin quota (3): two more new keys would make 4.
  ASSERT_EQ(store(*dave, d_region, test_keys(60, 2)).outcome, Outcome::kCompleted);
  auto over = dave->pin(test_keys(60, 2), 60s).get();
  ASSERT_FALSE(over);
  EXPECT_NE(over.error().message.find("quota_exceeded"), std::string::npos) << over.error().message;
  // Pinning a key that is not stored pins nothing.
  auto absent = dave->pin(test_keys(90, 1), 60s).get();
  ASSERT_FALSE(absent);
  EXPECT_NE(absent.error().message.find("not_found"), std::string::npos);
  auto unpinned = dave->unpin(pinned).get();
  ASSERT_TRUE(unpinned) << unpinned.error().message;
  EXPECT_EQ(unpinned->field("unpinned"), 2u);
  ASSERT_NO_FATAL_FAILURE(flood(*carol, c_region, 6000, 120));
  EXPECT_EQ(hits(*dave, pinned), 0u);
  EXPECT_EQ(stat(*dave, "slots_pinned"), 0u);
}

TEST_F(KvtierdTenantTest, APinExpiresAfterItsTtl) {
  start();
  SharedKvRegion d_region, c_region;
  auto dave = connect("dave", d_region);
  auto carol = connect("carol", c_region);
  const auto prompt = test_keys(40, 1);
  ASSERT_EQ(store(*dave, d_region, prompt).outcome, Outcome::kCompleted);
  ASSERT_TRUE(dave->pin(prompt, 300ms).get());
  EXPECT_EQ(stat(*dave, "slots_pinned"), 1u);
  // Polled with a deadline: the service releases an expired pin on its next turn.
  EXPECT_TRUE(eventually([&] { return stat(*dave, "tenant_pinned_keys") == 0; }));
  EXPECT_EQ(stat(*dave, "slots_pinned"), 0u);
  ASSERT_NO_FATAL_FAILURE(flood(*carol, c_region, 7000, 120));
  EXPECT_EQ(hits(*dave, prompt), 0u);
}

// A CURVE DEALER with a chosen routing id, speaking raw frames.
class CurvePeer {
 public:
  CurvePeer(const std::string& endpoint, const CurveKeyPair& keys, const std::string& server_key,
            const std::string& routing_id)
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::routing_id, routing_id);
    socket_.set(zmq::sockopt::curve_serverkey, server_key);
    socket_.set(zmq::sockopt::curve_publickey, keys.public_key);
    socket_.set(zmq::sockopt::curve_secretkey, keys.secret_key);
    socket_.connect(endpoint);
  }
  std::optional<server::Reply> call(const server::Request& request) {
    socket_.send(zmq::buffer(server::encode_request(request)), zmq::send_flags::none);
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(3000)) == 0) return std::nullopt;
    zmq::message_t msg;
    if (!socket_.recv(msg)) return std::nullopt;
    auto reply = server::decode_reply(server::as_bytes(msg.to_string_view()));
    return reply ? std::optional(*reply) : std::nullopt;
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

// Tenants share the server: one of them cannot stop it for the others.
TEST_F(KvtierdTenantTest, NoTenantCanShutTheServerDown) {
  start();
  SharedKvRegion a_region, b_region;
  auto alice = connect("alice", a_region);
  auto bob = connect("bob", b_region);
  const Status down = alice->shutdown_server().get();
  ASSERT_FALSE(down);
  EXPECT_NE(down.error().message.find("permission_denied"), std::string::npos)
      << down.error().message;
  EXPECT_EQ(store(*bob, b_region, test_keys(60, 1)).outcome, Outcome::kCompleted)
      << "the server still serves";
}

TEST_F(KvtierdTenantTest, ARoutingIdNeverPassesToAnotherTenant) {
  start({"server.client_timeout_s=30"});  // alice's peer entry outlives her connection
  {
    CurvePeer alice(server_->endpoint(), keys_["alice"], server_keys_.public_key, "shared-id");
    auto pong = alice.call(server::Request{.id = 1, .op = server::Op::kPing});
    ASSERT_TRUE(pong && pong->ok);
  }
  CurvePeer bob(server_->endpoint(), keys_["bob"], server_keys_.public_key, "shared-id");
  std::optional<server::Reply> denied;
  ASSERT_TRUE(eventually([&] {  // until alice's connection is gone at the server
    denied = bob.call(server::Request{.id = 2, .op = server::Op::kPing});
    return denied.has_value();
  }));
  EXPECT_FALSE(denied->ok);
  EXPECT_EQ(denied->code, server::codes::kPermissionDenied);
}

// ---------------------------------------------------------------- without CURVE

TEST(KvtierdAccess, AnIpcSocketIsCreatedForItsOwnerOnly) {
  KvtierdProcess server(unique_endpoint(), fast_server_settings());
  RawPeer peer(server.endpoint());
  ASSERT_TRUE(peer.call(server::Request{.id = 1, .op = server::Op::kPing}, 10s));
  struct stat st {};
  ASSERT_EQ(::stat(server.endpoint().substr(6).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << std::oct << (st.st_mode & 0777);
}

TEST(KvtierdAccess, ASecondServerOnALiveIpcSocketIsRefusedAndTheFirstServesOn) {
  KvtierdProcess first(unique_endpoint(), fast_server_settings());
  const std::string path = first.endpoint().substr(6);
  {
    RawPeer peer(first.endpoint());
    ASSERT_TRUE(peer.call(server::Request{.id = 1, .op = server::Op::kPing}, 10s));
  }
  struct stat bound {};
  ASSERT_EQ(::stat(path.c_str(), &bound), 0);
  KvtierdProcess second(first.endpoint(), fast_server_settings());
  EXPECT_EQ(second.wait_exit(10s), std::optional<int>(1));
  // The first server's socket is still the one at the path, so new clients reach it.
  struct stat now {};
  ASSERT_EQ(::stat(path.c_str(), &now), 0);
  EXPECT_EQ(now.st_ino, bound.st_ino);
  RawPeer late(first.endpoint());
  auto pong = late.call(server::Request{.id = 2, .op = server::Op::kPing}, 10s);
  ASSERT_TRUE(pong);
  EXPECT_TRUE(pong->ok);
}

TEST(KvtierdAccess, TheIpcSocketFileGoesWithTheServerAndAStaleOneIsReplaced) {
  const std::string endpoint = unique_endpoint();
  const std::string path = endpoint.substr(6);
  {  // a socket file nobody accepts on, as a killed server leaves behind
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{.sun_family = AF_UNIX, .sun_path = {}};
    ASSERT_LT(path.size(), sizeof address.sun_path);
    std::memcpy(address.sun_path, path.data(), path.size());
    ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    ::close(fd);
  }
  KvtierdProcess server(endpoint, fast_server_settings());
  RawPeer peer(endpoint);
  ASSERT_TRUE(peer.call(server::Request{.id = 1, .op = server::Op::kPing}, 10s));
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(10s), std::optional<int>(0));
  struct stat st {};
  EXPECT_NE(::lstat(path.c_str(), &st), 0) << path << " outlived its server";
}

TEST(KvtierdAccess, AFileThatIsNotASocketIsNeverReplaced) {
  const std::string endpoint = unique_endpoint();
  const std::string path = endpoint.substr(6);
  {
    std::ofstream file(path);
    file << "not a socket";
  }
  KvtierdProcess server(endpoint, fast_server_settings());
  EXPECT_EQ(server.wait_exit(10s), std::optional<int>(1));
  std::ifstream file(path);
  std::string text;
  std::getline(file, text);
  EXPECT_EQ(text, "not a socket");
  std::filesystem::remove(path);
}

uint16_t free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_LOOPBACK)}};
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// kvtierd on `endpoint` without CURVE refuses to start, and serves with server.insecure.
void expect_curve_or_insecure_needed(const std::string& endpoint) {
  KvtierdProcess refused(endpoint, fast_server_settings());
  EXPECT_EQ(refused.wait_exit(10s), std::optional<int>(1));
  KvtierdProcess insecure(endpoint, {"server.insecure=true", "server.heartbeat_interval_s=0.25",
                                     "server.client_timeout_s=1"});
  RawPeer peer(endpoint);
  auto pong = peer.call(server::Request{.id = 1, .op = server::Op::kPing}, 10s);
  ASSERT_TRUE(pong);
  EXPECT_TRUE(pong->ok);
}

TEST(KvtierdAccess, TcpWithoutCurveNeedsInsecure) {
  expect_curve_or_insecure_needed("tcp://127.0.0.1:" + std::to_string(free_tcp_port()));
}

// An abstract socket (ipc://@name) has no file whose mode keeps other users out: like TCP, it
// needs CURVE or server.insecure.
TEST(KvtierdAccess, AnAbstractIpcSocketNeedsCurveOrInsecure) {
  expect_curve_or_insecure_needed("ipc://@kvtier-test-" + std::to_string(getpid()) + "-abstract");
}

// F11 for PIN / UNPIN: client input that is out of range gets exactly one decodable error reply
// with its id, and changes nothing.
TEST(KvtierdAccess, F11_PinTtlOutOfRangeOrMalformedGetsOneDecodableReply) {
  KvtierdProcess server(
      unique_endpoint(),
      {"server.max_pin_ttl_s=60", "server.heartbeat_interval_s=0.25", "server.client_timeout_s=1"});
  RawPeer peer(server.endpoint());
  ASSERT_TRUE(peer.call(server::Request{.id = 1, .op = server::Op::kPing}, 10s));
  const auto expect_error = [&](const server::Request& request, std::string_view code) {
    auto reply = peer.call(request);
    ASSERT_TRUE(reply) << "no reply to id " << request.id;
    EXPECT_FALSE(reply->ok);
    EXPECT_EQ(reply->code, code) << reply->message;
    EXPECT_EQ(reply->id, request.id);
    EXPECT_FALSE(peer.receive(50ms)) << "a second reply to id " << request.id;
  };
  const auto keys = test_keys(1, 1);
  expect_error({.id = 2, .op = server::Op::kPin, .keys = keys, .ttl_ms = 0}, "invalid_argument");
  expect_error({.id = 3, .op = server::Op::kPin, .keys = keys, .ttl_ms = 60'001},
               "invalid_argument");
  expect_error({.id = 4, .op = server::Op::kPin, .keys = keys, .ttl_ms = UINT64_MAX},
               "invalid_argument");
  expect_error({.id = 5, .op = server::Op::kPin, .keys = keys, .ttl_ms = 1000}, "not_found");
  // A negative ttl_ms (a MessagePack negative integer) and a PIN without one are malformed.
  for (const std::optional<int64_t> ttl : {std::optional<int64_t>(-5), std::optional<int64_t>()}) {
    msgpack::sbuffer frame;
    msgpack::packer<msgpack::sbuffer> pk(frame);
    pk.pack_map(ttl ? 5 : 4);
    pk.pack("v"), pk.pack(1), pk.pack("id"), pk.pack(6), pk.pack("op"), pk.pack("PIN");
    pk.pack("keys"), pk.pack_array(1), pk.pack_bin(16), pk.pack_bin_body("0123456789abcdef", 16);
    if (ttl) pk.pack("ttl_ms"), pk.pack(*ttl);
    peer.send({std::string(frame.data(), frame.size())});
    auto reply = peer.receive();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->code, "malformed") << reply->message;
    EXPECT_EQ(reply->id, 6u);
    EXPECT_FALSE(peer.receive(50ms));
  }
  auto unpin = peer.call(server::Request{.id = 7, .op = server::Op::kUnpin, .keys = keys});
  ASSERT_TRUE(unpin && unpin->ok);
  EXPECT_EQ(unpin->field("unpinned"), 0u);
  auto stats = peer.call(server::Request{.id = 8, .op = server::Op::kStats});
  ASSERT_TRUE(stats && stats->ok);
  EXPECT_EQ(stats->field("pins"), 0u);
  EXPECT_EQ(stats->field("slots_pinned"), 0u);
}

}  // namespace
}  // namespace kvtier::testing
