#include "kvtier/transfer/transfer_engine.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "kvtier/core/keep_forever.h"
#include "kvtier/device/device_fault.h"
#include "resource_pools.h"

namespace kvtier {

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::kCompleted:
      return "completed";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kUnprovable:
      return "unprovable";
  }
  return "unknown";
}

TransferOptions transfer_options(const TransferConfig& config) {
  return TransferOptions{.deadline = seconds_to_duration(config.transfer_deadline_s),
                         .max_batch_descriptors = config.max_batch_descriptors,
                         .coalesce = config.coalesce,
                         .query_fault_limit = config.query_fault_limit};
}

// A stream that consecutive transfers of one direction share while it sees no fault, so they
// run back to back without cross-stream hand-offs. It returns to the pool when its last
// transfer is reported; one that saw a fault takes no new transfer and is never pooled (F6).
struct TransferEngine::Lane {
  StreamHandle stream;
  size_t users = 0;         // transfers on it not yet reported
  bool faulted = false;     // some transfer on it saw a device fault
  bool unprovable = false;  // some transfer on it is Unprovable: quarantine (F7)
};

struct TransferEngine::Pools {
  ResourcePool<StreamHandle> streams;
  ResourcePool<EventHandle> events;
  ResourcePool<DescriptorBuffer> buffers;
};

