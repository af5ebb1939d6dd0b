// kvtierd's LOOKUP without the thread hop (CacheService::lookup_now on the socket loop) and batch
// frames, against a real server process: the socket loop's answer is the service's, also while
// other clients store, evict and release; a client's requests take effect in the order sent;
// no lock leaks; every request of a batch gets exactly one reply.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "kvtierd_process.h"
#include "raw_peer.h"
#include "server_test_util.h"
#include "shared_kv_region.h"

namespace kvtier::testing {
namespace {

using server::CacheClient;
using server::Op;
using server::Reply;
using server::Request;
using server::TestHook;

Request lookup_request(uint64_t id, std::vector<ChunkKey> keys, uint64_t lock_ms = 0,
                       TestHook hook = TestHook::kNone) {
  Request r{.id = id, .op = Op::kLookup, .hook = hook};
  r.keys = std::move(keys);
  r.lock_ms = lock_ms;
  return r;
}

Request plain_request(uint64_t id, Op op, uint64_t lock = 0) {
  Request r{.id = id, .op = op};
  r.lock = lock;
  return r;
}

Request register_request(uint64_t id, const server::Registration& reg) {
  Request r{.id = id, .op = Op::kRegister};
  r.rank = reg.rank;
  r.layout = reg.layout;
  r.memory = reg.memory;
  return r;
}

Request store_request(uint64_t id, std::vector<ChunkKey> keys, uint32_t first_block,
                      TestHook hook = TestHook::kNone) {
  Request r{.id = id, .op = Op::kStore, .hook = hook};
  r.blocks = consecutive_blocks(first_block, keys.size(), 4);
  r.keys = std::move(keys);
  return r;
}

// A batch frame of the given encoded elements.
std::string batch_of(const std::vector<std::string>& items) {
  std::string body;
  for (const std::string& item : items) body += item;
  return server::encode_batch(items.size(), body);
}

// A bare DEALER that also reads batch (array) reply frames.
class BatchPeer {
 public:
  explicit BatchPeer(const std::string& endpoint) : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  void send_frame(const std::string& frame) { socket_.send(zmq::buffer(frame)); }
  void send_batch(const std::vector<Request>& requests) {
    std::vector<std::string> encoded;
    for (const Request& r : requests) encoded.push_back(server::encode_request(r));
    send_frame(batch_of(encoded));
  }
  // The replies of the next frame (one for a map, several for an array); empty on timeout.
  // `was_batch` says which it was.
  std::vector<Reply> receive(bool* was_batch = nullptr, std::chrono::milliseconds timeout = 3s) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return {};
    zmq::message_t msg;
    if (!socket_.recv(msg)) return {};
    const auto bytes = server::as_bytes(msg.to_string_view());
    if (was_batch) *was_batch = server::is_batch_frame(bytes);
    auto replies = server::decode_replies(bytes);
    EXPECT_TRUE(replies) << replies.error().message;
    return replies ? *replies : std::vector<Reply>{};
  }
  // Replies until those of every id in `ids` arrived (each at most once) or `timeout` passed.
  std::map<uint64_t, Reply> collect(const std::set<uint64_t>& ids,
                                    std::chrono::milliseconds timeout = 5s) {
    std::map<uint64_t, Reply> got;
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (got.size() < ids.size() && std::chrono::steady_clock::now() < end) {
      for (Reply& r : receive(nullptr, 100ms)) {
        EXPECT_TRUE(ids.contains(r.id)) << "a reply to no request of the batch: id " << r.id;
        EXPECT_TRUE(got.emplace(r.id, r).second) << "a second reply to request " << r.id;
      }
    }
    return got;
  }
  Reply call(const Request& r) {
    send_frame(server::encode_request(r));
    std::vector<Reply> replies = receive();
    EXPECT_EQ(replies.size(), 1u);
    return replies.empty() ? Reply::error(r.id, "none", "no reply") : replies.front();
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

class KvtierdLookupTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> extra = {}) {
    std::vector<std::string> settings = fast_server_settings();
    settings.insert(settings.end(), extra.begin(), extra.end());
    server_ = std::make_unique<KvtierdProcess>(unique_endpoint(), settings);
  }
  std::unique_ptr<CacheClient> connect(SharedKvRegion& region) {
    auto client =
        std::make_unique<CacheClient>(fast_client(server_->endpoint()), region.registration());
    EXPECT_TRUE(client->wait_until_ok(5s)) << client->health().reason;
    return client;
  }
  uint64_t stat(CacheClient& client, const std::string& name) {
    auto reply = client.stats().get();
    EXPECT_TRUE(reply) << reply.error().message;
    return reply ? reply->field(name, ~0ull) : ~0ull;
  }
  // Stores 8 chunks from key `first`, then sends rounds of many lookups queued at once until the
  // I/O thread found several queued (it takes whatever is queued when it wakes) and sent them
  // in one batch frame; each answer is checked.
  void expect_batches(CacheClient& client, uint64_t first) {
    const auto keys = test_keys(first, 8);
    ASSERT_EQ(client.store(1, 0, keys, consecutive_blocks(0, 8, 4)).get().outcome,
              Outcome::kCompleted);
    bool batched = false;
    for (int round = 0; round < 50 && !batched; ++round) {
      std::vector<std::future<Result<server::LookupReply>>> futures;
      for (size_t i = 0; i < 256; ++i)
        futures.push_back(client.lookup({keys[i % 8], keys[(i + 1) % 8]}));
      for (size_t i = 0; i < futures.size(); ++i) {
        auto found = futures[i].get();
        ASSERT_TRUE(found) << found.error().message;
        EXPECT_EQ(found->hits, 2u) << i;
      }
      batched = stat(client, "batch_frames") > 0;
    }
    EXPECT_TRUE(batched) << "no batch frame in 50 rounds of 256 queued lookups";
  }
  // F12: nothing held or pinned once every lock was released or expired, and a clean audit.
  void expect_no_lock_leaked(CacheClient& client) {
    EXPECT_TRUE(eventually([&] { return stat(client, "locks") == 0; }, 5s));
    EXPECT_EQ(stat(client, "slots_pinned"), 0u);
    EXPECT_EQ(stat(client, "client_locked_keys"), 0u);
    EXPECT_EQ(stat(client, "cache_audit_ok"), 1u);
  }

