#include "kvtier/core/kv_event_subscriber.h"

#include <algorithm>
#include <stdexcept>
#include <zmq.hpp>

#include "kvtier/core/log.h"

namespace kvtier {
namespace {

constexpr uint64_t kEndSequence = UINT64_MAX;

TimePoint steady_now() {
  return std::chrono::steady_clock::now();
}

std::vector<std::string> receive_frames(zmq::socket_t& socket) {
  std::vector<std::string> frames;
  for (;;) {
    zmq::message_t frame;
    if (!socket.recv(frame, zmq::recv_flags::dontwait)) break;
    frames.push_back(frame.to_string());
    if (!frame.more()) break;
  }
  return frames;
}

}  // namespace

struct KvEventSubscriber::Sockets {
  zmq::context_t context{1};
  zmq::socket_t sub{context, zmq::socket_type::sub};
  zmq::socket_t replay;  // a null socket (false) without a replay endpoint
};

KvEventSubscriber::KvEventSubscriber(KvEventSubscriberOptions options)
    : options_(std::move(options)), sockets_(std::make_unique<Sockets>()) {
  auto connect = [](zmq::socket_t& socket, const std::string& endpoint) {
    try {
      socket.connect(endpoint);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error("KV events: cannot connect to " + endpoint + ": " + e.what());
    }
  };
  sockets_->sub.set(zmq::sockopt::linger, 0);
  sockets_->sub.set(zmq::sockopt::rcvhwm, 100000);
  sockets_->sub.set(zmq::sockopt::subscribe, options_.topic);
  connect(sockets_->sub, options_.endpoint);
  if (!options_.replay_endpoint.empty()) {
    sockets_->replay = zmq::socket_t(sockets_->context, zmq::socket_type::dealer);
    sockets_->replay.set(zmq::sockopt::linger, 0);
    connect(sockets_->replay, options_.replay_endpoint);
  }
}

KvEventSubscriber::~KvEventSubscriber() = default;

std::vector<KvEventBatch> KvEventSubscriber::poll(Duration timeout) {
  std::vector<KvEventBatch> out;
  std::vector<zmq::pollitem_t> items{{sockets_->sub.handle(), 0, ZMQ_POLLIN, 0}};
  if (sockets_->replay) items.push_back({sockets_->replay.handle(), 0, ZMQ_POLLIN, 0});
  zmq::poll(items, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  for (;;) {
    bool any = false;
    if (sockets_->replay) {
      while (true) {
        std::vector<std::string> f = receive_frames(sockets_->replay);
        if (f.empty()) break;
        any = true;
        const std::optional<uint64_t> seq = f.size() == 3 ? decode_sequence(f[1]) : std::nullopt;
        if (!seq) {
          ++counters_.bad;
          continue;
        }
        on_replay(*seq, std::move(f[2]), out);
      }
    }
    std::vector<std::string> f = receive_frames(sockets_->sub);
    if (!f.empty()) {
      any = true;
      const std::optional<uint64_t> seq = f.size() == 3 ? decode_sequence(f[1]) : std::nullopt;
      if (seq && *seq != kEndSequence) {
        on_live(*seq, std::move(f[2]), out);
      } else {
        ++counters_.bad;
      }
    }
    if (!any) break;
  }
  if (replaying_ && steady_now() > replay_deadline_) {
    // The replay did not end: go on from what is held, the gap stays.
    ++counters_.gaps;
    end_replay(out);
  }
  return out;
}

void KvEventSubscriber::on_live(uint64_t seq, std::string payload, std::vector<KvEventBatch>& out) {
  if (replaying_) {
    held_.push_back({seq, std::move(payload)});
    return;
  }
  if (next_ && seq < *next_) {
    // Either a batch a replay already handed out (sent before the replay was answered, read
    // after it), or the publisher started again: a restarted one sends later batches.
    Result<KvEventBatch> batch = decode_kv_event_batch(payload);
    if (!batch || batch->ts <= last_ts_) return;
    // What it announced before is gone.
    ++counters_.restarts;
    out.push_back(KvEventBatch{.events = {KvEvent{.kind = KvEventKind::kAllBlocksCleared}}});
    next_.reset();
  }
  const uint64_t expected = next_.value_or(0);
  if (seq > expected) {
    if (sockets_->replay && start_replay(expected)) {
      held_.push_back({seq, std::move(payload)});
      return;
    }
    if (next_) ++counters_.gaps;  // a late start without replay is not counted as a gap
  }
  deliver(seq, payload, out);
}

bool KvEventSubscriber::start_replay(uint64_t from) {
  // Never blocks: requests to a replay endpoint nobody answers queue up to the socket's limit,
  // and a blocking send would then stop the caller's thread for good.
  if (!sockets_->replay.send(zmq::message_t(),
                             zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
    return false;
  }
  sockets_->replay.send(zmq::buffer(encode_sequence(from)), zmq::send_flags::dontwait);
  replaying_ = true;
  replay_deadline_ = steady_now() + options_.replay_timeout;
  ++counters_.replays;
  return true;
}

void KvEventSubscriber::on_replay(uint64_t seq, std::string payload,
                                  std::vector<KvEventBatch>& out) {
  if (!replaying_) return;  // the answer to a replay given up on
  if (seq == kEndSequence) {
    if (!payload.empty()) log_warning("KV events: replay refused", {{"reason", payload}});
    end_replay(out);
    return;
  }
  if (next_ && seq < *next_) return;
  Result<KvEventBatch> batch = decode_kv_event_batch(payload);
  if (seq > next_.value_or(0)) {
    // A snapshot comes as one batch numbered past the first missing one, and starts by clearing
    // all; any other jump lost batches of the answer.
    const bool snapshot = batch && !batch->events.empty() &&
                          batch->events.front().kind == KvEventKind::kAllBlocksCleared;
    ++(snapshot ? counters_.snapshots : counters_.gaps);
  }
  deliver(seq, std::move(batch), out);
}

void KvEventSubscriber::end_replay(std::vector<KvEventBatch>& out) {
  replaying_ = false;
  std::deque<Held> held = std::exchange(held_, {});
  for (Held& h : held) {
    if (next_ && h.seq < *next_) continue;  // the replay covered it
    if (next_ && h.seq > *next_) ++counters_.gaps;
    deliver(h.seq, h.payload, out);
  }
}

void KvEventSubscriber::deliver(uint64_t seq, const std::string& payload,
                                std::vector<KvEventBatch>& out) {
  deliver(seq, decode_kv_event_batch(payload), out);
}

void KvEventSubscriber::deliver(uint64_t seq, Result<KvEventBatch> batch,
                                std::vector<KvEventBatch>& out) {
  next_ = seq + 1;
  if (!batch) {
    ++counters_.bad;
    if (!logged_bad_) log_warning("KV events: skipped a batch", {{"error", batch.error().message}});
    logged_bad_ = true;
    return;
  }
  ++counters_.batches;
  last_ts_ = std::max(last_ts_, batch->ts);
  out.push_back(std::move(*batch));
}

}  // namespace kvtier