struct TransferEngine::Transfer {
  JobId job = 0;
  Direction direction = Direction::kStore;
  TimePoint deadline{};
  std::shared_ptr<Lane> lane;
  EventHandle fence{};  // recorded on the compute stream (F10)
  EventHandle end{};    // end marker, recorded after the last enqueued copy
  bool end_recorded = false;
  bool holds_device_resources = false;  // lane, fence and end were acquired
  DescriptorBuffer buffer;
  size_t descriptors = 0;
  size_t enqueued = 0;  // descriptors handed to the device
  uint64_t bytes = 0;
  bool faulted = false;  // a device fault was seen; outcome can be Failed at best
  bool sticky = false;   // the fault poisoned the device context
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
      pools_(new Pools{.streams = make_stream_pool(device),
                       .events = make_event_pool(device),
                       .buffers = make_descriptor_buffer_pool()}) {
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
    for (Transfer& t : q) keep_forever(std::move(t.buffer));
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

void TransferEngine::check(std::span<const ChunkTransfer> chunks) const {
  check_chunk_transfers(layout_, caches_, slots_, chunks);
}

void TransferEngine::submit(JobId job, Direction direction, std::span<const ChunkTransfer> chunks) {
  if (find(job)) {
    throw std::invalid_argument("TransferEngine::submit: job " + std::to_string(job) +
                                " is already in flight");
  }
  auto& fifo = fifo_[static_cast<int>(direction)];
  Transfer t;
  t.job = job;
  t.direction = direction;
  t.deadline = clock_.now() + options_.deadline;
  t.buffer = pools_->buffers.acquire();
  // Bad arguments propagate (F2); nothing is enqueued yet.
  try {
    *t.buffer =
        build_copy_descriptors(layout_, caches_, slots_, direction, chunks, options_.coalesce);
  } catch (...) {
    pools_->buffers.release(std::move(t.buffer));
    throw;
  }
  t.descriptors = t.buffer->size();
  for (const CopyDescriptor& d : *t.buffer) t.bytes += d.bytes;
  const int d = static_cast<int>(direction);

  if (closed_[d]) {
    // Nothing is enqueued: safe to fail, and reported behind the Unprovable transfer.
    t.faulted = true;
    t.error = "not submitted: an earlier " + std::string(to_string(direction)) +
              " transfer is unprovable (fail-stop)";
    t.outcome = Outcome::kFailed;
    ++stats_.submitted;
    fifo.push_back(std::move(t));
    return;
  }

  // F5: per-direction FIFO. A transfer on the same lane is ordered by its stream; otherwise it
  // waits for the newest end marker still in flight, which completes only after every earlier
  // transfer of the direction (each waited for its predecessor the same way).
  const Transfer* predecessor = nullptr;
  for (auto it = fifo.rbegin(); it != fifo.rend(); ++it) {
    if (it->end_recorded) {
      predecessor = &*it;
      break;
    }
  }
  // The device resources first, before anything counts on them: creating a stream or an event
  // can fault (CUDA reports an earlier asynchronous error there, or runs out of memory). Nothing
  // is enqueued then: the transfer is Failed, or Unprovable when the fault is sticky (F1, F7).
  // What was created meanwhile saw no fault: it goes back to its pool.
  auto& lane = lanes_[d];
  std::optional<StreamHandle> new_stream;
  std::optional<EventHandle> fence;
  std::optional<EventHandle> end;
  try {
    if (!lane || lane->faulted) new_stream = pools_->streams.acquire();
    fence = pools_->events.acquire();
    end = pools_->events.acquire();
  } catch (const DeviceFault& fault) {
    if (new_stream) pools_->streams.release(*new_stream);
    if (fence) pools_->events.release(*fence);
    t.faulted = true;
    t.sticky = fault.sticky();
    t.error = std::string("device resources: ") + fault.what();
    t.outcome = t.sticky ? Outcome::kUnprovable : Outcome::kFailed;
    if (t.sticky) fail_stop(direction, true);
    ++stats_.submitted;
    fifo.push_back(std::move(t));
    return;
  }
  if (new_stream) lane = std::make_shared<Lane>(Lane{.stream = *new_stream});
  t.lane = lane;
  ++lane->users;
  const StreamHandle stream = lane->stream;
  t.fence = *fence;
  t.end = *end;
  t.holds_device_resources = true;
  const size_t cap = std::min(options_.max_batch_descriptors, device_.max_descriptors_per_call());
  const std::span<const CopyDescriptor> all(*t.buffer);
  try {
    size_t slice_size = 0;
    try {
      // F10: stores read KV the forward pass finished; loads land after earlier writes.
      device_.record(t.fence, compute_stream_);
      device_.wait_event(stream, t.fence);
      if (predecessor && predecessor->lane != t.lane) device_.wait_event(stream, predecessor->end);
      for (size_t offset = 0; offset < all.size(); offset += cap) {
        slice_size = std::min(cap, all.size() - offset);
        ++stats_.copy_calls;
        device_.copy_batch(stream, copy_kind(direction), all.subspan(offset, slice_size));
        t.enqueued += slice_size;
        stats_.descriptors_submitted += slice_size;
        slice_size = 0;  // a fault from here on is before the next slice
      }
    } catch (const DeviceFault& fault) {
      t.faulted = true;
      t.sticky = fault.sticky();
      t.error = std::string("submit: ") + fault.what();
      // Without an index, assume the whole slice may have been enqueued.
      const size_t partial = fault.descriptor_index().value_or(slice_size);
      t.enqueued += partial;
      stats_.descriptors_submitted += partial;
    }
    // F5: the end marker goes on the (possibly failing) stream after the last enqueued copy,
    // so the job is reported only when every copy it enqueued has stopped.
    try {
      device_.record(t.end, stream);
      t.end_recorded = true;
    } catch (const DeviceFault& fault) {
      t.faulted = true;
      t.sticky = t.sticky || fault.sticky();
      t.error += (t.error.empty() ? "" : "; ") + std::string("end marker: ") + fault.what();
      // With no copy enqueued nothing of this job can run: Failed. Otherwise nobody can tell
      // when the enqueued copies stop: Unprovable (F7).
      t.outcome = t.enqueued == 0 ? Outcome::kFailed : Outcome::kUnprovable;
    }
  } catch (...) {
    // Not a device fault (F2): propagate unchanged. Copies may be enqueued and will read the
    // descriptor buffer, so everything this job holds is kept forever and the direction
    // takes no more work.
    t.lane->faulted = t.lane->unprovable = true;
    release_lane(t, Outcome::kUnprovable);
    pools_->events.quarantine(t.fence);
    pools_->events.quarantine(t.end);
    pools_->buffers.quarantine(std::move(t.buffer));
    fail_stop(direction, false);
    throw;
  }
  if (t.faulted) t.lane->faulted = true;
  if (t.sticky) t.outcome = Outcome::kUnprovable;  // the device context is lost (F7)
  if (t.outcome == Outcome::kUnprovable) fail_stop(direction, t.sticky);
  ++stats_.submitted;
  fifo.push_back(std::move(t));
}

void TransferEngine::fail_stop(Direction direction, bool whole_device) {
  fail_stopped_ = true;
  closed_[static_cast<int>(direction)] = true;
  if (whole_device) {
    // Nothing on the device can be shown to have stopped: every transfer in flight, in both
    // directions, is Unprovable.
    closed_[0] = closed_[1] = poisoned_[0] = poisoned_[1] = true;
  }
}

void TransferEngine::decide(Transfer& t, bool poisoned) {
  if (t.outcome) return;
  if (poisoned) {
    t.error += (t.error.empty() ? "" : "; ") + std::string("queued behind an unprovable transfer");
    t.outcome = Outcome::kUnprovable;
    return;
  }
  bool done = false;
  try {
    done = device_.query(t.end);
  } catch (const DeviceFault& fault) {
    t.faulted = true;
    t.lane->faulted = true;  // F6: no new transfer goes on this stream
    t.error += (t.error.empty() ? "" : "; ") + std::string("query: ") + fault.what();
    if (fault.sticky() || ++t.query_faults >= options_.query_fault_limit) {
      t.error += fault.sticky() ? " (sticky)" : " (device keeps erroring)";
      t.outcome = Outcome::kUnprovable;
      fail_stop(t.direction, fault.sticky());
      return;
    }
  }
  if (done) {
    t.outcome = t.faulted ? Outcome::kFailed : Outcome::kCompleted;
  } else if (clock_.now() >= t.deadline) {
    // F8: a timeout never authorizes reuse of a buffer.
    t.error += (t.error.empty() ? "" : "; ") + std::string("deadline exceeded");
    t.outcome = Outcome::kUnprovable;
    fail_stop(t.direction, false);
  }
}

void TransferEngine::finish(Transfer& t) {
  if (!t.outcome) throw std::logic_error("TransferEngine::finish: job has no outcome yet");
  const Outcome outcome = *t.outcome;
  if (outcome == Outcome::kCompleted) {
    ++stats_.completed;
    stats_.bytes_completed += t.bytes;
  } else if (outcome == Outcome::kFailed) {
    ++stats_.failed;
  } else {
    ++stats_.unprovable;
    fail_stop(t.direction, false);
    poisoned_[static_cast<int>(t.direction)] = true;  // for the transfers queued behind it
  }
  if (!t.holds_device_resources) {
    // Failed before acquiring anything (poisoned direction): the buffer saw no fault.
    pools_->buffers.release(std::move(t.buffer));
    return;
  }
  release_lane(t, outcome);
  switch (outcome) {
    case Outcome::kCompleted:
      pools_->events.release(t.fence);
      pools_->events.release(t.end);
      pools_->buffers.release(std::move(t.buffer));
      break;
    case Outcome::kFailed:
      // F6: the end marker completed (or nothing was enqueued), so nothing uses these any
      // more; they saw a fault, so they are destroyed, never pooled.
      pools_->events.discard(t.fence);
      pools_->events.discard(t.end);
      pools_->buffers.discard(std::move(t.buffer));
      break;
    case Outcome::kUnprovable:
      // F7: the device may still run these copies: keep everything they touch forever.
      pools_->events.quarantine(t.fence);
      pools_->events.quarantine(t.end);
      pools_->buffers.quarantine(std::move(t.buffer));
      break;
  }
}

void TransferEngine::release_lane(Transfer& t, Outcome outcome) {
  Lane& lane = *t.lane;
  if (outcome != Outcome::kCompleted) lane.faulted = true;
  if (outcome == Outcome::kUnprovable) lane.unprovable = true;
  if (--lane.users > 0) return;
  // Every transfer on the lane has been reported: none of its copies can still run, unless
  // one of them is Unprovable.
  if (lane.unprovable) {
    pools_->streams.quarantine(lane.stream);
  } else if (lane.faulted) {
    pools_->streams.discard(lane.stream);
  } else {
    pools_->streams.release(lane.stream);
  }
  auto& current = lanes_[static_cast<int>(t.direction)];
  if (current == t.lane) current.reset();
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
      results.push_back(TransferResult{t.job, t.direction, *t.outcome, t.bytes, t.descriptors,
                                       std::move(t.error)});
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
        t->lane->faulted = true;
        t->error += (t->error.empty() ? "" : "; ") + std::string("wait: ") + fault.what();
        ++t->query_faults;
        break;
      }
      if (clock_.now() >= t->deadline) break;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
    }
  }
}

