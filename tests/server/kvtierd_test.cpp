// kvtierd against a real server process: the data path, locks, limits, liveness, shutdown.
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "kvtierd_process.h"
#include "raw_peer.h"
#include "server_test_util.h"
#include "shared_kv_region.h"

namespace kvtier::testing {
namespace {

using server::CacheClient;
using server::ClientState;

class KvtierdTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> extra = {}) {
    std::vector<std::string> settings = fast_server_settings();
    settings.insert(settings.end(), extra.begin(), extra.end());
    server_ = std::make_unique<KvtierdProcess>(unique_endpoint(), settings);
  }
  std::unique_ptr<CacheClient> connect(SharedKvRegion& region, server::ClientOptions options) {
    auto client = std::make_unique<CacheClient>(options, region.registration());
    EXPECT_TRUE(client->wait_until_ok(5s)) << client->health().reason;
    return client;
  }
  std::unique_ptr<CacheClient> connect(SharedKvRegion& region) {
    return connect(region, fast_client(server_->endpoint()));
  }
  uint64_t stat(CacheClient& client, const std::string& name) {
    auto reply = client.stats().get();
    EXPECT_TRUE(reply) << reply.error().message;
    return reply ? reply->field(name, ~0ull) : ~0ull;
  }

  std::unique_ptr<KvtierdProcess> server_;
};

TEST_F(KvtierdTest, StoreLookupRetrieveReturnsExactlyTheStoredBytes) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  const uint32_t per = region.blocks_per_chunk();
  const auto keys = test_keys(100, 3);
  for (uint32_t b = 0; b < 3 * per; ++b) region.fill_block(b, 1000 + b);

  TransferResult stored = client->store(1, 0, keys, consecutive_blocks(0, 3, per)).get();
  ASSERT_EQ(stored.outcome, Outcome::kCompleted) << stored.error;

  auto found = client->lookup(keys).get();
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->hits, 3u);
  auto missing = client->lookup(test_keys(900, 1)).get();
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->hits, 0u);

  const uint32_t dst = 16;
  TransferResult loaded = client->retrieve(2, 0, keys, consecutive_blocks(dst, 3, per)).get();
  ASSERT_EQ(loaded.outcome, Outcome::kCompleted) << loaded.error;
  for (uint32_t b = 0; b < 3 * per; ++b) {
    EXPECT_EQ(region.block_bytes(dst + b), region.block_bytes(b)) << "block " << b;
  }
  EXPECT_EQ(stat(*client, "cache_audit_ok"), 1u);
  EXPECT_EQ(stat(*client, "slots_pinned"), 0u);  // F12: the load's pins were released
  // STATS carries every counter of the cache (its visit_counters), not only the slot states.
  EXPECT_EQ(stat(*client, "slots_ready"), 3u);
  EXPECT_EQ(stat(*client, "stores_succeeded"), 3u);
  EXPECT_EQ(stat(*client, "loads"), 3u);
}

TEST_F(KvtierdTest, RetrieveOfAMissingKeyIsFailedAndPinsNothing) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  TransferResult r = client->retrieve(1, 0, test_keys(5, 1), consecutive_blocks(0, 1, 4)).get();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_NE(r.error.find("not_found"), std::string::npos) << r.error;
  EXPECT_FALSE(client->fail_stopped());
}

TEST_F(KvtierdTest, BadRegistrationIsRefusedWithAReason) {
  start();
  SharedKvRegion region;
  server::Registration reg = region.registration();
  reg.memory.bytes += 1;  // does not match the object's size
  CacheClient client(fast_client(server_->endpoint()), reg);
  ASSERT_TRUE(eventually([&] {
    return client.health().reason.find("refused") != std::string::npos;
  })) << client.health().reason;
  EXPECT_EQ(client.health().state, ClientState::kDegraded);
  // Skipped while not OK: nothing sent, so Failed (not Unprovable) and no fail-stop.
  EXPECT_EQ(client.store(1, 0, test_keys(1, 1), consecutive_blocks(0, 1, 4)).get().outcome,
            Outcome::kFailed);
  EXPECT_FALSE(client.fail_stopped());
}

