// The host cache's KV events (docs/events.md): what a subscriber rebuilds from them is what the
// CacheManager holds, after any sequence of stores, failed stores, evictions and resets, and
// a subscriber that missed batches gets them back by replay (or a snapshot).
#include <gtest/gtest.h>

#include <random>
#include <zmq.hpp>

#include "cache_test_util.h"
#include "kvtier/cache/cache_manager.h"
#include "support/kv_event_mirror.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using cache_test::key;
using cache_test::make_manager;
using testing::KvEventMirror;

constexpr uint64_t kUniverse = 96;  // keys 0..95 over 32 slots: evictions all along
constexpr uint32_t kChunkTokens = 64;

std::set<ChunkKey> ready_keys(const CacheManager& m) {
  std::set<ChunkKey> out;
  for (uint64_t i = 0; i < kUniverse; ++i) {
    if (m.state(key(i)) == LookupState::kHit) out.insert(key(i));
  }
  return out;
}

struct Endpoints {
  testing::TempDir dir;
  std::string pub = "ipc://" + (dir.path() / "events").string();
  std::string replay = "ipc://" + (dir.path() / "replay").string();
};

// One random step: a store of a few keys (succeeding, failing, or left for later), a load's pin
// and unpin, or a reset.
void random_step(CacheManager& m, std::mt19937& rng) {
  const uint32_t op = rng() % 20;
  std::vector<ChunkKey> ks;
  const uint64_t first = rng() % kUniverse;
  for (uint64_t i = 0; i < 1 + rng() % 4; ++i) ks.push_back(key((first + i) % kUniverse));
  if (op < 14) {
    std::optional<StorePlan> plan = m.prepare_store(ks);
    if (plan) m.complete_store(plan->keys, op < 12 ? Verdict::kSucceeded : Verdict::kFailed);
  } else if (op < 19) {
    const size_t hits = m.lookup(ks).hit_chunks;
    if (hits > 0) {
      auto span = std::span(ks).first(hits);
      ASSERT_TRUE(m.prepare_load(span).has_value());
      m.touch(span);
      m.complete_load(span);
    }
  } else {
    m.reset();
  }
}

TEST(KvEvents, EveryStoredChunkIsAnnouncedAndEveryRemovedOneWithdrawn) {
  Endpoints ep;
  KvEventPublisher pub({.endpoints = {ep.pub}, .replay_endpoints = {ep.replay}});
  KvEventSubscriber sub({.endpoint = ep.pub, .replay_endpoint = ep.replay});
  KvEventMirror mirror;
  ASSERT_TRUE(testing::connected(pub, sub, mirror));
  auto m = make_manager(32);
  m->publish_events(&pub, "host", kChunkTokens);
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    for (int step = 0; step < 600; ++step) {
      random_step(*m, rng);
      if (step % 40 != 39) continue;
      ASSERT_TRUE(mirror.caught_up(pub, sub));
      ASSERT_EQ(mirror.on("host"), ready_keys(*m)) << "seed " << seed << " step " << step;
    }
  }
  EXPECT_GT(m->counters().evictions, 100u);  // the sequence did evict
  EXPECT_GT(mirror.events, 200u);
  EXPECT_EQ(sub.counters().gaps, 0u);
}

TEST(KvEvents, ALateSubscriberIsReplayedTheBatchesItMissed) {
  Endpoints ep;
  KvEventPublisher pub({.endpoints = {ep.pub}, .replay_endpoints = {ep.replay}});
  auto m = make_manager(32);
  m->publish_events(&pub, "host", kChunkTokens);
  std::mt19937 rng(7);
  for (int step = 0; step < 200; ++step) {
    random_step(*m, rng);
    if (step % 10 == 0) pub.flush();  // many batches, all kept
  }
  pub.flush();
  ASSERT_GT(pub.batches_sent(), 10u);
  // Connects after all of them: its first live batch shows the gap, the replay fills it.
  KvEventSubscriber sub({.endpoint = ep.pub, .replay_endpoint = ep.replay});
  KvEventMirror mirror;
  ASSERT_TRUE(testing::connected(pub, sub, mirror));
  ASSERT_TRUE(mirror.caught_up(pub, sub));
  EXPECT_EQ(mirror.on("host"), ready_keys(*m));
  EXPECT_EQ(sub.counters().replays, 1u);
  EXPECT_EQ(sub.counters().snapshots, 0u);
}

