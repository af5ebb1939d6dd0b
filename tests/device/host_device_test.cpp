// What only the host device's model promises beyond the Device contract (device_contract_test
// proves that part): copies read their descriptors when they run, quiesce() returns once every
// stream is idle or blocked, and destroyed streams are reaped.
#include "kvtier/device/host_device.h"

#include <gtest/gtest.h>

#include <vector>

#include "gate.h"
#include "support/byte_pattern.h"
#include "support/device_io.h"

namespace kvtier {
namespace {

using testing::fill_pattern;
using testing::is_zero;
using testing::PinnedBuffer;

TEST(HostDevice, CopiesReadDescriptorsWhenTheyRunNotWhenSubmitted) {
  // A DMA engine reads the descriptor buffer while it works: a buffer changed after submit
  // changes what is copied. This is why the transfer engine never reuses a buffer early (F6).
  HostDevice device;
  const DeviceAddress dev = device.allocate(8192);
  PinnedBuffer host(device, 8192);
  fill_pattern(reinterpret_cast<void*>(dev), 8192, 3);
  const StreamHandle s = device.create_stream();
  const EventHandle done = device.create_event();
  Gate gate;
  device.launch_host_func(s, [&] { gate.wait(); });
  std::vector<CopyDescriptor> buffer{{dev, host.addr(), 4096}};
  device.copy_batch(s, CopyKind::kDeviceToHost, buffer);
  device.record(done, s);
  device.quiesce();
  buffer[0] = CopyDescriptor{dev + 4096, host.addr() + 4096, 4096};  // reused too early
  gate.open();
  device.synchronize(done);
  EXPECT_TRUE(is_zero(host.data(), 4096));
  EXPECT_FALSE(is_zero(host.data() + 4096, 4096));
}

TEST(HostDevice, QuiesceReturnsWhileStreamsWaitOnGatesAndEvents) {
  HostDevice device;
  const StreamHandle a = device.create_stream();
  const StreamHandle b = device.create_stream();
  const EventHandle after_a = device.create_event();
  Gate gate;
  bool b_ran = false;
  device.launch_host_func(a, [&] { gate.wait(); });
  device.record(after_a, a);
  device.wait_event(b, after_a);
  device.launch_host_func(b, [&] { b_ran = true; });
  device.quiesce();  // a blocks on the gate, b on a's event: both count as quiet
  EXPECT_FALSE(b_ran);
  gate.open();
  device.quiesce();
  EXPECT_TRUE(b_ran);
}

TEST(HostDevice, DestroyedStreamsAreNotLive) {
  HostDevice device;
  const StreamHandle s = device.create_stream();
  const EventHandle e = device.create_event();
  Gate gate;
  device.launch_host_func(s, [&] { gate.wait(); });
  device.record(e, s);
  device.destroy_stream(s);
  EXPECT_EQ(device.live_streams(), 0u);
  gate.open();
  device.synchronize(e);
  EXPECT_TRUE(device.query(e));
}

}  // namespace
}  // namespace kvtier
