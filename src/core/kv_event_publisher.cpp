#include "kvtier/core/kv_event_publisher.h"

#include <chrono>
#include <deque>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <zmq.hpp>

#include "kvtier/core/log.h"

namespace kvtier {
namespace {

constexpr auto kBatchInterval = std::chrono::milliseconds(5);
const std::string kEndSequenceFrame(8, '\xff');
// A replay answers with at most this many kept batches; from further back, with a snapshot.
constexpr uint64_t kMaxReplayBatches = 512;
// Replay requests served between two batches.
constexpr int kReplaysPerTurn = 16;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// Everything only the publisher's thread touches once the constructor returned.
struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  zmq::socket_t replay;  // a null socket (false) without a replay endpoint
  std::deque<std::pair<uint64_t, std::string>> kept;  // oldest first
  struct Block {
    std::optional<ChunkKey> parent;
    std::vector<TokenId> tokens;
    uint32_t block_size = 0;
  };
  // What the events sent so far say is stored: medium -> hash -> block.
  std::map<std::string, std::unordered_map<ChunkKey, Block, ChunkKeyHash>, std::less<>> stored;
};

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions options)
    : options_(std::move(options)), sockets_(std::make_unique<Sockets>()) {
  if (options_.endpoints.empty()) {
    throw std::invalid_argument("KvEventPublisher: no endpoint to publish on");
  }
  if (options_.buffer_batches == 0) {
    throw std::invalid_argument("KvEventPublisher: buffer_batches must be at least 1");
  }
  auto bind = [](zmq::socket_t& socket, const std::string& endpoint) {
    try {
      socket.bind(endpoint);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error("KV events: cannot bind " + endpoint + ": " + e.what());
    }
    return socket.get(zmq::sockopt::last_endpoint);
  };
  sockets_->pub.set(zmq::sockopt::linger, 0);
  sockets_->pub.set(zmq::sockopt::sndhwm, 100000);
  for (const std::string& e : options_.endpoints) bound_.push_back(bind(sockets_->pub, e));
  if (!options_.replay_endpoints.empty()) {
    sockets_->replay = zmq::socket_t(sockets_->context, zmq::socket_type::router);
    sockets_->replay.set(zmq::sockopt::linger, 0);
    // An answer's messages fit a subscriber's queue whole (a ROUTER drops what does not).
    sockets_->replay.set(zmq::sockopt::sndhwm, static_cast<int>(2 * kMaxReplayBatches));
    for (const std::string& e : options_.replay_endpoints) {
      replay_bound_.push_back(bind(sockets_->replay, e));
    }
  }
  thread_ = std::thread([this] { run(); });
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void KvEventPublisher::stored(std::string_view medium, std::span<const ChunkKey> keys,
                              uint32_t block_size, std::optional<ChunkKey> parent,
                              std::span<const TokenId> tokens) {
  if (keys.empty()) return;
  add(KvEvent{.kind = KvEventKind::kBlockStored,
              .block_hashes = {keys.begin(), keys.end()},
              .parent = parent,
              .token_ids = {tokens.begin(), tokens.end()},
              .block_size = block_size,
              .medium = std::string(medium)});
}

void KvEventPublisher::removed(std::string_view medium, std::span<const ChunkKey> keys) {
  if (keys.empty()) return;
  add(KvEvent{.kind = KvEventKind::kBlockRemoved,
              .block_hashes = {keys.begin(), keys.end()},
              .medium = std::string(medium)});
}

void KvEventPublisher::cleared() {
  add(KvEvent{.kind = KvEventKind::kAllBlocksCleared});
}

void KvEventPublisher::add(KvEvent event) {
  std::lock_guard lock(mutex_);
  ++reported_;
  if (!pending_.empty()) {
    KvEvent& last = pending_.back();
    // A store that continues the previous one joins it: one event per run of a sequence.
    if (event.kind == KvEventKind::kBlockStored && last.kind == KvEventKind::kBlockStored &&
        last.medium == event.medium && last.block_size == event.block_size && event.parent &&
        *event.parent == last.block_hashes.back() &&
        last.token_ids.size() == last.block_hashes.size() * last.block_size &&
        event.token_ids.size() == event.block_hashes.size() * event.block_size) {
      last.block_hashes.insert(last.block_hashes.end(), event.block_hashes.begin(),
                               event.block_hashes.end());
      last.token_ids.insert(last.token_ids.end(), event.token_ids.begin(), event.token_ids.end());
      return;
    }
  }
  pending_.push_back(std::move(event));
}

void KvEventPublisher::flush() {
  std::unique_lock lock(mutex_);
  const uint64_t target = reported_;
  ++flush_requests_;
  wake_.notify_all();
  sent_.wait(lock, [&] { return flushed_ >= target; });
}

uint64_t KvEventPublisher::batches_sent() const {
  std::lock_guard lock(mutex_);
  return next_seq_;
}

void KvEventPublisher::run() {
  uint64_t seen_flushes = 0;
  for (;;) {
    std::vector<KvEvent> events;
    uint64_t reported = 0;
    bool stopping = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, kBatchInterval,
                     [&] { return stopping_ || flush_requests_ != seen_flushes; });
      seen_flushes = flush_requests_;
      events = std::exchange(pending_, {});
      reported = reported_;
      stopping = stopping_;
    }
    if (!events.empty()) send(std::move(events));
    {
      std::lock_guard lock(mutex_);
      flushed_ = reported;
    }
    sent_.notify_all();
    if (stopping) return;
    serve_replay();
  }
}

