// Faults injected by FaultInjectingDevice around each device (the DeviceContract instances)
// surface as device.h promises, so the transfer engine's rules hold on every device: a submit
// failure says exactly how many descriptors were enqueued (what F5 waits for), a hang holds
// copies until released, latched errors surface at query, a failed record is a DeviceFault.
#include <algorithm>
#include <vector>

#include "device_contract.h"
#include "kvtier/device/device_fault.h"
#include "kvtier/device/fault_injecting_device.h"
#include "support/device_io.h"

namespace kvtier::testing {
namespace {

// Four 1 KiB pieces of device memory holding a pattern, and a pinned host buffer for them.
// Made on the bare device, before the injector wraps it, so the plan's call 0 is the test's.
struct Pieces {
  explicit Pieces(Device& device) : device(device), host(device, 4096) {
    dev = device.allocate(4096);
    write_device(device, dev, 4096, 1);
    for (uint64_t i = 0; i < 4; ++i) down.push_back({dev + i * 1024, host.addr() + i * 1024, 1024});
  }
  ~Pieces() { device.free(dev); }
  bool piece_copied(size_t i) const {
    return std::equal(host.data() + i * 1024, host.data() + (i + 1) * 1024,
                      expected.begin() + i * 1024);
  }
  Device& device;
  PinnedBuffer host;
  DeviceAddress dev = 0;
  std::vector<CopyDescriptor> down;
  std::vector<std::byte> expected = [] {
    std::vector<std::byte> v(4096);
    fill_pattern(v.data(), v.size(), 1);
    return v;
  }();
};

TEST_P(DeviceContract, F5_InjectedSubmitFailureEnqueuesExactlyThePrefixItReports) {
  Pieces p(device());
  FaultInjectingDevice fault(device(), FaultPlan::rules({FaultRule{.call = 0, .fail_at = 2}}));
  const StreamHandle s = fault.create_stream();
  const EventHandle end = fault.create_event();
  try {
    fault.copy_batch(s, CopyKind::kDeviceToHost, p.down);
    FAIL() << "expected a DeviceFault";
  } catch (const DeviceFault& e) {
    EXPECT_EQ(e.descriptor_index(), 2u);
    EXPECT_FALSE(e.sticky());
  }
  fault.record(end, s);  // the end marker after the enqueued prefix (F5)
  fault.synchronize(end);
  EXPECT_TRUE(p.piece_copied(0));
  EXPECT_TRUE(p.piece_copied(1));
  EXPECT_TRUE(is_zero(p.host.data() + 2048, 2048)) << "nothing past the reported index ran";
}

TEST_P(DeviceContract, InjectedHangHoldsCopiesUntilReleased) {
  Pieces p(device());
  FaultInjectingDevice fault(device(), FaultPlan::rules({FaultRule{.call = 0, .hang = true}}));
  const StreamHandle s = fault.create_stream();
  const EventHandle end = fault.create_event();
  fault.copy_batch(s, CopyKind::kDeviceToHost, p.down);
  fault.record(end, s);
  EXPECT_FALSE(fault.query(end));
  EXPECT_TRUE(is_zero(p.host.data(), 4096));
  fault.release_hangs();
  fault.synchronize(end);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(p.piece_copied(i)) << i;
}

TEST_P(DeviceContract, InjectedLatchedErrorSurfacesAtQueryThenClears) {
  Pieces p(device());
  FaultInjectingDevice fault(device(),
                             FaultPlan::rules({FaultRule{.call = 0, .latched_errors = 2}}));
  const StreamHandle s = fault.create_stream();
  const EventHandle end = fault.create_event();
  fault.copy_batch(s, CopyKind::kDeviceToHost, p.down);
  fault.record(end, s);
  EXPECT_THROW(fault.query(end), DeviceFault);
  EXPECT_THROW(fault.synchronize(end), DeviceFault);
  fault.synchronize(end);
  EXPECT_TRUE(fault.query(end));
  EXPECT_EQ(fault.counts().query_faults, 2u);
}

TEST_P(DeviceContract, InjectedRecordFailureAndStickyFaultAreDeviceFaults) {
  Pieces p(device());
  FaultInjectingDevice fault(
      device(), FaultPlan::rules({FaultRule{.call = 0, .record_fails = true},
                                  FaultRule{.call = 1, .fail_at = 0, .sticky = true}}));
  const StreamHandle s = fault.create_stream();
  const EventHandle end = fault.create_event();
  fault.copy_batch(s, CopyKind::kDeviceToHost, p.down);
  EXPECT_THROW(fault.record(end, s), DeviceFault);
  try {
    fault.copy_batch(s, CopyKind::kDeviceToHost, p.down);
    FAIL() << "expected a DeviceFault";
  } catch (const DeviceFault& e) {
    EXPECT_TRUE(e.sticky());
    EXPECT_EQ(e.descriptor_index(), 0u);
  }
  fault.record(end, s);
  fault.synchronize(end);
}

}  // namespace
}  // namespace kvtier::testing
