// Unit tests of CacheClient against a scripted stand-in for kvtierd: orderings of replies and
// events that the real server produces only in narrow races (a farewell event ahead of a
// refusal, a restarted server that says not_registered before its first PONG).
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "kvtier/server/client.h"
#include "kvtier/server/protocol.h"
#include "kvtierd_process.h"
#include "server_test_util.h"
#include "shared_kv_region.h"

namespace kvtier::testing {
namespace {

using server::CacheClient;
using server::ClientState;
using server::Op;
using server::Reply;
using server::Request;

// A ROUTER socket on its own thread. It answers PING with its boot id and REGISTER with ok and
// what kvtierd's reply holds; every other request goes to the test's script, which answers (or
// not) through reply() and event(), on this thread.
class ScriptedServer {
 public:
  using Script = std::function<void(ScriptedServer&, const std::string& client, const Request&)>;

  explicit ScriptedServer(Script script)
      : endpoint_(unique_endpoint()),
        router_(context_, zmq::socket_type::router),
        script_(std::move(script)) {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind(endpoint_);
    thread_ = std::thread([this] { run(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    thread_.join();
  }

  const std::string& endpoint() const { return endpoint_; }
  // A restart: PONGs carry another boot id from now on.
  void set_boot_id(uint64_t boot_id) { boot_id_ = boot_id; }
  void reply(const std::string& client, const Reply& reply) {
    router_.send(zmq::buffer(client), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(server::encode_reply(reply)), zmq::send_flags::none);
  }
  void event(const std::string& client, const std::string& name) {
    Reply e;
    e.event = name;
    reply(client, e);
  }

 private:
  void run() {
    while (!stop_) {
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(20)) == 0) continue;
      zmq::message_t client, body;
      if (!router_.recv(client) || !router_.recv(body)) continue;
      auto request = server::decode_request(server::as_bytes(body.to_string_view()), {});
      ASSERT_TRUE(request) << request.error().message;
      Reply r;
      r.id = request->id;
      if (request->op == Op::kPing) {
        r.fields = {{"boot_id", boot_id_.load()}};
        reply(client.to_string(), r);
      } else if (request->op == Op::kRegister) {
        r.fields = {{"boot_id", boot_id_.load()},
                    {"slot_bytes", 1u << 16},
                    {"max_batch", 64},
                    {"max_frame_bytes", 1u << 20}};
        reply(client.to_string(), r);
      } else {
        script_(*this, client.to_string(), *request);
      }
    }
  }

  std::string endpoint_;
  zmq::context_t context_;
  zmq::socket_t router_;
  Script script_;
  std::atomic<uint64_t> boot_id_{1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// F7: kvtierd's farewell event follows the replies of every transfer it started (it drains
// first), so a transfer still outstanding then ran no copy: Failed, and the client does not
// fail-stop. Here the event overtakes the STORE's shutting_down refusal, as it does when the
// STORE reaches the socket after the drain.
TEST(ClientScriptedServer, F7_ATransferOutstandingAtTheShutdownEventIsFailedNotUnprovable) {
  ScriptedServer server([](ScriptedServer& s, const std::string& client, const Request& r) {
    if (r.op != Op::kStore) return;
    s.event(client, "shutdown");
    s.reply(client, Reply::error(r.id, server::codes::kShuttingDown, "kvtierd is shutting down"));
  });
  SharedKvRegion region;
  CacheClient client(fast_client(server.endpoint()), region.registration());
  ASSERT_TRUE(client.wait_until_ok(5s)) << client.health().reason;
  const TransferResult stored =
      client.store(1, 0, test_keys(1, 1), consecutive_blocks(0, 1, 4)).get();
  EXPECT_EQ(stored.outcome, Outcome::kFailed) << stored.error;
  EXPECT_FALSE(client.fail_stopped());
  EXPECT_EQ(client.health().state, ClientState::kShutdown);
}

// F7/F8: a restarted server that answers a request not_registered before its first PONG: the
// PONG's new boot id still says the old server's copies are gone, and the STORE outstanding
// there is Unprovable at once, not at its deadline.
TEST(ClientScriptedServer, F7_ARestartFirstSeenAsNotRegisteredStillLosesTheOldServersTransfers) {
  std::atomic<bool> stored{false};
  ScriptedServer server([&](ScriptedServer& s, const std::string& client, const Request& r) {
    if (r.op == Op::kStore) {  // the old server never answers it
      stored = true;
      return;
    }
    // The restart: this reply comes before every PONG with the new boot id.
    s.reply(client, Reply::error(r.id, server::codes::kNotRegistered, "REGISTER first"));
    s.set_boot_id(2);
  });
  SharedKvRegion region;
  server::ClientOptions options = fast_client(server.endpoint());
  options.transfer_deadline = 60s;
  CacheClient client(options, region.registration());
  ASSERT_TRUE(client.wait_until_ok(5s)) << client.health().reason;
  auto store = client.store(1, 0, test_keys(1, 1), consecutive_blocks(0, 1, 4));
  ASSERT_TRUE(eventually([&] { return stored.load(); }));
  EXPECT_FALSE(client.stats().get());  // not_registered
  ASSERT_TRUE(ready_within(store, 10s)) << "the STORE waited for its deadline";
  EXPECT_EQ(store.get().outcome, Outcome::kUnprovable);
  EXPECT_TRUE(client.wait_until_ok(5s)) << client.health().reason;  // registered again
}

}  // namespace
}  // namespace kvtier::testing