TEST(KvEvents, AGapOlderThanTheBufferIsAnsweredWithASnapshot) {
  Endpoints ep;
  KvEventPublisher pub(
      {.endpoints = {ep.pub}, .replay_endpoints = {ep.replay}, .buffer_batches = 2});
  auto m = make_manager(32);
  m->publish_events(&pub, "host", kChunkTokens);
  std::mt19937 rng(11);
  for (int step = 0; step < 300; ++step) {
    random_step(*m, rng);
    if (step % 10 == 0) pub.flush();
  }
  KvEventSubscriber sub({.endpoint = ep.pub, .replay_endpoint = ep.replay});
  KvEventMirror mirror;
  // Something the mirror must forget: the snapshot starts with AllBlocksCleared.
  mirror.stored["host"].insert(key(1000));
  ASSERT_TRUE(testing::connected(pub, sub, mirror));
  ASSERT_TRUE(mirror.caught_up(pub, sub));
  EXPECT_EQ(mirror.on("host"), ready_keys(*m));
  EXPECT_EQ(sub.counters().snapshots, 1u);
  // And the stream goes on from the snapshot.
  for (int step = 0; step < 100; ++step) random_step(*m, rng);
  ASSERT_TRUE(mirror.caught_up(pub, sub));
  EXPECT_EQ(mirror.on("host"), ready_keys(*m));
}

TEST(KvEvents, WithoutReplayAGapIsCountedAndTheStreamGoesOn) {
  Endpoints ep;
  KvEventPublisher pub({.endpoints = {ep.pub}});
  pub.stored("host", std::vector{key(1)}, kChunkTokens);
  pub.flush();
  KvEventSubscriber sub({.endpoint = ep.pub});
  KvEventMirror mirror;
  ASSERT_TRUE(testing::connected(pub, sub, mirror));
  pub.stored("host", std::vector{key(2)}, kChunkTokens);
  ASSERT_TRUE(mirror.caught_up(pub, sub));
  EXPECT_EQ(mirror.on("host"), (std::set{key(2)}));  // key(1) was missed for good
}