  std::unique_ptr<KvtierdProcess> server_;
};

// The same LOOKUP, answered by the socket loop and (hook "service") by the service thread, in
// a sequence of states a seeded random client drives: stores that evict (the pool holds 64
// chunks of a 160-key space), stores that fail (never published, F3), keys held pending by a
// store whose copies hang, read locks up to server.max_locks, releases. Each pair must agree in
// everything but the lock's id; a locked pair is compared lock for lock (the first is released
// before the second is taken, so both see the same locks).
TEST_F(KvtierdLookupTest, F12_TheSocketLoopsLookupEqualsTheServicesInEveryState) {
  start({"server.max_locks=10"});
  SharedKvRegion region, hung_region;
  auto client = connect(region);
  // Keys 900..902 stay pending: their store's copies hang until the server is killed.
  BatchPeer hung(server_->endpoint());
  ASSERT_TRUE(hung.call(register_request(1, hung_region.registration())).ok);
  hung.send_frame(
      server::encode_request(store_request(2, test_keys(900, 3), 0, TestHook::kHangCopies)));
  SharedKvRegion peer_region;
  BatchPeer peer(server_->endpoint());
  ASSERT_TRUE(peer.call(register_request(1, peer_region.registration())).ok);

  std::mt19937_64 rng(12);
  const auto pick = [&](uint64_t n) {
    return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng);
  };
  uint64_t id = 10;
  std::vector<uint64_t> held;  // peer's locks
  size_t compared = 0, with_hits = 0, pending_seen = 0, limited = 0;
  for (int step = 0; step < 300; ++step) {
    switch (pick(6)) {
      case 0: {  // a store of up to 6 keys (evicting unpinned ones when the pool is full)
        const auto keys = test_keys(pick(160), 1 + pick(6));
        ASSERT_EQ(client->store(step, 0, keys, consecutive_blocks(0, keys.size(), 4)).get().outcome,
                  Outcome::kCompleted);
        break;
      }
      case 1: {  // a failed store: its keys are never published
        const auto keys = test_keys(500 + pick(20), 2);
        client->store(step, 0, keys, consecutive_blocks(0, 2, 4), TestHook::kFailCopies).get();
        break;
      }
      case 2:
      case 5:  // a lock the peer keeps a while, so that max_locks binds
        if (Reply r = peer.call(lookup_request(++id, test_keys(pick(160), 4), 60000));
            r.ok && r.field("lock") != 0) {
          held.push_back(r.field("lock"));
        }
        break;
      case 3:
        if (!held.empty()) {
          ASSERT_TRUE(peer.call(plain_request(++id, Op::kRelease, held.back())).ok);
          held.pop_back();
        }
        break;
      default:
        break;
    }
    // One LOOKUP both ways: keys from the stored space, the failed one, or the pending one.
    const uint64_t start_key = std::array<uint64_t, 3>{pick(160), 500 + pick(20), 900}[pick(3)];
    const std::vector<ChunkKey> keys = test_keys(start_key, 1 + pick(8));
    const uint64_t lock_ms = pick(2) == 0 ? 0 : 60000;
    const Reply fast = peer.call(lookup_request(++id, keys, lock_ms));
    if (fast.ok && fast.field("lock") != 0) {
      ASSERT_TRUE(peer.call(plain_request(++id, Op::kRelease, fast.field("lock"))).ok);
    }
    const Reply slow = peer.call(lookup_request(++id, keys, lock_ms, TestHook::kService));
    if (slow.ok && slow.field("lock") != 0) {
      ASSERT_TRUE(peer.call(plain_request(++id, Op::kRelease, slow.field("lock"))).ok);
    }
    ASSERT_EQ(fast.ok, slow.ok) << "step " << step << ": " << fast.code << " vs " << slow.code;
    EXPECT_EQ(fast.code, slow.code) << "step " << step;
    EXPECT_EQ(fast.field("hits"), slow.field("hits")) << "step " << step;
    EXPECT_EQ(fast.field("pending"), slow.field("pending")) << "step " << step;
    EXPECT_EQ(fast.field("lock") != 0, slow.field("lock") != 0) << "step " << step;
    if (start_key >= 500 && start_key < 520) {
      EXPECT_EQ(fast.field("hits"), 0u) << "F3";
    }
    ++compared;
    with_hits += fast.field("hits") > 0 ? 1 : 0;
    pending_seen += fast.field("pending");
    limited += !fast.ok && fast.code == server::codes::kLimitExceeded ? 1 : 0;
  }
  // The sequence reached the states it is meant to compare.
  EXPECT_EQ(compared, 300u);
  EXPECT_GT(with_hits, 20u);
  EXPECT_GT(pending_seen, 5u);
  EXPECT_GT(limited, 0u);
  // Half the LOOKUPs took the socket loop's path (every one without the hook).
  EXPECT_GE(stat(*client, "lookups_fast"), compared);
  for (uint64_t lock : held) ASSERT_TRUE(peer.call(plain_request(++id, Op::kRelease, lock)).ok);
  expect_no_lock_leaked(*client);
}

// Read locks the socket loop takes while another client's stores evict and a third takes locks
// that expire: a locked hit must stay loadable until released (a RETRIEVE naming the lock gets
// the stored bytes), no key whose store failed is ever a hit (F3), and once everything is
// released or expired no lock is left and the cache audits clean (F12).
TEST_F(KvtierdLookupTest, F12_SocketLoopLocksHoldUnderConcurrentStoresEvictionsAndReleases) {
  start({"server.max_locks=64", "server.lock_ttl_s=60"});
  SharedKvRegion writer_region, reader_region, expirer_region, expected;
  auto writer = connect(writer_region);
  auto reader = connect(reader_region);
  auto expirer = connect(expirer_region);
  // Key k's chunk holds blocks filled with seeds 4k..4k+3.
  const auto fill_chunk = [](SharedKvRegion& region, uint32_t first_block, uint64_t key) {
    for (uint32_t b = 0; b < 4; ++b) region.fill_block(first_block + b, key * 4 + b);
  };
  std::atomic<int> failures{0};
  // Both stop (and are joined) when the test ends, also at a failed ASSERT.
  std::jthread writes([&](std::stop_token stop) {
    std::mt19937_64 rng(7);
    for (int i = 0; !stop.stop_requested(); ++i) {
      const uint64_t first = rng() % 200;  // 200 keys, 64 slots: stores keep evicting
      const auto keys = test_keys(first, 8);
      const bool fail = i % 5 == 4;
      const auto fail_keys = test_keys(1000 + rng() % 50, 8);
      for (uint32_t c = 0; c < 8; ++c) fill_chunk(writer_region, c * 4, fail ? 0 : first + c);
      const TransferResult r =
          writer
              ->store(i, 0, fail ? fail_keys : keys, consecutive_blocks(0, 8, 4),
                      fail ? TestHook::kFailCopies : TestHook::kNone)
              .get();
      if (r.outcome != (fail ? Outcome::kFailed : Outcome::kCompleted)) ++failures;
    }
  });
  std::jthread expiring([&](std::stop_token stop) {
    std::mt19937_64 rng(8);
    while (!stop.stop_requested()) {
      // Expires on its own; past server.max_locks (locks expire on the service thread's next
      // turn) a lookup is refused, as documented.
      auto found = expirer->lookup(test_keys(rng() % 200, 4), 1ms).get();
      if (!found && found.error().message.find("limit_exceeded") == std::string::npos) ++failures;
    }
  });
  std::mt19937_64 rng(9);
  size_t retrieved = 0, released = 0, failed_key_hits = 0;
  for (int i = 0; i < 400; ++i) {
    const uint64_t first = rng() % 200;
    auto found = reader->lookup(test_keys(first, 4), 60s).get();
    ASSERT_TRUE(found) << found.error().message;
    auto bad = reader->lookup(test_keys(1000 + rng() % 50, 2)).get();
    ASSERT_TRUE(bad);
    failed_key_hits += bad->hits;
    if (found->hits == 0) {
      EXPECT_EQ(found->lock, 0u);
      continue;
    }
    ASSERT_NE(found->lock, 0u);
    if (i % 2 == 0) {
      ASSERT_TRUE(reader->release(found->lock).get()) << "lock " << found->lock;
      ++released;
      continue;
    }
    const auto keys = test_keys(first, found->hits);
    const TransferResult r =
        reader->retrieve(i, 0, keys, consecutive_blocks(0, keys.size(), 4), found->lock).get();
    ASSERT_EQ(r.outcome, Outcome::kCompleted) << "a locked hit was not loadable: " << r.error;
    for (uint32_t c = 0; c < keys.size(); ++c) {
      fill_chunk(expected, c * 4, first + c);
      for (uint32_t b = 0; b < 4; ++b) {
        ASSERT_EQ(reader_region.block_bytes(c * 4 + b), expected.block_bytes(c * 4 + b))
            << "key " << first + c << " block " << b;
      }
    }
    ++retrieved;
  }
  writes.request_stop();
  expiring.request_stop();
  writes.join();
  expiring.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(failed_key_hits, 0u) << "F3: a key whose store failed was a hit";
  EXPECT_GT(retrieved, 20u);
  EXPECT_GT(released, 20u);
  EXPECT_GT(stat(*reader, "evictions"), 100u) << "the stores did not evict: nothing was tested";
  EXPECT_GE(stat(*reader, "lookups_fast"), 800u);
  expect_no_lock_leaked(*reader);
}