TEST_F(KvtierdTest, LookupLockHoldsKeysUntilReleased) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  const auto keys = test_keys(10, 2);
  ASSERT_EQ(client->store(1, 0, keys, consecutive_blocks(0, 2, 4)).get().outcome,
            Outcome::kCompleted);
  auto found = client->lookup(keys, 10s).get();
  ASSERT_TRUE(found);
  ASSERT_NE(found->lock, 0u);
  EXPECT_EQ(stat(*client, "slots_pinned"), 2u);
  EXPECT_TRUE(client->release(found->lock).get());
  EXPECT_EQ(stat(*client, "slots_pinned"), 0u);
  EXPECT_FALSE(client->release(found->lock).get());  // released once only
}

TEST_F(KvtierdTest, LockLimitAndRequestLimitGetErrorReplies) {
  start({"server.max_locks=1", "server.max_requests_in_flight=1"});
  SharedKvRegion region;
  auto client = connect(region);
  const auto keys = test_keys(20, 2);
  ASSERT_EQ(client->store(1, 0, keys, consecutive_blocks(0, 2, 4)).get().outcome,
            Outcome::kCompleted);
  auto locked = client->lookup(keys, 10s).get();
  ASSERT_FALSE(locked);
  EXPECT_NE(locked.error().message.find("limit_exceeded"), std::string::npos);

  // One request held by the server (no reply), so the next one exceeds the in-flight limit.
  auto held = client->call(
      server::Request{.op = server::Op::kStats, .hook = server::TestHook::kNoReply}, 2s);
  ASSERT_TRUE(eventually([&] {
    auto r = client->stats().get();
    return !r && r.error().message.find("limit_exceeded") != std::string::npos;
  }));
}

TEST_F(KvtierdTest, DisconnectedClientHasItsLocksReleased) {
  start({"server.lock_ttl_s=60"});  // the lock cannot simply expire meanwhile
  SharedKvRegion region_a, region_b;
  auto a = connect(region_a);
  auto b = connect(region_b);
  const auto keys = test_keys(30, 2);
  ASSERT_EQ(a->store(1, 0, keys, consecutive_blocks(0, 2, 4)).get().outcome, Outcome::kCompleted);
  ASSERT_TRUE(a->lookup(keys, 60s).get());
  EXPECT_EQ(stat(*b, "locks"), 1u);
  EXPECT_EQ(stat(*a, "client_locked_keys"), 2u) << "the asking client's own locks";
  EXPECT_EQ(stat(*b, "client_locked_keys"), 0u);
  a.reset();  // gone without UNREGISTER: silent past server.client_timeout_s
  EXPECT_TRUE(eventually([&] { return stat(*b, "locks") == 0; }, 5s));
  EXPECT_EQ(stat(*b, "slots_pinned"), 0u);
  EXPECT_EQ(stat(*b, "cache_audit_ok"), 1u);
}

TEST_F(KvtierdTest, UnregisterReleasesLocksAndStaysUnregistered) {
  start();
  SharedKvRegion region_a, region_b;
  auto a = connect(region_a);
  auto b = connect(region_b);
  const auto keys = test_keys(35, 2);
  ASSERT_EQ(a->store(1, 0, keys, consecutive_blocks(0, 2, 4)).get().outcome, Outcome::kCompleted);
  ASSERT_TRUE(a->lookup(keys, 60s).get());
  EXPECT_EQ(stat(*b, "clients"), 2u);
  Status done = a->unregister().get();
  ASSERT_TRUE(done) << done.error().to_string();
  EXPECT_EQ(stat(*b, "clients"), 1u);
  EXPECT_EQ(stat(*b, "locks"), 0u);
  EXPECT_EQ(stat(*b, "slots_pinned"), 0u);
  EXPECT_EQ(a->health().state, ClientState::kDegraded);
  EXPECT_EQ(a->health().reason, "unregistered");
  // Heartbeats go on (both clients ping) but do not register it again.
  const uint64_t pings = stat(*b, "pings");
  const uint64_t registrations = stat(*b, "op_REGISTER");
  ASSERT_TRUE(eventually([&] { return stat(*b, "pings") >= pings + 6; }));
  EXPECT_EQ(stat(*b, "op_REGISTER"), registrations);
  EXPECT_EQ(stat(*b, "clients"), 1u);
}