bool TransferEngine::fence_compute(std::span<const JobId> jobs) {
  bool fenced = true;
  for (JobId job : jobs) {
    Transfer* t = find(job);
    if (!t || t->enqueued == 0) continue;
    if (!t->end_recorded) {
      fenced = false;
      continue;
    }
    try {
      device_.wait_event(compute_stream_, t->end);
    } catch (const DeviceFault& fault) {
      // F7: the forward pass may now run beside the copies into its blocks. Whatever they
      // end as, what the pass read is unknown: the job is Unprovable and the engine stops.
      fenced = false;
      t->faulted = true;
      t->sticky = t->sticky || fault.sticky();
      t->error += (t->error.empty() ? "" : "; ") + std::string("compute fence: ") + fault.what();
      t->outcome = Outcome::kUnprovable;
      fail_stop(t->direction, fault.sticky());
    }
  }
  return fenced;
}

size_t TransferEngine::in_flight() const {
  return fifo_[0].size() + fifo_[1].size();
}

TransferStats TransferEngine::stats() const {
  TransferStats s = stats_;
  s.streams = pools_->streams.counts();
  s.events = pools_->events.counts();
  s.descriptor_buffers = pools_->buffers.counts();
  return s;
}

Status TransferEngine::audit() const {
  if (in_flight() != 0) {
    return make_error(ErrorCode::kFailedPrecondition,
                      "audit: " + std::to_string(in_flight()) + " transfers still in flight");
  }
  const std::pair<const char*, PoolCounts> pools[] = {
      {"streams", pools_->streams.counts()},
      {"events", pools_->events.counts()},
      {"descriptor buffers", pools_->buffers.counts()}};
  for (const auto& [name, c] : pools) {
    if (!c.conserved() || c.in_use != 0) {
      return make_error(ErrorCode::kInternal, std::string("audit: ") + name + " leaked: created " +
                                                  std::to_string(c.created) + ", in use " +
                                                  std::to_string(c.in_use) + ", pooled " +
                                                  std::to_string(c.pooled) + ", discarded " +
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