// Requests sent back to back, in separate frames and in one batch, take effect in the order
// sent: a LOOKUP is answered by the socket loop only when nothing of its client waits for the
// service thread, so it never overtakes the REGISTER, STORE, RELEASE or UNREGISTER before it.
TEST_F(KvtierdLookupTest, PipelinedRequestsTakeEffectInTheOrderSent) {
  start({"server.max_locks=2"});
  SharedKvRegion region;
  const auto keys = test_keys(40, 2);
  for (bool batched : {false, true}) {
    BatchPeer peer(server_->endpoint());
    uint64_t id = batched ? 100 : 0;
    const auto send_all = [&](std::vector<Request> requests) {
      std::set<uint64_t> ids;
      for (const Request& r : requests) ids.insert(r.id);
      if (batched) {
        peer.send_batch(requests);
      } else {
        for (const Request& r : requests) peer.send_frame(server::encode_request(r));
      }
      auto got = peer.collect(ids);
      EXPECT_EQ(got.size(), ids.size());
      return got;
    };
    auto got =
        send_all({register_request(id + 1, region.registration()), lookup_request(id + 2, keys)});
    ASSERT_TRUE(got[id + 1].ok) << got[id + 1].code;
    EXPECT_TRUE(got[id + 2].ok) << "LOOKUP overtook REGISTER: " << got[id + 2].code;

    got = send_all({store_request(id + 3, keys, 0), lookup_request(id + 4, keys, 60000)});
    ASSERT_TRUE(got[id + 3].ok) << got[id + 3].code;
    ASSERT_TRUE(got[id + 4].ok) << got[id + 4].code;
    EXPECT_TRUE(got[id + 4].field("hits") == 2 || got[id + 4].field("pending") == 1)
        << "LOOKUP overtook STORE: hits " << got[id + 4].field("hits");
    if (const uint64_t lock = got[id + 4].field("lock"); lock != 0) {
      ASSERT_TRUE(peer.call(plain_request(id + 5, Op::kRelease, lock)).ok);
    }
    // At server.max_locks (2 keys held), the RELEASE before it makes room for the next lock.
    const Reply locked = peer.call(lookup_request(id + 6, keys, 60000));
    ASSERT_EQ(locked.field("hits"), 2u) << locked.code;
    got = send_all({plain_request(id + 7, Op::kRelease, locked.field("lock")),
                    lookup_request(id + 8, keys, 60000)});
    EXPECT_TRUE(got[id + 7].ok);
    EXPECT_TRUE(got[id + 8].ok) << "LOOKUP overtook RELEASE: " << got[id + 8].code;
    if (const uint64_t lock = got[id + 8].field("lock"); lock != 0) {
      ASSERT_TRUE(peer.call(plain_request(id + 9, Op::kRelease, lock)).ok);
    }
    got = send_all({plain_request(id + 10, Op::kUnregister), lookup_request(id + 11, keys)});
    ASSERT_TRUE(got[id + 10].ok) << got[id + 10].code;
    EXPECT_EQ(got[id + 11].code, server::codes::kNotRegistered) << "LOOKUP overtook UNREGISTER";
  }
  SharedKvRegion other;
  auto client = connect(other);
  expect_no_lock_leaked(*client);
}