TEST(KvEvents, APublisherThatStartsAgainMakesTheSubscriberForgetWhatItAnnounced) {
  Endpoints ep;
  KvEventMirror mirror;
  auto pub = std::make_unique<KvEventPublisher>(KvEventPublisherOptions{.endpoints = {ep.pub}});
  KvEventSubscriber sub({.endpoint = ep.pub});
  ASSERT_TRUE(testing::connected(*pub, sub, mirror));
  // Many batches: the new publisher's numbers seen after it reconnects stay below them.
  for (uint64_t i = 0; i < 200; ++i) {
    pub->stored("host", std::vector{key(i % 5)}, kChunkTokens);
    pub->flush();
  }
  ASSERT_TRUE(mirror.caught_up(*pub, sub));
  ASSERT_EQ(mirror.on("host").size(), 5u);
  // The process restarts: a new publisher on the same endpoint numbers from 0 again.
  pub.reset();
  pub = std::make_unique<KvEventPublisher>(KvEventPublisherOptions{.endpoints = {ep.pub}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (sub.counters().restarts == 0 && std::chrono::steady_clock::now() < deadline) {
    pub->stored("host", std::vector{key(100)}, kChunkTokens);
    pub->flush();
    for (const KvEventBatch& b : sub.poll(std::chrono::milliseconds(10))) mirror.apply(b);
  }
  EXPECT_EQ(sub.counters().restarts, 1u);
  EXPECT_EQ(mirror.on("host"), (std::set{key(100)}));
}

// A replay endpoint that nobody answers (bound elsewhere, or not at all): each gap costs a replay
// that times out, and the requests that pile up in the socket must never block the subscriber's
// thread (the router's, or the frontend's). Batches come from a raw PUB, numbered with a gap
// before each.
// A PUB socket that sends raw batches: [topic "", 8-byte sequence number, payload].
struct RawPublisher {
  RawPublisher(zmq::context_t& context, const std::string& endpoint, std::string batch)
      : socket(context, zmq::socket_type::pub), payload(std::move(batch)) {
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(endpoint);
  }
  void send(uint64_t seq) {
    socket.send(zmq::buffer(std::string()), zmq::send_flags::sndmore);
    socket.send(zmq::buffer(encode_sequence(seq)), zmq::send_flags::sndmore);
    socket.send(zmq::buffer(payload), zmq::send_flags::none);
  }
  // Sends batch 0 until `sub` received it (a PUB drops what it sends before a subscription).
  void until_subscribed(KvEventSubscriber& sub) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (sub.counters().batches == 0 && std::chrono::steady_clock::now() < deadline) {
      send(0);
      sub.poll(std::chrono::milliseconds(10));
    }
  }
  zmq::socket_t socket;
  std::string payload;
};

TEST(KvEvents, AReplayEndpointNobodyAnswersNeverBlocksTheSubscriber) {
  Endpoints ep;
  zmq::context_t context;
  RawPublisher pub(context, ep.pub, encode_kv_event_batch(KvEventBatch{}));
  KvEventSubscriber sub({.endpoint = ep.pub,
                         .replay_endpoint = ep.replay,
                         .replay_timeout = std::chrono::milliseconds(1)});
  const auto send = [&](uint64_t seq) { pub.send(seq); };
  pub.until_subscribed(sub);
  ASSERT_EQ(sub.counters().batches, 1u);
  constexpr uint64_t kGaps = 2500;  // past the replay socket's queue (1,000 messages)
  for (uint64_t i = 1; i <= kGaps; ++i) {
    send(2 * i);
    while (sub.counters().batches <= i) sub.poll(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(sub.counters().batches, kGaps + 1);
  EXPECT_GE(sub.counters().gaps, kGaps) << "each gap stays, none is filled";
  EXPECT_LT(sub.counters().replays, kGaps) << "requests were refused once the queue was full";
}

// A publisher of raw frames (PUB and replay ROUTER) for what a real one never sends.
TEST(KvEvents, AReplayAnswerThatSkipsBatchesIsAGapAndALiveEndMarkerIsBad) {
  Endpoints ep;
  zmq::context_t context;
  const std::string payload = encode_kv_event_batch(KvEventBatch{
      .ts = 1, .events = {KvEvent{.kind = KvEventKind::kBlockRemoved, .block_hashes = {key(1)}}}});
  RawPublisher pub(context, ep.pub, payload);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind(ep.replay);
  KvEventSubscriber sub({.endpoint = ep.pub,
                         .replay_endpoint = ep.replay,
                         .replay_timeout = std::chrono::seconds(5)});
  const auto send = [&](uint64_t seq) { pub.send(seq); };
  pub.until_subscribed(sub);
  ASSERT_EQ(sub.counters().batches, 1u);
  send(UINT64_MAX);  // the replay's end marker on the live stream
  send(5);           // a gap: the subscriber asks for a replay from 1
  while (sub.counters().replays == 0) sub.poll(std::chrono::milliseconds(10));
  EXPECT_EQ(sub.counters().bad, 1u);
  std::vector<zmq::message_t> request;
  for (bool more = true; more;) {
    zmq::message_t frame;
    ASSERT_TRUE(router.recv(frame));
    more = frame.more();
    request.push_back(std::move(frame));
  }
  ASSERT_EQ(request.size(), 3u);
  EXPECT_EQ(request[2].to_string(), encode_sequence(1));
  // The answer lost batch 2: 1, then 3 (no snapshot: it does not clear all), then the end.
  for (const auto& [seq, body] : std::vector<std::pair<uint64_t, std::string>>{
           {1, payload}, {3, payload}, {UINT64_MAX, std::string()}}) {
    router.send(zmq::buffer(request[0].to_string()), zmq::send_flags::sndmore);
    router.send(zmq::message_t(), zmq::send_flags::sndmore);
    router.send(zmq::buffer(encode_sequence(seq)), zmq::send_flags::sndmore);
    router.send(zmq::buffer(body), zmq::send_flags::none);
  }
  while (sub.next_sequence() != 6u) sub.poll(std::chrono::milliseconds(10));
  EXPECT_EQ(sub.counters().batches, 4u);  // 0, 1, 3 and 5
  EXPECT_EQ(sub.counters().snapshots, 0u);
  EXPECT_EQ(sub.counters().gaps, 2u) << "2 lost in the answer, 4 between it and the live 5";
}

TEST(KvEvents, AMalformedReplayRequestGetsTheEndMarkerWithAReason) {
  Endpoints ep;
  KvEventPublisher pub({.endpoints = {ep.pub}, .replay_endpoints = {ep.replay}});
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(ep.replay);
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(std::string("abc")), zmq::send_flags::none);  // not 8 bytes
  std::vector<zmq::message_t> reply;
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  for (;;) {
    zmq::message_t frame;
    ASSERT_TRUE(dealer.recv(frame));
    const bool more = frame.more();
    reply.push_back(std::move(frame));
    if (!more) break;
  }
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(reply[1].to_string(), std::string(8, '\xff'));
  EXPECT_NE(reply[2].to_string().find("bad replay request"), std::string::npos);
  // The publisher still serves.
  pub.stored("host", std::vector{key(3)}, kChunkTokens);
  pub.flush();
  EXPECT_EQ(pub.batches_sent(), 1u);
}

TEST(KvEvents, AReplayFromFurtherBackThanAnAnswerHoldsIsASnapshot) {
  Endpoints ep;
  KvEventPublisher pub(
      {.endpoints = {ep.pub}, .replay_endpoints = {ep.replay}, .buffer_batches = 2000});
  for (uint64_t i = 0; i < 1500; ++i) {
    pub.stored("host", std::vector{key(i)}, kChunkTokens);
    pub.flush();
  }
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  dealer.connect(ep.replay);
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(encode_sequence(0)), zmq::send_flags::none);
  // Every batch is kept, but 1,500 messages would not fit the queue whole: one snapshot.
  std::vector<std::string> seqs;
  std::vector<std::string> payloads;
  while (seqs.empty() || seqs.back() != std::string(8, '\xff')) {
    std::vector<zmq::message_t> reply;
    for (bool more = true; more;) {
      zmq::message_t frame;
      ASSERT_TRUE(dealer.recv(frame));
      more = frame.more();
      reply.push_back(std::move(frame));
    }
    ASSERT_EQ(reply.size(), 3u);
    seqs.push_back(reply[1].to_string());
    payloads.push_back(reply[2].to_string());
  }
  ASSERT_EQ(seqs.size(), 2u);
  EXPECT_EQ(seqs[0], encode_sequence(1499));
  Result<KvEventBatch> snapshot = decode_kv_event_batch(payloads[0]);
  ASSERT_TRUE(snapshot);
  EXPECT_EQ(snapshot->events.size(), 1501u) << "AllBlocksCleared and every stored chunk";
}

TEST(KvEvents, APublisherThatCannotBindSaysWhich) {
  EXPECT_THROW(
      {
        try {
          KvEventPublisher pub({.endpoints = {"tcp://256.0.0.1:1"}});
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("tcp://256.0.0.1:1"), std::string::npos);
          throw;
        }
      },
      std::runtime_error);
}

}  // namespace
}  // namespace kvtier
