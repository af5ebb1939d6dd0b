// FaultInjectingDevice: a decorator that drives the real transfer engine, unmodified, through
// every fault a device can raise (the Mooncake TENT pattern). It forwards to an inner Device and,
// per copy_batch call, applies the FaultRule its FaultPlan draws:
//   - submit failure at descriptor k after descriptors [0, k) were enqueued;
//   - an error latched on the stream that surfaces at query/synchronize (once, or forever);
//   - failure to record the next event (the end marker) on the stream;
//   - copies that hang until release_hangs(), or are delayed;
//   - a non-device error (std::logic_error) for F2.
// Thread-safe. The destructor releases hung copies so the inner device can drain.
#pragma once

#include <concepts>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvtier/core/counter_kind.h"
#include "kvtier/device/device.h"
#include "kvtier/device/fault_plan.h"

namespace kvtier {

class Gate;  // internal: the latch that hung copies wait on

struct InjectedFaultCounts {
  uint64_t copy_calls = 0;
  uint64_t submit_failures = 0;
  uint64_t latched_errors = 0;
  uint64_t query_faults = 0;  // queries/synchronizes that raised because of a latch
  uint64_t record_failures = 0;
  uint64_t hangs = 0;
  uint64_t delays = 0;
  uint64_t non_device_errors = 0;

  InjectedFaultCounts& operator+=(const InjectedFaultCounts& o);
};

// f(name, value, kind) for every field (counter_kind.h); all are counters. With a non-const
// `c`, f gets each field by reference (as a decoder fills them in).
template <class Counts, class F>
requires std::same_as<std::remove_const_t<Counts>, InjectedFaultCounts>
void visit_counters(Counts& c, F&& f) {
  using enum CounterKind;
  f("copy_calls", c.copy_calls, kCounter);
  f("submit_failures", c.submit_failures, kCounter);
  f("latched_errors", c.latched_errors, kCounter);
  f("query_faults", c.query_faults, kCounter);
  f("record_failures", c.record_failures, kCounter);
  f("hangs", c.hangs, kCounter);
  f("delays", c.delays, kCounter);
  f("non_device_errors", c.non_device_errors, kCounter);
}

class FaultInjectingDevice final : public Device {
 public:
  FaultInjectingDevice(Device& inner, FaultPlan plan);
  ~FaultInjectingDevice() override;

  void set_plan(FaultPlan plan);
  // Opens every gate that hung copies wait on.
  void release_hangs();
  // The next `count` create_stream() / create_event() calls raise DeviceFault (sticky when
  // `sticky`), as CUDA does when it reports an earlier asynchronous error there, or is out of
  // memory.
  void fail_next_creates(uint32_t count, bool sticky = false);
  // The next `count` destroy_stream() / destroy_event() calls raise DeviceFault and destroy
  // nothing, as CUDA's destroy calls return an earlier asynchronous error.
  void fail_next_destroys(uint32_t count);
  InjectedFaultCounts counts() const;
  // The stream each copy_batch call was made on, in call order.
  std::vector<StreamHandle> call_streams() const;
  // Streams that saw an injected fault (submit failure, latched error, record failure).
  std::vector<StreamHandle> faulted_streams() const;

  std::string name() const override { return "fault(" + inner_.name() + ")"; }
  size_t max_descriptors_per_call() const override { return inner_.max_descriptors_per_call(); }
  DeviceAddress allocate(size_t bytes) override { return inner_.allocate(bytes); }
  void free(DeviceAddress addr) override { inner_.free(addr); }
  DeviceAddress register_host(void* ptr, size_t bytes) override {
    return inner_.register_host(ptr, bytes);
  }
  void unregister_host(void* ptr) override { inner_.unregister_host(ptr); }
  Result<std::vector<std::byte>> export_memory(DeviceAddress addr) override {
    return inner_.export_memory(addr);
  }
  Result<DeviceAddress> import_memory(std::span<const std::byte> description) override {
    return inner_.import_memory(description);
  }
  void close_imported(DeviceAddress addr) override { inner_.close_imported(addr); }
  StreamHandle create_stream() override;
  void destroy_stream(StreamHandle stream) override;
  EventHandle create_event() override;
  void destroy_event(EventHandle event) override;
  void record(EventHandle event, StreamHandle stream) override;
  bool query(EventHandle event) override;
  void synchronize(EventHandle event) override;
  double elapsed_ms(EventHandle start, EventHandle end) override {
    return inner_.elapsed_ms(start, end);
  }
  void wait_event(StreamHandle stream, EventHandle event) override;
  void copy_batch(StreamHandle stream, CopyKind kind,
                  std::span<const CopyDescriptor> descriptors) override;
  void launch_host_func(StreamHandle stream, std::function<void()> fn) override {
    inner_.launch_host_func(stream, std::move(fn));
  }

 private:
  struct Latch {
    uint32_t remaining;  // FaultRule::kForever never runs out
  };
  struct StreamFaults {
    std::shared_ptr<Latch> latch;
    bool record_fails = false;
    bool wait_fails = false;  // on the event recorded next (FaultRule::wait_fails)
  };

  void raise_if_latched(EventHandle event);  // requires mu_ not held
  void raise_if_create_fails();              // requires mu_ not held
  void raise_if_destroy_fails();             // requires mu_ not held

  Device& inner_;
  mutable std::mutex mu_;
  FaultPlan plan_;
  uint64_t next_call_ = 0;
  InjectedFaultCounts counts_;
  std::unordered_map<uint32_t, StreamFaults> stream_faults_;
  std::unordered_map<uint32_t, std::shared_ptr<Latch>> event_latches_;
  std::unordered_set<uint32_t> failing_waits_;  // events whose first wait raises
  std::vector<std::shared_ptr<Gate>> hang_gates_;
  std::vector<StreamHandle> call_streams_;
  std::vector<StreamHandle> faulted_streams_;
  uint32_t failing_creates_ = 0;
  uint32_t failing_destroys_ = 0;
  bool failing_creates_sticky_ = false;
};

}  // namespace kvtier