// F11 for batches: every request of a batch frame gets exactly one reply, with its id: those the
// socket loop gives at once (PING, LOOKUP, bad elements) together in one array frame, the rest
// (posted to the service) each in its own frame. A frame that is no batch at all gets one error.
TEST_F(KvtierdLookupTest, F11_EveryRequestOfABatchGetsExactlyOneReply) {
  start();
  SharedKvRegion region;
  BatchPeer peer(server_->endpoint());
  ASSERT_TRUE(peer.call(register_request(1, region.registration())).ok);

  std::vector<std::string> items = {
      server::encode_request(plain_request(10, Op::kPing)),
      server::encode_request(lookup_request(11, test_keys(1, 3))),
      // Not a request: a map without "op", then a string.
      "\x82\xa1v\x01\xa2id\x0c",
      "\xa3hey",
      server::encode_request(lookup_request(14, test_keys(1, 1), 0, TestHook::kService)),
      server::encode_request(plain_request(15, Op::kStats)),
      // After a request that waits for the service, a LOOKUP waits for it too (order), unless
      // the service has already dispatched both when the socket loop reaches it.
      server::encode_request(lookup_request(16, test_keys(1, 1))),
  };
  peer.send_frame(batch_of(items));
  bool was_batch = false;
  const std::vector<Reply> at_once = peer.receive(&was_batch);
  EXPECT_TRUE(was_batch);
  ASSERT_TRUE(at_once.size() == 4u || at_once.size() == 5u) << at_once.size();
  std::set<uint64_t> waited = {14, 15, 16};
  if (at_once.size() == 5u) {
    EXPECT_EQ(at_once[4].id, 16u);
    EXPECT_TRUE(at_once[4].ok) << at_once[4].code;
    waited.erase(16);
  }
  EXPECT_EQ(at_once[0].id, 10u);
  EXPECT_TRUE(at_once[0].ok);
  EXPECT_EQ(at_once[1].id, 11u);
  EXPECT_TRUE(at_once[1].ok);
  EXPECT_EQ(at_once[2].id, 12u);
  EXPECT_EQ(at_once[2].code, server::codes::kMalformed);
  EXPECT_EQ(at_once[3].id, 0u);  // no id could be read
  EXPECT_EQ(at_once[3].code, server::codes::kMalformed);
  const auto later = peer.collect(waited);
  ASSERT_EQ(later.size(), waited.size());
  for (const auto& [id, reply] : later) EXPECT_TRUE(reply.ok) << id << ": " << reply.code;
  EXPECT_TRUE(peer.receive(nullptr, 200ms).empty()) << "a reply too many";

  // Frames that are no batch: one error reply each, as for any bad frame.
  peer.send_frame(std::string("\x90"));  // an empty array
  auto empty = peer.receive(&was_batch);
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_FALSE(was_batch);
  EXPECT_EQ(empty[0].code, server::codes::kMalformed);
  std::vector<std::string> too_many(server::kMaxBatchRequests + 1, "\xc0");
  peer.send_frame(batch_of(too_many));
  auto over = peer.receive();
  ASSERT_EQ(over.size(), 1u);
  EXPECT_EQ(over[0].code, server::codes::kMalformed);
  std::vector<std::string> large(200, server::encode_request(lookup_request(20, test_keys(1, 1))));
  peer.send_frame(batch_of(large));  // over server.max_frame_bytes (4096)
  auto too_large = peer.receive();
  ASSERT_EQ(too_large.size(), 1u);
  EXPECT_EQ(too_large[0].code, server::codes::kTooLarge);
  EXPECT_TRUE(peer.call(plain_request(30, Op::kPing)).ok) << "still served";
}

