#include "kvtier/device/fault_injecting_device.h"

#include <stdexcept>
#include <thread>
#include <utility>

#include "gate.h"
#include "kvtier/device/device_fault.h"

namespace kvtier {

FaultInjectingDevice::FaultInjectingDevice(Device& inner, FaultPlan plan)
    : inner_(inner), plan_(std::move(plan)) {}

FaultInjectingDevice::~FaultInjectingDevice() {
  release_hangs();
}

void FaultInjectingDevice::set_plan(FaultPlan plan) {
  std::lock_guard lock(mu_);
  plan_ = std::move(plan);
}

void FaultInjectingDevice::release_hangs() {
  std::vector<std::shared_ptr<Gate>> gates;
  {
    std::lock_guard lock(mu_);
    gates.swap(hang_gates_);
  }
  for (auto& g : gates) g->open();
}

InjectedFaultCounts& InjectedFaultCounts::operator+=(const InjectedFaultCounts& o) {
  copy_calls += o.copy_calls;
  submit_failures += o.submit_failures;
  latched_errors += o.latched_errors;
  query_faults += o.query_faults;
  record_failures += o.record_failures;
  hangs += o.hangs;
  delays += o.delays;
  non_device_errors += o.non_device_errors;
  return *this;
}

InjectedFaultCounts FaultInjectingDevice::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

std::vector<StreamHandle> FaultInjectingDevice::call_streams() const {
  std::lock_guard lock(mu_);
  return call_streams_;
}

std::vector<StreamHandle> FaultInjectingDevice::faulted_streams() const {
  std::lock_guard lock(mu_);
  return faulted_streams_;
}

void FaultInjectingDevice::fail_next_creates(uint32_t count, bool sticky) {
  std::lock_guard lock(mu_);
  failing_creates_ = count;
  failing_creates_sticky_ = sticky;
}

void FaultInjectingDevice::raise_if_create_fails() {
  std::lock_guard lock(mu_);
  if (failing_creates_ == 0) return;
  --failing_creates_;
  throw DeviceFault("injected: creating a device resource failed", std::nullopt,
                    failing_creates_sticky_);
}

StreamHandle FaultInjectingDevice::create_stream() {
  raise_if_create_fails();
  return inner_.create_stream();
}

EventHandle FaultInjectingDevice::create_event() {
  raise_if_create_fails();
  return inner_.create_event();
}

void FaultInjectingDevice::fail_next_destroys(uint32_t count) {
  std::lock_guard lock(mu_);
  failing_destroys_ = count;
}

void FaultInjectingDevice::raise_if_destroy_fails() {
  std::lock_guard lock(mu_);
  if (failing_destroys_ == 0) return;
  --failing_destroys_;
  throw DeviceFault("injected: destroying a device resource failed");
}

void FaultInjectingDevice::destroy_stream(StreamHandle stream) {
  raise_if_destroy_fails();
  inner_.destroy_stream(stream);
  std::lock_guard lock(mu_);
  stream_faults_.erase(stream.id);
}

void FaultInjectingDevice::destroy_event(EventHandle event) {
  raise_if_destroy_fails();
  inner_.destroy_event(event);
  std::lock_guard lock(mu_);
  event_latches_.erase(event.id);
  failing_waits_.erase(event.id);
}

void FaultInjectingDevice::record(EventHandle event, StreamHandle stream) {
  std::shared_ptr<Latch> latch;
  bool wait_fails = false;
  {
    std::lock_guard lock(mu_);
    StreamFaults& f = stream_faults_[stream.id];
    if (f.record_fails) {
      f.record_fails = false;
      ++counts_.record_failures;
      throw DeviceFault("injected: event record failed");
    }
    latch = f.latch;
    wait_fails = std::exchange(f.wait_fails, false);
  }
  inner_.record(event, stream);
  std::lock_guard lock(mu_);
  if (wait_fails) failing_waits_.insert(event.id);
  if (latch) {
    event_latches_[event.id] = latch;
  } else {
    event_latches_.erase(event.id);
  }
}

void FaultInjectingDevice::wait_event(StreamHandle stream, EventHandle event) {
  {
    std::lock_guard lock(mu_);
    if (failing_waits_.erase(event.id) > 0) {
      throw DeviceFault("injected: a wait on an event could not be enqueued");
    }
  }
  inner_.wait_event(stream, event);
}

void FaultInjectingDevice::raise_if_latched(EventHandle event) {
  std::lock_guard lock(mu_);
  auto it = event_latches_.find(event.id);
  if (it == event_latches_.end() || it->second->remaining == 0) return;
  if (it->second->remaining != FaultRule::kForever) --it->second->remaining;
  ++counts_.query_faults;
  throw DeviceFault("injected: error latched on the stream");
}

bool FaultInjectingDevice::query(EventHandle event) {
  raise_if_latched(event);
  return inner_.query(event);
}

void FaultInjectingDevice::synchronize(EventHandle event) {
  raise_if_latched(event);
  inner_.synchronize(event);
}

void FaultInjectingDevice::copy_batch(StreamHandle stream, CopyKind kind,
                                      std::span<const CopyDescriptor> descriptors) {
  FaultRule rule;
  std::shared_ptr<Gate> gate;
  {
    std::lock_guard lock(mu_);
    rule = plan_.draw(next_call_++, descriptors.size(), kind);
    ++counts_.copy_calls;
    call_streams_.push_back(stream);
    if (rule.non_device_error) {
      ++counts_.non_device_errors;
      throw std::logic_error("injected: non-device error in copy_batch");
    }
    if (rule.hang) {
      gate = std::make_shared<Gate>();
      hang_gates_.push_back(gate);
      ++counts_.hangs;
    }
    if (rule.delay.count() > 0) ++counts_.delays;
    StreamFaults& f = stream_faults_[stream.id];
    if (rule.record_fails) f.record_fails = true;
    if (rule.wait_fails) f.wait_fails = true;
    if (rule.latched_errors > 0) {
      f.latch = std::make_shared<Latch>(Latch{rule.latched_errors});
      ++counts_.latched_errors;
    }
    if (rule.fail_at) ++counts_.submit_failures;
    if (rule.fail_at || rule.record_fails || rule.latched_errors > 0) {
      faulted_streams_.push_back(stream);
    }
  }
  if (gate) inner_.launch_host_func(stream, [gate] { gate->wait(); });
  if (rule.delay.count() > 0) {
    inner_.launch_host_func(stream, [d = rule.delay] { std::this_thread::sleep_for(d); });
  }
  if (!rule.fail_at) {
    inner_.copy_batch(stream, kind, descriptors);
    return;
  }
  const size_t k = std::min(*rule.fail_at, descriptors.size());
  if (k > 0) inner_.copy_batch(stream, kind, descriptors.first(k));
  if (rule.unindexed) throw DeviceFault("injected: copy_batch failed", std::nullopt, rule.sticky);
  throw DeviceFault("injected: copy_batch failed at descriptor " + std::to_string(k), k,
                    rule.sticky);
}

}  // namespace kvtier
