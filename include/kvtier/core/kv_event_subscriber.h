// KvEventSubscriber: the receiving end of a KvEventPublisher (kv_event_publisher.h): it
// subscribes to the PUB endpoint and hands out the batches in sequence order, asking the
// replay endpoint for what it missed (docs/events.md, "Subscribing").
//
// - The first batch received, or one past a gap (its sequence number is above the next
//   expected), starts a replay from the first missing number; batches received meanwhile are
//   held and handed out after the replay's (those it already covered are dropped). A replay
//   may answer with a snapshot (its batch starts with AllBlocksCleared), which replaces all the
//   subscriber's caller knew.
// - Without a replay endpoint, or when the replay does not end within `replay_timeout`, the
//   subscriber goes on from what it has and counts the gap: the caller's view may miss events.
// - A batch numbered below the next expected is one a replay already handed out (dropped), or,
//   when it was sent later than every batch handed out (its `ts`), a sign that the publisher
//   started again (numbers restart at 0): an AllBlocksCleared batch is handed out before it.
// - A payload that does not decode is counted, logged once and skipped; so is a live batch
//   numbered as the replay's end marker.
// - A replayed batch numbered past the next expected is a snapshot only when it starts with
//   AllBlocksCleared; otherwise batches of the answer were lost (a gap).
// Not thread-safe: one thread polls it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/core/kv_event_batch.h"

namespace kvtier {

struct KvEventSubscriberOptions {
  std::string endpoint;         // the publisher's PUB endpoint, connected
  std::string replay_endpoint;  // its ROUTER endpoint; empty: no replay
  std::string topic;            // prefix of the topics received; empty: all
  Duration replay_timeout = std::chrono::seconds(1);
};

struct KvEventSubscriberCounters {
  uint64_t batches = 0;    // handed out (replayed ones included)
  uint64_t replays = 0;    // replay requests sent
  uint64_t snapshots = 0;  // replays answered with a snapshot
  uint64_t gaps = 0;       // gaps left unfilled (no replay, or it timed out)
  uint64_t restarts = 0;   // the publisher's numbers started again
  uint64_t bad = 0;        // payloads that did not decode
};

class KvEventSubscriber {
 public:
  // std::runtime_error naming the endpoint when it cannot be connected to.
  explicit KvEventSubscriber(KvEventSubscriberOptions options);
  ~KvEventSubscriber();

  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  // The batches that arrived, in order, waiting at most `timeout` for something to arrive.
  std::vector<KvEventBatch> poll(Duration timeout);
  // The sequence number of the next batch expected; nullopt before the first.
  std::optional<uint64_t> next_sequence() const { return next_; }
  KvEventSubscriberCounters counters() const { return counters_; }

 private:
  struct Sockets;
  struct Held {
    uint64_t seq;
    std::string payload;
  };
  void on_live(uint64_t seq, std::string payload, std::vector<KvEventBatch>& out);
  void on_replay(uint64_t seq, std::string payload, std::vector<KvEventBatch>& out);
  // Whether the request went out (a replay endpoint nobody answers refuses it in the end).
  bool start_replay(uint64_t from);
  void end_replay(std::vector<KvEventBatch>& out);
  void deliver(uint64_t seq, const std::string& payload, std::vector<KvEventBatch>& out);
  void deliver(uint64_t seq, Result<KvEventBatch> batch, std::vector<KvEventBatch>& out);

  const KvEventSubscriberOptions options_;
  std::unique_ptr<Sockets> sockets_;
  std::optional<uint64_t> next_;
  bool replaying_ = false;
  TimePoint replay_deadline_{};
  std::deque<Held> held_;
  double last_ts_ = 0;  // the latest `ts` handed out
  bool logged_bad_ = false;
  KvEventSubscriberCounters counters_;
};

}  // namespace kvtier
