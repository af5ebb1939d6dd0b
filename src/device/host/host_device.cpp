#include "kvtier/device/host_device.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>
#include <stdexcept>

#include "address_ranges.h"
#include "gate.h"
#include "kvtier/core/task_pool.h"

namespace kvtier {
namespace {

// A part smaller than this costs more in the hand-off to a helper than it saves.
constexpr size_t kMinCopyPartBytes = size_t{256} << 10;

// Copies bytes [begin, end) of the descriptors' concatenated bytes.
void copy_range(std::span<const CopyDescriptor> descriptors, size_t begin, size_t end) {
  size_t at = 0;  // offset of the next descriptor's first byte
  for (const CopyDescriptor& d : descriptors) {
    const size_t d_begin = at;
    at += d.bytes;
    if (at <= begin) continue;
    if (d_begin >= end) break;
    const size_t from = std::max(begin, d_begin) - d_begin;
    const size_t to = std::min<size_t>(end, at) - d_begin;
    std::memcpy(reinterpret_cast<void*>(d.dst + from), reinterpret_cast<const void*>(d.src + from),
                to - from);
  }
}

}  // namespace

struct HostDevice::Op {
  enum class Kind { kCopy, kRecord, kWait, kHostFunc };
  Kind kind;
  std::span<const CopyDescriptor> descriptors;  // kCopy: read when executed
  uint32_t event = 0;                           // kRecord, kWait
  uint64_t generation = 0;                      // kRecord: this record; kWait: awaited
  std::function<void()> fn;                     // kHostFunc
};

struct HostDevice::Stream final : BlockedHook {
  HostDevice* device = nullptr;
  std::deque<Op> queue;
  bool running = false;          // an op is being executed
  bool blocked_on_gate = false;  // inside Gate::wait
  const Op* waiting = nullptr;   // a kWait op being executed
  bool stopping = false;
  bool exited = false;         // the thread left run_stream: join() returns at once
  std::condition_variable cv;  // this stream's thread waits here (no thundering herd)
  std::thread thread;

  void set_blocked(bool blocked) override {
    std::lock_guard lock(device->mu_);
    blocked_on_gate = blocked;
    device->changed_.notify_all();
  }
};

struct HostDevice::Event {
  uint64_t recorded = 0;       // generation of the most recent record()
  std::set<uint64_t> pending;  // generations recorded and not yet reached by their stream
  TimePoint completed_at{};

  bool done(uint64_t generation) const { return !pending.contains(generation); }
};

HostDevice::HostDevice(size_t max_descriptors_per_call, size_t copy_threads)
    : max_descriptors_per_call_(max_descriptors_per_call),
      ranges_(std::make_unique<AddressRanges>()),
      copy_threads_(copy_threads),
      copy_helpers_(copy_threads > 1 ? std::make_unique<TaskPool>(copy_threads - 1) : nullptr) {
  if (max_descriptors_per_call == 0) {
    throw std::invalid_argument("HostDevice: max_descriptors_per_call must be > 0");
  }
  if (copy_threads == 0) throw std::invalid_argument("HostDevice: copy_threads must be > 0");
}

HostDevice::~HostDevice() {
  std::vector<std::unique_ptr<Stream>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, s] : streams_) all.push_back(std::move(s));
    streams_.clear();
    for (auto& s : retired_streams_) all.push_back(std::move(s));
    retired_streams_.clear();
    for (auto& s : all) {
      s->stopping = true;
      s->cv.notify_one();
    }
  }
  for (auto& s : all) s->thread.join();
  ranges_->for_each(AddressRanges::Kind::kDevice, [this](DeviceAddress addr, size_t) {
    if (!adopted_.contains(addr)) std::free(reinterpret_cast<void*>(addr));
  });
}

DeviceAddress HostDevice::allocate(size_t bytes) {
  if (bytes == 0) throw std::invalid_argument("HostDevice::allocate: zero bytes");
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  std::lock_guard lock(mu_);
  const auto addr = reinterpret_cast<DeviceAddress>(p);
  ranges_->add(addr, bytes, AddressRanges::Kind::kDevice, "HostDevice::allocate");
  return addr;
}

void HostDevice::free(DeviceAddress addr) {
  std::lock_guard lock(mu_);
  if (adopted_.contains(addr)) {
    throw std::invalid_argument("HostDevice::free: adopted memory is the caller's to free");
  }
  ranges_->remove(addr, AddressRanges::Kind::kDevice, "HostDevice::free");
  std::free(reinterpret_cast<void*>(addr));
}

DeviceAddress HostDevice::register_host(void* ptr, size_t bytes) {
  if (!ptr || bytes == 0) throw std::invalid_argument("HostDevice::register_host: empty range");
  std::lock_guard lock(mu_);
  const auto addr = reinterpret_cast<DeviceAddress>(ptr);
  ranges_->add(addr, bytes, AddressRanges::Kind::kHost, "HostDevice::register_host");
  return addr;
}