TEST_F(KvtierdTest, LiveIdleClientIsNeverReaped) {
  start();
  SharedKvRegion region_a, region_b;
  auto idle = connect(region_a);
  auto gone = connect(region_b);
  gone.reset();
  // A client that stopped pinging was reaped: more than client_timeout_s passed, during which
  // the idle client sent nothing but heartbeats.
  auto watcher_region = std::make_unique<SharedKvRegion>();
  auto watcher = connect(*watcher_region);
  ASSERT_TRUE(eventually([&] { return stat(*watcher, "clients_reaped") >= 1; }));
  EXPECT_EQ(idle->health().state, ClientState::kOk);
  auto found = idle->lookup(test_keys(1, 1)).get();
  EXPECT_TRUE(found) << found.error().message;  // still registered: not_registered otherwise
}

// F7/F11: a request larger than the server's max_frame_bytes (4096 here) would be answered
// too_large with no id the client can match: it is refused before it is sent, so a STORE is
// Failed at once (it used to wait for its deadline and turn Unprovable, fail-stopping the
// client) and a LOOKUP is an error naming the limit.
TEST_F(KvtierdTest, F7_ARequestOverTheServersFrameLimitIsFailedWithoutBeingSent) {
  start();
  SharedKvRegion region(1200);
  auto client = connect(region);
  const auto keys = test_keys(1, 300);
  const TransferResult stored = client->store(1, 0, keys, consecutive_blocks(0, 300, 4)).get();
  EXPECT_EQ(stored.outcome, Outcome::kFailed) << stored.error;
  EXPECT_NE(stored.error.find("max_frame_bytes"), std::string::npos) << stored.error;
  EXPECT_FALSE(client->fail_stopped());
  auto found = client->lookup(keys).get();
  ASSERT_FALSE(found);
  EXPECT_NE(found.error().message.find("max_frame_bytes"), std::string::npos)
      << found.error().message;
  EXPECT_EQ(client->health().state, ClientState::kOk);
  auto fits = client->lookup(test_keys(1, 10)).get();
  EXPECT_TRUE(fits) << fits.error().message;
}

// A signal handled on the client's I/O thread (a host process's handler, e.g. Python's)
// interrupts its poll, its sends and its receives (libzmq returns EINTR from those too, even
// without waiting); the client goes on. An interrupted poll used to end the process, and so did
// an interrupted receive: one signal in 50 pings rarely met one, a stream of them meets all.
TEST_F(KvtierdTest, ASignalHandledOnTheClientsThreadInterruptsNothing) {
  start();
  struct sigaction action {};
  action.sa_handler = [](int) {};
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: the calls return EINTR
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGUSR1, &action, &before), 0);
  SharedKvRegion region;
  auto client = connect(region);  // its I/O thread takes SIGUSR1; the others block it
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, nullptr), 0);
  // Inherits the blocked mask: each signal goes to the I/O thread. Under ThreadSanitizer, which
  // delivers each signal at a later safe point at some cost, a signal every few microseconds
  // kept the thread from its heartbeats past client_timeout_s (it was reaped), so there they
  // are paced; elsewhere they come back to back, which is what meets a send or a receive.
  struct Storm {
    std::atomic<bool> on{true};
    std::atomic<int> sent{0};
    std::thread thread;
    ~Storm() {  // also when an assertion below ends the test
      on = false;
      if (thread.joinable()) thread.join();
    }
  } storm;
  storm.thread = std::thread([&storm] {
    while (storm.on.load()) {
      kill(getpid(), SIGUSR1);
      ++storm.sent;
#if defined(__SANITIZE_THREAD__)
      std::this_thread::sleep_for(100us);
#else
      std::this_thread::yield();
#endif
    }
  });
  const auto keys = test_keys(7, 4);
  // 200 rounds at least, and on until the storm has sent 200 signals: on a loaded machine its
  // thread may get little time.
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  for (int i = 0; i < 200 || storm.sent.load() < 200; ++i) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "signals sent: " << storm.sent.load();
    auto pong = client->ping().get();
    ASSERT_TRUE(pong) << pong.error().message;
    auto found = client->lookup(keys).get();
    ASSERT_TRUE(found) << found.error().message;
  }
  storm.on = false;
  storm.thread.join();
  EXPECT_EQ(client->health().state, ClientState::kOk);
  client.reset();
  pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
  sigaction(SIGUSR1, &before, nullptr);
}

