// kvtierd's fault contract against a real server process: exactly one terminal reply (F11),
// deadlines (F8), Unprovable on a lost server (F7), DEGRADED and recovery across a restart (H7).
#include <gtest/gtest.h>

#include <zmq.hpp>

#include "kvtierd_process.h"
#include "raw_peer.h"
#include "server_test_util.h"
#include "shared_kv_region.h"

namespace kvtier::testing {
namespace {

using server::CacheClient;
using server::ClientState;

class KvtierdFaultTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> extra = {}) {
    std::vector<std::string> settings = fast_server_settings();
    settings.insert(settings.end(), extra.begin(), extra.end());
    server_ = std::make_unique<KvtierdProcess>(endpoint_, settings);
  }
  std::unique_ptr<CacheClient> connect(SharedKvRegion& region,
                                       std::optional<server::ClientOptions> options = {}) {
    auto client = std::make_unique<CacheClient>(options.value_or(fast_client(endpoint_)),
                                                region.registration());
    EXPECT_TRUE(client->wait_until_ok(5s)) << client->health().reason;
    return client;
  }
  uint64_t stat(CacheClient& client, const std::string& name) {
    auto reply = client.stats().get();
    return reply ? reply->field(name, ~0ull) : ~0ull;
  }

  std::string endpoint_ = unique_endpoint();
  std::unique_ptr<KvtierdProcess> server_;
};

TEST_F(KvtierdFaultTest, F11_HandlerThatThrowsStillGetsOneErrorReply) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  auto reply =
      client->call(server::Request{.op = server::Op::kStats, .hook = server::TestHook::kThrow}, 2s)
          .get();
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().code, ErrorCode::kInternal) << reply.error().message;
  EXPECT_NE(reply.error().message.find("handler raised"), std::string::npos);
  // A throwing handler of a transfer: the future is Failed (an error reply), not Unprovable.
  TransferResult r =
      client->store(1, 0, test_keys(1, 1), consecutive_blocks(0, 1, 4), server::TestHook::kThrow)
          .get();
  EXPECT_EQ(r.outcome, Outcome::kFailed) << r.error;
  EXPECT_EQ(stat(*client, "handler_errors"), 2u);  // and the server keeps serving
  EXPECT_EQ(stat(*client, "slots_pending"), 0u);   // F12: the failed request held nothing
  EXPECT_EQ(stat(*client, "cache_audit_ok"), 1u);
}

TEST_F(KvtierdFaultTest, F11_BadFramesGetErrorRepliesAndOthersAreStillServed) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  RawPeer raw(endpoint_);
  server::Request ping{.id = 77, .op = server::Op::kPing};
  const std::string good = server::encode_request(ping);
  const struct {
    std::vector<std::string> frames;
    std::string_view code;
  } cases[] = {
      {{"\xc1garbage"}, server::codes::kMalformed},
      {{good.substr(0, good.size() - 3)}, server::codes::kMalformed},  // truncated
      {{std::string(5000, 'x')}, server::codes::kTooLarge},            // > max_frame_bytes 4096
      {{good, good}, server::codes::kMalformed},                       // two frames
      {{""}, server::codes::kMalformed},
  };
  for (const auto& c : cases) {
    raw.send(c.frames);
    auto reply = raw.receive();
    ASSERT_TRUE(reply) << "no reply for a bad frame expecting " << c.code;
    EXPECT_FALSE(reply->ok);
    EXPECT_EQ(reply->code, c.code);
    EXPECT_LE(reply->message.size(), server::kMaxErrorMessage);
    EXPECT_FALSE(raw.receive(0ms)) << "exactly one reply";
    // Another client is served in between.
    auto found = client->lookup(test_keys(1, 1)).get();
    EXPECT_TRUE(found) << found.error().message;
  }
  server::Request unknown{.id = 78, .op = server::Op::kPing};
  std::string frame = server::encode_request(unknown);
  frame.replace(frame.find("PING"), 4, "FROB");
  raw.send({frame});
  auto reply = raw.receive();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->code, server::codes::kUnknownOp);
  EXPECT_EQ(reply->id, 78u);
  EXPECT_EQ(stat(*client, "rejected_frames"), 6u);
  EXPECT_EQ(stat(*client, "cache_audit_ok"), 1u);  // F12
}

