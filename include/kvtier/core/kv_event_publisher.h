// KvEventPublisher: publishes the changes of one cache's contents (an engine core's, kvtierd's)
// as KV events on a ZeroMQ PUB socket, as vLLM's KV event publisher does, and answers replay
// requests on a ROUTER socket (docs/events.md is the reference).
//
// - Callers report each change where it happens (stored, removed, cleared), from any thread.
//   The publisher's own thread sends what was reported as one batch every 5 ms at most (and at
//   flush()): a multipart message [topic, 8-byte big-endian sequence number, payload], the
//   payload a KvEventBatch (kv_event_batch.h). Sequence numbers start at 0 and rise by one per
//   batch, per publisher. A BlockStored that continues the previous one (same medium and block
//   size, its parent the previous one's last hash) is merged into it.
// - The last `buffer_batches` batches are kept. A replay request on the ROUTER, [identity, "",
//   8-byte start sequence number] (a DEALER sending ["", seq], or a REQ), is answered by one
//   message [identity, "", seq, payload] per kept batch from `start` on, or, when batches
//   after `start` are no longer kept or are more than 512, by one snapshot batch: AllBlocksCleared
//   then a BlockStored for every block the publisher's events say is stored, under the sequence
//   number of the last batch sent (the snapshot reflects exactly the batches up to it). Then
//   an end marker [identity, "", 8 bytes 0xff, ""]; a malformed request gets the end marker
//   with a message saying what is wrong instead of "". Requests are served 16 at a time between
//   batches, so a flood of them does not hold up publishing.
// - The publisher binds every endpoint it is given (tcp://host:port, ipc://path); subscribers
//   connect. A PUB socket drops what a subscriber that is too slow or not connected misses: the
//   sequence numbers show the gap, and replay fills it.
// The events are a hint to routers: a lost event never affects what a cache serves.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kvtier/core/kv_event_batch.h"

namespace kvtier {

struct KvEventPublisherOptions {
  std::vector<std::string> endpoints;         // PUB: bound; at least one
  std::vector<std::string> replay_endpoints;  // ROUTER: bound; none: no replay
  size_t buffer_batches = 1024;               // kept for replay; at least 1
  std::string topic;                          // the first frame of every message
  std::optional<int64_t> data_parallel_rank;  // every batch's; the engine core's index
};

class KvEventPublisher {
 public:
  // std::runtime_error naming the endpoint when one cannot be bound; std::invalid_argument for
  // no endpoint or buffer_batches 0.
  explicit KvEventPublisher(KvEventPublisherOptions options);
  // Sends what is still pending, then closes the sockets.
  ~KvEventPublisher();

  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // `keys` became readable on `medium`; `tokens` and `parent` when the caller knows them
  // (tokens: block_size per key, in order).
  void stored(std::string_view medium, std::span<const ChunkKey> keys, uint32_t block_size,
              std::optional<ChunkKey> parent = std::nullopt, std::span<const TokenId> tokens = {});
  // `keys` stopped being readable on `medium`.
  void removed(std::string_view medium, std::span<const ChunkKey> keys);
  // Everything this publisher announced is gone.
  void cleared();
  // Returns once every event reported before the call has been sent.
  void flush();

  // The endpoints as bound (a tcp port 0 or a wildcard resolved), in the order given.
  std::vector<std::string> endpoints() const { return bound_; }
  std::vector<std::string> replay_endpoints() const { return replay_bound_; }
  // Batches sent so far (the next batch's sequence number).
  uint64_t batches_sent() const;

 private:
  struct Sockets;
  void add(KvEvent event);
  void run();
  void send(std::vector<KvEvent> events);
  void apply(const KvEvent& event);
  void serve_replay();
  std::string snapshot() const;

  const KvEventPublisherOptions options_;
  std::unique_ptr<Sockets> sockets_;  // the thread's, after construction
  std::vector<std::string> bound_;
  std::vector<std::string> replay_bound_;

  mutable std::mutex mutex_;  // guards the members up to thread_
  std::condition_variable wake_;
  std::condition_variable sent_;
  std::vector<KvEvent> pending_;
  uint64_t reported_ = 0;  // calls to add()
  uint64_t flushed_ = 0;   // calls to add() whose events were sent
  uint64_t flush_requests_ = 0;
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvtier
