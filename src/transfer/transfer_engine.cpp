#include "kvtier/transfer/transfer_engine.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "kvtier/device/device_fault.h"

namespace kvtier {

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::kCompleted: return "completed";
    case Outcome::kFailed: return "failed";
    case Outcome::kUnprovable: return "unprovable";
  }
  return "unknown";
}

struct TransferEngine::Transfer {
  JobId job = 0;
  Direction direction = Direction::kStore;
  TimePoint deadline{};
  StreamHandle stream{};
  EventHandle fence{};  // recorded on the compute stream (F10)
  EventHandle end{};    // end marker, recorded after the last enqueued copy
  bool end_recorded = false;
  bool holds_device_resources = false;  // stream, fence and end were acquired
  DescriptorBuffer buffer;
  size_t descriptors = 0;
  size_t enqueued = 0;  // descriptors handed to the device
  uint64_t bytes = 0;
  bool faulted = false;  // a device fault was seen; outcome can be Failed at best
  uint32_t query_faults = 0;
  std::string error;
  std::optional<Outcome> outcome;
};

TransferEngine::TransferEngine(Device& device, KvLayout layout, KvCacheAddresses caches,
                               HostSlots slots, StreamHandle compute_stream,
                               TransferOptions options, const Clock& clock)
    : device_(device),
      layout_(std::move(layout)),
      caches_(std::move(caches)),
      slots_(slots),
      compute_stream_(compute_stream),
      options_(options),
      clock_(clock),
      streams_(make_stream_pool(device)),
      events_(make_event_pool(device)),
      buffers_(make_descriptor_buffer_pool()) {
  if (Status s = layout_.validate(); !s) throw std::invalid_argument(s.error().message);
  validate_addresses(layout_, caches_, slots_);
  if (options_.max_batch_descriptors == 0) {
    throw std::invalid_argument("TransferEngine: max_batch_descriptors must be > 0");
  }
  if (options_.deadline <= Duration::zero()) {
    throw std::invalid_argument("TransferEngine: deadline must be > 0");
  }
}

TransferEngine::~TransferEngine() {
  // Resources of transfers still in flight may be in use by the device: leave them (the pool
  // destructors destroy only pooled resources).
  for (auto& q : fifo_) {
    for (Transfer& t : q) static_cast<void>(t.buffer.release());  // deliberately leaked
  }
}

TransferEngine::Transfer* TransferEngine::find(JobId job) {
  for (auto& q : fifo_) {
    for (Transfer& t : q) {
      if (t.job == job) return &t;
    }
  }
  return nullptr;
}

void TransferEngine::submit(JobId job, Direction direction,
                            std::span<const ChunkTransfer> chunks) {
  if (find(job)) {
    throw std::invalid_argument("TransferEngine::submit: job " + std::to_string(job) +
                                " is already in flight");
  }
  auto& fifo = fifo_[static_cast<int>(direction)];
  Transfer t;
  t.job = job;
  t.direction = direction;
  t.deadline = clock_.now() + options_.deadline;
  t.buffer = buffers_.acquire();
  // Bad arguments propagate (F2); nothing is enqueued yet.
  try {
    *t.buffer = build_copy_descriptors(layout_, caches_, slots_, direction, chunks,
                                       options_.coalesce);
  } catch (...) {
    buffers_.release(std::move(t.buffer));
    throw;
  }
  t.descriptors = t.buffer->size();
  for (const CopyDescriptor& d : *t.buffer) t.bytes += d.bytes;
  ++stats_.submitted;

  if (poisoned_[static_cast<int>(direction)]) {
    // Nothing is enqueued: safe to fail, and reported behind the Unprovable head.
    t.faulted = true;
    t.error = "not submitted: an earlier " + std::string(to_string(direction)) +
              " transfer is unprovable (fail-stop)";
    t.outcome = Outcome::kFailed;
    fifo.push_back(std::move(t));
    return;
  }

  t.stream = streams_.acquire();
  t.fence = events_.acquire();
  t.end = events_.acquire();
  t.holds_device_resources = true;
  const size_t cap = std::min(options_.max_batch_descriptors, device_.max_descriptors_per_call());
  const std::span<const CopyDescriptor> all(*t.buffer);
  try {
    // F10: stores read KV the forward pass finished; loads land after earlier writes.
    device_.record(t.fence, compute_stream_);
    device_.wait_event(t.stream, t.fence);
    // F5: per-direction FIFO. The previous end marker is in flight (not pooled) until reported.
    if (!fifo.empty() && fifo.back().end_recorded) device_.wait_event(t.stream, fifo.back().end);
    for (size_t offset = 0; offset < all.size(); offset += cap) {
      const auto slice = all.subspan(offset, std::min(cap, all.size() - offset));
      ++stats_.copy_calls;
      device_.copy_batch(t.stream, copy_kind(direction), slice);
      t.enqueued += slice.size();
      stats_.descriptors_submitted += slice.size();
    }
  } catch (const DeviceFault& fault) {
    t.faulted = true;
    t.error = std::string("submit: ") + fault.what();
    const size_t partial = fault.descriptor_index().value_or(0);
    t.enqueued += partial;
    stats_.descriptors_submitted += partial;
  }
  // F5: the end marker goes on the (possibly failing) stream after the last enqueued copy, so
  // the job is reported only when every copy it enqueued has stopped.
  try {
    device_.record(t.end, t.stream);
    t.end_recorded = true;
  } catch (const DeviceFault& fault) {
    t.faulted = true;
    t.error += (t.error.empty() ? "" : "; ") + std::string("end marker: ") + fault.what();
    // With no copy enqueued nothing of this job can run: Failed. Otherwise nobody can tell
    // when the enqueued copies stop: Unprovable (F7).
    t.outcome = t.enqueued == 0 ? Outcome::kFailed : Outcome::kUnprovable;
  }
  fifo.push_back(std::move(t));
}

void TransferEngine::decide(Transfer& t, bool poisoned) {
  if (t.outcome) return;
  if (poisoned) {
    t.error = "queued behind an unprovable transfer";
    t.outcome = Outcome::kUnprovable;
    return;
  }
  bool done = false;
  try {
    done = device_.query(t.end);
  } catch (const DeviceFault& fault) {
    t.faulted = true;
    t.error = std::string("query: ") + fault.what();
    if (++t.query_faults >= options_.query_fault_limit) {
      t.error += " (device keeps erroring)";
      t.outcome = Outcome::kUnprovable;
      return;
    }
  }
  if (done) {
    t.outcome = t.faulted ? Outcome::kFailed : Outcome::kCompleted;
  } else if (clock_.now() >= t.deadline) {
    // F8: a timeout never authorizes reuse of a buffer.
    t.error += (t.error.empty() ? "" : "; ") + std::string("deadline exceeded");
    t.outcome = Outcome::kUnprovable;
  }
}

void TransferEngine::finish(Transfer& t) {
  switch (*t.outcome) {
    case Outcome::kCompleted:
      ++stats_.completed;
      stats_.bytes_completed += t.bytes;
      streams_.release(t.stream);
      events_.release(t.fence);
      events_.release(t.end);
      buffers_.release(std::move(t.buffer));
      break;
    case Outcome::kFailed:
      ++stats_.failed;
      if (!t.holds_device_resources) {
        // Failed before acquiring device resources (poisoned direction): nothing saw a fault.
        buffers_.release(std::move(t.buffer));
        break;
      }
      // F6: the end marker completed (or nothing was enqueued), so nothing uses these any
      // more; they saw a fault, so they are destroyed, never pooled.
      streams_.discard(t.stream);
      events_.discard(t.fence);
      events_.discard(t.end);
      buffers_.discard(std::move(t.buffer));
      break;
    case Outcome::kUnprovable:
      ++stats_.unprovable;
      fail_stopped_ = true;
      poisoned_[static_cast<int>(t.direction)] = true;
      // F7: the device may still run these copies: keep everything they touch forever.
      streams_.quarantine(t.stream);
      events_.quarantine(t.fence);
      events_.quarantine(t.end);
      buffers_.quarantine(std::move(t.buffer));
      break;
  }
}

std::vector<TransferResult> TransferEngine::poll() {
  std::vector<TransferResult> results;
  for (int d = 0; d < 2; ++d) {
    auto& fifo = fifo_[d];
    // F5: only the head may be reported; a later job that is already decided waits its turn.
    while (!fifo.empty()) {
      Transfer& t = fifo.front();
      decide(t, poisoned_[d]);
      if (!t.outcome) break;
      finish(t);
      results.push_back(TransferResult{t.job, t.direction, *t.outcome, t.bytes,
                                       t.descriptors, std::move(t.error)});
      fifo.pop_front();
    }
  }
  return results;
}

void TransferEngine::wait(std::span<const JobId> jobs) {
  for (JobId job : jobs) {
    auto backoff = std::chrono::microseconds(20);
    for (;;) {
      Transfer* t = find(job);
      if (!t || t->outcome || !t->end_recorded || t->faulted) break;
      try {
        if (device_.query(t->end)) break;
      } catch (const DeviceFault& fault) {
        // F1: a fault while waiting is reported by the next poll, not raised.
        t->faulted = true;
        t->error = std::string("wait: ") + fault.what();
        ++t->query_faults;
        break;
      }
      if (clock_.now() >= t->deadline) break;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
    }
  }
}

size_t TransferEngine::in_flight() const { return fifo_[0].size() + fifo_[1].size(); }

TransferStats TransferEngine::stats() const {
  TransferStats s = stats_;
  s.streams = streams_.counts();
  s.events = events_.counts();
  s.descriptor_buffers = buffers_.counts();
  return s;
}

Status TransferEngine::audit() const {
  if (in_flight() != 0) {
    return make_error(ErrorCode::kFailedPrecondition,
                      "audit: " + std::to_string(in_flight()) + " transfers still in flight");
  }
  const std::pair<const char*, PoolCounts> pools[] = {{"streams", streams_.counts()},
                                                      {"events", events_.counts()},
                                                      {"descriptor buffers", buffers_.counts()}};
  for (const auto& [name, c] : pools) {
    if (!c.conserved() || c.in_use != 0) {
      return make_error(ErrorCode::kInternal,
                        std::string("audit: ") + name + " leaked: created " +
                            std::to_string(c.created) + ", in use " + std::to_string(c.in_use) +
                            ", pooled " + std::to_string(c.pooled) + ", discarded " +
                            std::to_string(c.discarded) + ", quarantined " +
                            std::to_string(c.quarantined));
    }
  }
  if (stats_.submitted != stats_.completed + stats_.failed + stats_.unprovable) {
    return make_error(ErrorCode::kInternal, "audit: a submitted job has no outcome");
  }
  return {};
}

}  // namespace kvtier