TEST_F(KvtierdTest, SlowHandlerNeverBlocksTheSocketLoop) {
  start();
  SharedKvRegion region, other_region;
  auto client = connect(region);
  auto other = connect(other_region);
  auto slow =
      client->call(server::Request{.op = server::Op::kStats, .hook = server::TestHook::kStall}, 5s);
  // PINGs and bad frames are the socket loop's own: answered while the handler runs.
  for (int i = 0; i < 5; ++i) {
    auto pong = other->ping().get();
    ASSERT_TRUE(pong) << pong.error().message;
  }
  EXPECT_NE(slow.wait_for(0s), std::future_status::ready);  // the slow handler still runs
  EXPECT_EQ(other->health().state, ClientState::kOk);       // heartbeats kept it OK
  EXPECT_TRUE(slow.get());
}

TEST_F(KvtierdTest, ShutdownDrainsAndClientsHearIt) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  Status down = client->shutdown_server().get();
  ASSERT_TRUE(down) << down.error().to_string();
  EXPECT_TRUE(eventually([&] { return client->health().state == ClientState::kShutdown; }));
  EXPECT_EQ(server_->wait_exit(5s), std::optional<int>(0));
  // Skipped while shut down: no fail-stop, nothing sent.
  EXPECT_EQ(client->store(1, 0, test_keys(1, 1), consecutive_blocks(0, 1, 4)).get().outcome,
            Outcome::kFailed);
  EXPECT_FALSE(client->fail_stopped());
}

// A client DEALER with ZMQ_IMMEDIATE (docs/protocol.md recommends it) drops the replies it has
// not read yet once its connection closes: kvtierd that closed its socket right after the
// farewell lost the SHUTDOWN reply and the event for a client a moment slow to read them. So the
// socket stays open and served one heartbeat interval after the farewell: a PING sent once the
// event arrived is still answered (before, the loop had returned and nothing answered it).
TEST_F(KvtierdTest, ServesOneHeartbeatIntervalAfterTheFarewell) {
  start({"server.heartbeat_interval_s=2", "server.client_timeout_s=10"});
  RawPeer peer(server_->endpoint());
  server::Request request;
  request.id = 1;
  request.op = server::Op::kShutdown;
  auto reply = peer.call(request);
  ASSERT_TRUE(reply && reply->ok && reply->id == 1);
  auto event = peer.receive();
  ASSERT_TRUE(event);
  EXPECT_EQ(event->event, "shutdown");
  request.id = 2;
  request.op = server::Op::kPing;
  auto pong = peer.call(request, 1s);
  ASSERT_TRUE(pong) << "no PING reply after the farewell: the socket closed at once";
  EXPECT_TRUE(pong->ok);
  EXPECT_EQ(pong->id, 2u);
  EXPECT_EQ(server_->wait_exit(10s), std::optional<int>(0));
}

// An operator's SIGTERM or Ctrl-C (SIGINT) is a graceful shutdown, as SHUTDOWN is: transfers
// are decided and the process exits 0 (not 1: an interrupted call is not an error). Whether
// clients hear the farewell event is ShutdownDrainsAndClientsHearIt's to check (a client that
// once missed it here: ServesOneHeartbeatIntervalAfterTheFarewell).
TEST_F(KvtierdTest, StopSignalDrainsAndExitsZero) {
  for (int signo : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(signo == SIGTERM ? "SIGTERM" : "SIGINT");
    start();
    SharedKvRegion region;
    auto client = connect(region);
    ASSERT_EQ(client->store(1, 0, test_keys(1, 1), consecutive_blocks(0, 1, 4)).get().outcome,
              Outcome::kCompleted);
    server_->signal(signo);
    EXPECT_EQ(server_->wait_exit(5s), std::optional<int>(0));
    EXPECT_FALSE(client->fail_stopped());  // nothing was in flight: nothing is unprovable
  }
}

}  // namespace
}  // namespace kvtier::testing