DeviceAddress HostDevice::adopt_device_memory(void* ptr, size_t bytes) {
  if (!ptr || bytes == 0)
    throw std::invalid_argument("HostDevice::adopt_device_memory: empty range");
  std::lock_guard lock(mu_);
  const auto addr = reinterpret_cast<DeviceAddress>(ptr);
  ranges_->add(addr, bytes, AddressRanges::Kind::kDevice, "HostDevice::adopt_device_memory");
  adopted_.insert(addr);
  return addr;
}

void HostDevice::release_adopted_memory(void* ptr) {
  std::lock_guard lock(mu_);
  const auto addr = reinterpret_cast<DeviceAddress>(ptr);
  if (!adopted_.contains(addr)) {
    throw std::invalid_argument("HostDevice::release_adopted_memory: not adopted memory");
  }
  ranges_->remove(addr, AddressRanges::Kind::kDevice, "HostDevice::release_adopted_memory");
  adopted_.erase(addr);
}

void HostDevice::unregister_host(void* ptr) {
  std::lock_guard lock(mu_);
  ranges_->remove(reinterpret_cast<DeviceAddress>(ptr), AddressRanges::Kind::kHost,
                  "HostDevice::unregister_host");
}

StreamHandle HostDevice::create_stream() {
  std::lock_guard lock(mu_);
  const uint32_t id = next_stream_id_++;
  auto stream = std::make_unique<Stream>();
  stream->device = this;
  Stream* raw = stream.get();
  streams_[id] = std::move(stream);
  raw->thread = std::thread([this, raw] { run_stream(raw); });
  return StreamHandle{id};
}

void HostDevice::destroy_stream(StreamHandle stream) {
  std::lock_guard lock(mu_);
  auto it = streams_.find(stream.id);
  if (it == streams_.end()) throw std::invalid_argument("HostDevice: unknown stream");
  it->second->stopping = true;
  it->second->cv.notify_one();
  retired_streams_.push_back(std::move(it->second));
  // Reap streams whose threads finished, so discarded streams do not accumulate.
  std::erase_if(retired_streams_, [](std::unique_ptr<Stream>& r) {
    if (!r->exited) return false;
    r->thread.join();
    return true;
  });
  streams_.erase(it);
  changed_.notify_all();
}

EventHandle HostDevice::create_event() {
  std::lock_guard lock(mu_);
  const uint32_t id = next_event_id_++;
  events_[id] = std::make_unique<Event>();
  return EventHandle{id};
}

void HostDevice::destroy_event(EventHandle event) {
  std::lock_guard lock(mu_);
  if (events_.erase(event.id) == 0) throw std::invalid_argument("HostDevice: unknown event");
  wake_waiters(event.id);  // a wait on a destroyed event is over
  changed_.notify_all();
}

HostDevice::Stream& HostDevice::stream_locked(StreamHandle h) {
  auto it = streams_.find(h.id);
  if (it == streams_.end()) throw std::invalid_argument("HostDevice: unknown stream");
  return *it->second;
}

HostDevice::Event& HostDevice::event_locked(EventHandle h) {
  auto it = events_.find(h.id);
  if (it == events_.end()) throw std::invalid_argument("HostDevice: unknown event");
  return *it->second;
}

void HostDevice::enqueue(StreamHandle stream, Op op) {
  // Requires mu_.
  Stream& s = stream_locked(stream);
  s.queue.push_back(std::move(op));
  s.cv.notify_one();
}

void HostDevice::record(EventHandle event, StreamHandle stream) {
  std::lock_guard lock(mu_);
  Event& e = event_locked(event);
  Stream& s = stream_locked(stream);
  ++e.recorded;
  if (s.queue.empty() && !s.running) {
    // Nothing is enqueued before it: the event is complete at once (no thread hand-off).
    e.completed_at = SteadyClock::instance().now();
    changed_.notify_all();
    return;
  }
  e.pending.insert(e.recorded);
  enqueue(stream, Op{.kind = Op::Kind::kRecord, .event = event.id, .generation = e.recorded});
}

bool HostDevice::query(EventHandle event) {
  std::lock_guard lock(mu_);
  const Event& e = event_locked(event);
  return e.done(e.recorded);
}

void HostDevice::synchronize(EventHandle event) {
  std::unique_lock lock(mu_);
  const uint64_t awaited = event_locked(event).recorded;
  changed_.wait(lock, [&] {
    auto it = events_.find(event.id);
    return it == events_.end() || it->second->done(awaited);
  });
}

double HostDevice::elapsed_ms(EventHandle start, EventHandle end) {
  std::lock_guard lock(mu_);
  const Event& s = event_locked(start);
  const Event& e = event_locked(end);
  if (!s.done(s.recorded) || !e.done(e.recorded) || s.recorded == 0 || e.recorded == 0) {
    throw std::logic_error("HostDevice::elapsed_ms: events not recorded and completed");
  }
  return std::chrono::duration<double, std::milli>(e.completed_at - s.completed_at).count();
}