TEST_F(KvtierdFaultTest, F11_FailedStoreIsAnsweredFailedAndNeverPublished) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  const auto keys = test_keys(40, 2);
  TransferResult r =
      client->store(1, 0, keys, consecutive_blocks(0, 2, 4), server::TestHook::kFailCopies).get();
  EXPECT_EQ(r.outcome, Outcome::kFailed) << r.error;
  EXPECT_NE(r.error.find("transfer_failed"), std::string::npos) << r.error;
  auto found = client->lookup(keys).get();
  ASSERT_TRUE(found);
  EXPECT_EQ(found->hits, 0u);  // F3
  EXPECT_EQ(stat(*client, "slots_pending"), 0u);
  EXPECT_EQ(stat(*client, "cache_audit_ok"), 1u);
  EXPECT_FALSE(client->fail_stopped());
}

TEST_F(KvtierdFaultTest, F11_FailedTransferIsAnsweredOnlyAfterItsCopiesStopped) {
  start({"transfer.transfer_deadline_s=1"});  // the server's engine decides after 1 s
  SharedKvRegion region, watcher_region;
  auto client = connect(region);
  auto watcher = connect(watcher_region);
  const auto keys = test_keys(90, 2);
  auto store =
      client->store(1, 0, keys, consecutive_blocks(0, 2, 4), server::TestHook::kFailPartway);
  // The submit failed after one copy was enqueued, and that copy still runs (hangs) ...
  ASSERT_TRUE(eventually([&] { return stat(*watcher, "injected_hangs") == 1; }));
  EXPECT_EQ(stat(*watcher, "transfers_in_flight"), 1u);
  EXPECT_NE(store.wait_for(0s), std::future_status::ready);  // ... so no reply yet
  // The engine cannot show the copies stopped: at its deadline the answer is "unprovable".
  ASSERT_TRUE(ready_within(store, 4s));
  TransferResult r = store.get();
  EXPECT_EQ(r.outcome, Outcome::kUnprovable) << r.error;
  EXPECT_NE(r.error.find("unprovable"), std::string::npos) << r.error;
  EXPECT_TRUE(client->fail_stopped());
  // F7/F12 on the server: the slots are quarantined, never freed, and the state audits clean.
  EXPECT_EQ(stat(*watcher, "slots_quarantined"), 2u);
  EXPECT_EQ(stat(*watcher, "slots_pending"), 0u);
  EXPECT_EQ(stat(*watcher, "cache_audit_ok"), 1u);
  auto found = watcher->lookup(keys).get();
  ASSERT_TRUE(found);
  EXPECT_EQ(found->hits, 0u);  // never published
}

TEST_F(KvtierdFaultTest, F7_ServerKilledMidTransferIsUnprovableNeverCompleted) {
  start();
  SharedKvRegion region, watcher_region;
  auto client = connect(region);
  auto watcher = connect(watcher_region);
  auto store = client->store(1, 0, test_keys(50, 2), consecutive_blocks(0, 2, 4),
                             server::TestHook::kHangCopies);
  // The server's copies on the client's memory are in flight (hung) ...
  ASSERT_TRUE(eventually([&] { return stat(*watcher, "injected_hangs") == 1; }));
  EXPECT_EQ(stat(*watcher, "transfers_in_flight"), 1u);
  server_->kill_now();                   // ... when the server dies.
  ASSERT_TRUE(ready_within(store, 2s));  // long before the 5 s transfer deadline
  TransferResult r = store.get();
  EXPECT_EQ(r.outcome, Outcome::kUnprovable) << r.error;
  EXPECT_TRUE(client->fail_stopped());
  EXPECT_EQ(client->health().state, ClientState::kDegraded);
}