void KvEventPublisher::send(std::vector<KvEvent> events) {
  for (const KvEvent& e : events) apply(e);
  uint64_t seq;
  {
    std::lock_guard lock(mutex_);
    seq = next_seq_;
  }
  std::string payload = encode_kv_event_batch({.ts = now_seconds(),
                                               .events = std::move(events),
                                               .data_parallel_rank = options_.data_parallel_rank});
  try {
    Sockets& s = *sockets_;
    s.pub.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore);
    s.pub.send(zmq::buffer(encode_sequence(seq)), zmq::send_flags::sndmore);
    s.pub.send(zmq::buffer(payload), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    log_warning("KV events: sending a batch failed (it stays in the replay buffer)",
                {{"error", e.what()}});
  }
  sockets_->kept.emplace_back(seq, std::move(payload));
  if (sockets_->kept.size() > options_.buffer_batches) sockets_->kept.pop_front();
  std::lock_guard lock(mutex_);
  ++next_seq_;
}

void KvEventPublisher::apply(const KvEvent& e) {
  auto& stored = sockets_->stored;
  switch (e.kind) {
    case KvEventKind::kBlockStored: {
      auto& blocks = stored[e.medium];
      // With their tokens the blocks are a chain (docs/events.md); without, only a set.
      const bool with_tokens =
          !e.token_ids.empty() && e.token_ids.size() == e.block_hashes.size() * e.block_size;
      for (size_t i = 0; i < e.block_hashes.size(); ++i) {
        Sockets::Block b{.block_size = e.block_size};
        if (with_tokens) b.parent = i == 0 ? e.parent : e.block_hashes[i - 1];
        if (with_tokens) {
          b.tokens.assign(e.token_ids.begin() + static_cast<ptrdiff_t>(i * e.block_size),
                          e.token_ids.begin() + static_cast<ptrdiff_t>((i + 1) * e.block_size));
        }
        blocks.insert_or_assign(e.block_hashes[i], std::move(b));
      }
      return;
    }
    case KvEventKind::kBlockRemoved: {
      auto it = stored.find(e.medium);
      if (it == stored.end()) return;
      for (const ChunkKey& key : e.block_hashes) it->second.erase(key);
      return;
    }
    case KvEventKind::kAllBlocksCleared:
      stored.clear();
      return;
  }
}

std::string KvEventPublisher::snapshot() const {
  KvEventBatch batch{.ts = now_seconds(), .data_parallel_rank = options_.data_parallel_rank};
  batch.events.push_back({.kind = KvEventKind::kAllBlocksCleared});
  for (const auto& [medium, blocks] : sockets_->stored) {
    for (const auto& [key, b] : blocks) {
      batch.events.push_back({.kind = KvEventKind::kBlockStored,
                              .block_hashes = {key},
                              .parent = b.parent,
                              .token_ids = b.tokens,
                              .block_size = b.block_size,
                              .medium = medium});
    }
  }
  return encode_kv_event_batch(batch);
}

void KvEventPublisher::serve_replay() {
  if (!sockets_->replay) return;
  zmq::socket_t& router = sockets_->replay;
  // A few requests per turn: a flood of them does not hold up the batches.
  for (int served = 0; served < kReplaysPerTurn; ++served) {
    std::vector<zmq::message_t> frames;
    for (;;) {
      zmq::message_t frame;
      if (!router.recv(frame, zmq::recv_flags::dontwait)) break;
      const bool more = frame.more();
      frames.push_back(std::move(frame));
      if (!more) break;
    }
    if (frames.empty()) return;
    auto reply = [&](const std::string& seq, const std::string& payload) {
      router.send(zmq::buffer(frames[0].to_string_view()), zmq::send_flags::sndmore);
      router.send(zmq::message_t(), zmq::send_flags::sndmore);
      router.send(zmq::buffer(seq), zmq::send_flags::sndmore);
      router.send(zmq::buffer(payload), zmq::send_flags::none);
    };
    std::optional<uint64_t> start;
    if (frames.size() == 3 && frames[1].empty()) {
      start = decode_sequence(frames[2].to_string_view());
    }
    if (!start) {
      reply(kEndSequenceFrame,
            "bad replay request: want [\"\", 8-byte big-endian start sequence number], got " +
                std::to_string(frames.size() - 1) + " frames");
      continue;
    }
    const std::deque<std::pair<uint64_t, std::string>>& kept = sockets_->kept;
    if (!kept.empty() && *start <= kept.back().first) {
      if (*start >= kept.front().first && kept.back().first - *start < kMaxReplayBatches) {
        for (const auto& [seq, payload] : kept) {
          if (seq >= *start) reply(encode_sequence(seq), payload);
        }
      } else {
        reply(encode_sequence(kept.back().first), snapshot());
      }
    }
    reply(kEndSequenceFrame, "");
  }
}

}  // namespace kvtier