void HostDevice::wait_event(StreamHandle stream, EventHandle event) {
  std::lock_guard lock(mu_);
  const Event& e = event_locked(event);
  if (e.done(e.recorded)) {
    stream_locked(stream);
    return;  // never recorded, or already complete: nothing to wait for
  }
  enqueue(stream, Op{.kind = Op::Kind::kWait, .event = event.id, .generation = e.recorded});
}

void HostDevice::copy_batch(StreamHandle stream, CopyKind kind,
                            std::span<const CopyDescriptor> descriptors) {
  if (descriptors.size() > max_descriptors_per_call_) {
    throw std::invalid_argument("HostDevice::copy_batch: " + std::to_string(descriptors.size()) +
                                " descriptors exceed the per-call cap of " +
                                std::to_string(max_descriptors_per_call_));
  }
  std::lock_guard lock(mu_);
  ranges_->check_copies(kind, descriptors, "HostDevice::copy_batch");
  if (descriptors.empty()) {
    stream_locked(stream);
    return;
  }
  enqueue(stream, Op{.kind = Op::Kind::kCopy, .descriptors = descriptors});
}

void HostDevice::launch_host_func(StreamHandle stream, std::function<void()> fn) {
  std::lock_guard lock(mu_);
  enqueue(stream, Op{.kind = Op::Kind::kHostFunc, .fn = std::move(fn)});
}

void HostDevice::run_stream(Stream* stream) {
  current_blocked_hook = stream;
  std::unique_lock lock(mu_);
  for (;;) {
    stream->cv.wait(lock, [&] { return !stream->queue.empty() || stream->stopping; });
    if (stream->queue.empty()) {
      stream->exited = true;
      changed_.notify_all();
      break;
    }
    Op op = std::move(stream->queue.front());
    stream->queue.pop_front();
    stream->running = true;
    switch (op.kind) {
      case Op::Kind::kWait: {
        stream->waiting = &op;
        changed_.notify_all();
        stream->cv.wait(lock, [&] {
          auto it = events_.find(op.event);
          return it == events_.end() || it->second->done(op.generation);
        });
        stream->waiting = nullptr;
        break;
      }
      case Op::Kind::kRecord: {
        auto it = events_.find(op.event);
        if (it != events_.end()) {
          it->second->pending.erase(op.generation);
          it->second->completed_at = SteadyClock::instance().now();
        }
        wake_waiters(op.event);
        break;
      }
      case Op::Kind::kCopy:
        lock.unlock();
        copy(op.descriptors);
        lock.lock();
        break;
      case Op::Kind::kHostFunc:
        lock.unlock();
        op.fn();
        lock.lock();
        break;
    }
    stream->running = false;
    changed_.notify_all();
  }
}

void HostDevice::copy(std::span<const CopyDescriptor> descriptors) {
  size_t total = 0;
  for (const CopyDescriptor& d : descriptors) total += d.bytes;
  const size_t parts = copy_helpers_ ? std::min(copy_threads_, total / kMinCopyPartBytes) : 1;
  if (parts <= 1) {
    copy_range(descriptors, 0, total);
    return;
  }
  // Parts of about equal bytes, each starting a whole page into the op.
  const auto part_begin = [&](size_t i) {
    return i >= parts ? total : total / parts * i / 4096 * 4096;
  };
  // F5: run() returns once every part was copied, so the op ends only when all its bytes did.
  copy_helpers_->run(
      parts, [&](size_t i) { copy_range(descriptors, part_begin(i), part_begin(i + 1)); },
      SteadyClock::instance().now() + std::chrono::hours(24));
}

void HostDevice::wake_waiters(uint32_t event) {
  for (auto& [id, s] : streams_) {
    if (s->waiting && s->waiting->event == event) s->cv.notify_one();
  }
  for (auto& s : retired_streams_) {
    if (s->waiting && s->waiting->event == event) s->cv.notify_one();
  }
}

void HostDevice::quiesce() {
  std::unique_lock lock(mu_);
  auto stream_quiet = [&](const Stream& s) {
    if (s.blocked_on_gate) return true;
    if (s.waiting) {
      auto it = events_.find(s.waiting->event);
      return it != events_.end() && !it->second->done(s.waiting->generation);
    }
    return s.queue.empty() && !s.running;
  };
  changed_.wait(lock, [&] {
    for (const auto& [id, s] : streams_) {
      if (!stream_quiet(*s)) return false;
    }
    for (const auto& s : retired_streams_) {
      if (!stream_quiet(*s)) return false;
    }
    return true;
  });
}

size_t HostDevice::live_streams() const {
  std::lock_guard lock(mu_);
  return streams_.size();
}

}  // namespace kvtier
