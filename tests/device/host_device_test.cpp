// The host device's model of an accelerator: streams are ordered and concurrent, copies move
// bytes and read their descriptors when they run, events and waits follow CUDA semantics.
#include "kvtier/device/host_device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kvtier/device/gate.h"
#include "support/byte_pattern.h"

namespace kvtier {
namespace {

using testing::fill_pattern;
using testing::has_pattern;
using testing::is_zero;

struct HostBuffer {
  explicit HostBuffer(Device& d, size_t n) : device(d), bytes(n), data(n) {
    addr = device.register_host(data.data(), n);
  }
  ~HostBuffer() { device.unregister_host(data.data()); }
  Device& device;
  size_t bytes;
  std::vector<std::byte> data;
  DeviceAddress addr;
};

TEST(HostDevice, CopiesMoveBytesBothWays) {
  HostDevice device;
  const DeviceAddress dev = device.allocate(4096);
  HostBuffer host(device, 4096);
  fill_pattern(host.data.data(), 4096, 7);
  const StreamHandle s = device.create_stream();
  const EventHandle done = device.create_event();
  const std::vector<CopyDescriptor> up{{host.addr, dev, 4096}};
  device.copy_batch(s, CopyKind::kHostToDevice, up);
  device.record(done, s);
  device.synchronize(done);
  EXPECT_TRUE(has_pattern(reinterpret_cast<void*>(dev), 4096, 7));
  fill_pattern(reinterpret_cast<void*>(dev), 4096, 9);
  const std::vector<CopyDescriptor> down{{dev, host.addr, 4096}};
  device.copy_batch(s, CopyKind::kDeviceToHost, down);
  device.record(done, s);
  device.synchronize(done);
  EXPECT_TRUE(has_pattern(host.data.data(), 4096, 9));
}

TEST(HostDevice, WorkOnAStreamRunsInOrderAndEventsReportIt) {
  HostDevice device;
  const StreamHandle s = device.create_stream();
  const EventHandle e = device.create_event();
  EXPECT_TRUE(device.query(e)) << "an event never recorded is complete";
  Gate gate;
  std::vector<int> order;
  device.launch_host_func(s, [&] {
    gate.wait();
    order.push_back(1);
  });
  device.launch_host_func(s, [&] { order.push_back(2); });
  device.record(e, s);
  device.quiesce();
  EXPECT_FALSE(device.query(e));
  EXPECT_TRUE(order.empty());
  gate.open();
  device.synchronize(e);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(device.query(e));
}

TEST(HostDevice, WaitEventOrdersAcrossStreams) {
  HostDevice device;
  const StreamHandle a = device.create_stream();
  const StreamHandle b = device.create_stream();
  const EventHandle after_a = device.create_event();
  const EventHandle after_b = device.create_event();
  Gate gate;
  bool a_ran = false;
  bool b_saw_a = false;
  device.launch_host_func(a, [&] {
    gate.wait();
    a_ran = true;
  });
  device.record(after_a, a);
  device.wait_event(b, after_a);
  device.launch_host_func(b, [&] { b_saw_a = a_ran; });
  device.record(after_b, b);
  device.quiesce();
  EXPECT_FALSE(device.query(after_b)) << "b must wait for a's event";
  gate.open();
  device.synchronize(after_b);
  EXPECT_TRUE(b_saw_a);
}

TEST(HostDevice, CopiesReadDescriptorsWhenTheyRunNotWhenSubmitted) {
  // A DMA engine reads the descriptor buffer while it works: a buffer changed after submit
  // changes what is copied. This is why the transfer engine never reuses a buffer early (F6).
  HostDevice device;
  const DeviceAddress dev = device.allocate(8192);
  HostBuffer host(device, 8192);
  fill_pattern(reinterpret_cast<void*>(dev), 8192, 3);
  const StreamHandle s = device.create_stream();
  const EventHandle done = device.create_event();
  Gate gate;
  device.launch_host_func(s, [&] { gate.wait(); });
  std::vector<CopyDescriptor> buffer{{dev, host.addr, 4096}};
  device.copy_batch(s, CopyKind::kDeviceToHost, buffer);
  device.record(done, s);
  device.quiesce();
  buffer[0] = CopyDescriptor{dev + 4096, host.addr + 4096, 4096};  // reused too early
  gate.open();
  device.synchronize(done);
  EXPECT_TRUE(is_zero(host.data.data(), 4096));
  EXPECT_FALSE(is_zero(host.data.data() + 4096, 4096));
}

TEST(HostDevice, BadDescriptorsAreInvalidArgumentAndEnqueueNothing) {
  HostDevice device(4);
  const DeviceAddress dev = device.allocate(4096);
  HostBuffer host(device, 4096);
  const StreamHandle s = device.create_stream();
  const std::vector<CopyDescriptor> wrong_direction{{host.addr, dev, 64}};
  EXPECT_THROW(device.copy_batch(s, CopyKind::kDeviceToHost, wrong_direction),
               std::invalid_argument);
  const std::vector<CopyDescriptor> overrun{{dev, host.addr, 4097}};
  EXPECT_THROW(device.copy_batch(s, CopyKind::kDeviceToHost, overrun), std::invalid_argument);
  const std::vector<CopyDescriptor> too_many(5, CopyDescriptor{dev, host.addr, 1});
  EXPECT_THROW(device.copy_batch(s, CopyKind::kDeviceToHost, too_many), std::invalid_argument);
  EXPECT_THROW(device.copy_batch(StreamHandle{999}, CopyKind::kDeviceToHost, {}),
               std::invalid_argument);
  device.quiesce();
  EXPECT_TRUE(is_zero(host.data.data(), 4096));
}

TEST(HostDevice, ElapsedTimeBetweenCompletedEvents) {
  HostDevice device;
  const StreamHandle s = device.create_stream();
  const EventHandle a = device.create_event();
  const EventHandle b = device.create_event();
  EXPECT_THROW(device.elapsed_ms(a, b), std::logic_error);
  device.record(a, s);
  device.record(b, s);
  device.synchronize(b);
  EXPECT_GE(device.elapsed_ms(a, b), 0.0);
}

TEST(HostDevice, DestroyedStreamFinishesItsWork) {
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