// CacheClient sends the requests it has queued together as batch frames once the server said
// it takes them (REGISTER's max_batch), and every future gets its own reply.
TEST_F(KvtierdLookupTest, ClientBatchesQueuedRequestsAndEveryFutureGetsItsReply) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  expect_batches(*client, 70);
}

// A REGISTER answered past the client's connect_timeout (the service thread is busy) is sent
// again on the next PING; the server answers the same REGISTER again as it did the first, with
// what it takes, so the client batches as after a timely reply (it used to be refused as
// already_registered: the client then sent every request in its own frame).
TEST_F(KvtierdLookupTest, AClientWhoseRegisterReplyCameLateRegistersAndBatches) {
  start();
  // The service thread stalls 2 s on a STATS; the PING behind it on the same socket, answered by
  // the socket loop, says the STATS was received (and queued ahead of any later REGISTER).
  BatchPeer staller(server_->endpoint());
  staller.send_frame(
      server::encode_request(Request{.id = 1, .op = Op::kStats, .hook = TestHook::kStall}));
  ASSERT_TRUE(staller.call(Request{.id = 2, .op = Op::kPing}).ok);
  SharedKvRegion region;
  auto client = connect(region);  // fast_client: connect_timeout 1 s
  EXPECT_GE(stat(*client, "op_REGISTER"), 2u) << "the first REGISTER was not late";
  expect_batches(*client, 170);
}

// lookup_many: thousands of LOOKUPs (several batch frames) of different lengths, each answered
// in its own place; and a LOOKUP sent as a plain Request gets its reply as a Reply.
TEST_F(KvtierdLookupTest, ClientLookupManyAnswersEveryLookupInItsPlace) {
  start();
  SharedKvRegion region;
  auto client = connect(region);
  const auto keys = test_keys(90, 8);
  ASSERT_EQ(client->store(1, 0, keys, consecutive_blocks(0, 8, 4)).get().outcome,
            Outcome::kCompleted);
  const ChunkKey missing{0xdead, 0xbeef};
  server::LookupBatch batch;
  constexpr size_t kLookups = 3000;
  for (size_t i = 0; i < kLookups; ++i) {
    std::vector<ChunkKey> lookup(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(i % 9));
    if (i % 2 == 1) lookup.push_back(missing);
    batch.add(lookup);
  }
  const auto found = client->lookup_many(std::move(batch)).get();
  ASSERT_EQ(found.size(), kLookups);
  for (size_t i = 0; i < kLookups; ++i) {
    ASSERT_TRUE(found[i]) << i << ": " << found[i].error().message;
    EXPECT_EQ(found[i]->hits, i % 9) << i;
    EXPECT_EQ(found[i]->lock, 0u) << i;
  }
  EXPECT_TRUE(client->lookup_many({}).get().empty());

  auto plain =
      client->call(lookup_request(0, {keys[0], keys[1], missing}), std::chrono::seconds(5)).get();
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(plain->field("hits"), 2u);
  EXPECT_TRUE(plain->fields.contains("lock"));
}

}  // namespace
}  // namespace kvtier::testing