// F7: copies of an Unprovable transfer may still run when kvtierd stops (here: hung until the
// process ends). The pool they copy to stays mapped to the end, and the process exits 0 after
// its drain (it used to unmap the pool, then release the hung copy over it: SIGSEGV).
TEST_F(KvtierdFaultTest, F7_AServerWithAnUnprovableTransferStillExitsCleanly) {
  start({"transfer.transfer_deadline_s=1"});
  SharedKvRegion region;
  auto client = connect(region);
  const TransferResult stored = client
                                    ->store(1, 0, test_keys(70, 2), consecutive_blocks(0, 2, 4),
                                            server::TestHook::kHangCopies)
                                    .get();
  ASSERT_EQ(stored.outcome, Outcome::kUnprovable) << stored.error;
  server_->signal(SIGTERM);
  EXPECT_EQ(server_->wait_exit(10s), std::optional<int>(0));
}

TEST_F(KvtierdFaultTest, F8_ServerThatNeverRepliesIsUnprovableAtTheDeadlineNotBefore) {
  start();
  SharedKvRegion region;
  server::ClientOptions options = fast_client(endpoint_);
  options.transfer_deadline = 400ms;
  auto client = connect(region, options);
  const auto submitted = std::chrono::steady_clock::now();
  auto store = client->store(1, 0, test_keys(60, 1), consecutive_blocks(0, 1, 4),
                             server::TestHook::kNoReply);
  ASSERT_TRUE(ready_within(store, 3s));
  const auto resolved = std::chrono::steady_clock::now();
  TransferResult r = store.get();
  EXPECT_EQ(r.outcome, Outcome::kUnprovable) << r.error;
  EXPECT_GE(resolved - submitted, options.transfer_deadline);  // not before the deadline
  EXPECT_TRUE(client->fail_stopped());
  EXPECT_EQ(client->health().state, ClientState::kOk);  // the server itself is alive
  EXPECT_EQ(stat(*client, "slots_pending"), 0u);        // F12: the swallowed store held nothing
  EXPECT_EQ(stat(*client, "cache_audit_ok"), 1u);
}

TEST_F(KvtierdFaultTest, H7_ServerRestartMakesTheClientDegradedThenRecovered) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  const uint64_t first_boot = client->health().server_boot_id;
  server_->kill_now();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return client->health().state == ClientState::kDegraded; }, 2s));
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 3 * kHeartbeat);  // two + slack
  // While degraded, loads and stores are skipped (Failed, nothing sent) and lookups miss.
  EXPECT_EQ(client->store(1, 0, test_keys(70, 1), consecutive_blocks(0, 1, 4)).get().outcome,
            Outcome::kFailed);
  EXPECT_FALSE(client->lookup(test_keys(70, 1)).get());

  start();  // a new process on the same endpoint
  ASSERT_TRUE(client->wait_until_ok(5s)) << client->health().reason;
  EXPECT_NE(client->health().server_boot_id, first_boot);
  EXPECT_EQ(client->store(2, 0, test_keys(70, 1), consecutive_blocks(0, 1, 4)).get().outcome,
            Outcome::kCompleted);
  EXPECT_FALSE(client->fail_stopped());
  EXPECT_EQ(stat(*client, "cache_audit_ok"), 1u);  // F12 on the new server
}

TEST_F(KvtierdFaultTest, H7_ServerThatStopsAnsweringIsDegradedWithinTwoHeartbeats) {
  start({"server.client_timeout_s=30"});  // the pause must not get the client reaped
  SharedKvRegion region;
  auto client = connect(region);
  const uint64_t boot = client->health().server_boot_id;
  server_->pause();  // connected, but answers nothing: only the PING deadline can see it
  const auto paused = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return client->health().state == ClientState::kDegraded; }, 2s));
  EXPECT_LT(std::chrono::steady_clock::now() - paused, 3 * kHeartbeat);  // two + slack
  server_->resume();
  ASSERT_TRUE(client->wait_until_ok(5s)) << client->health().reason;
  EXPECT_EQ(client->health().server_boot_id, boot);  // same process: the session was kept
  EXPECT_EQ(client->store(1, 0, test_keys(80, 1), consecutive_blocks(0, 1, 4)).get().outcome,
            Outcome::kCompleted);
  EXPECT_EQ(stat(*client, "slots_pending"), 0u);  // F12
  EXPECT_EQ(stat(*client, "cache_audit_ok"), 1u);
}

}  // namespace
}  // namespace kvtier::testing
