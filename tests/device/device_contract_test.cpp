// The Device contract (device.h), proven through the interface only, for every device: copies
// move bytes, a stream runs in order, events and waits follow CUDA semantics, bad arguments are
// std::invalid_argument (F2), and faults injected by FaultInjectingDevice around the device
// surface as device.h says. Instantiated for every device (support/device_factories.h).
#include "device_contract.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "gate.h"
#include "kvtier/device/device_fault.h"
#include "kvtier/device/fault_injecting_device.h"
#include "support/device_io.h"

namespace kvtier::testing {
namespace {

TEST_P(DeviceContract, CopiesMoveBytesBothWays) {
  const DeviceAddress dev = device().allocate(8192);
  EXPECT_TRUE(is_zero(read_device(device(), dev, 8192).data(), 8192)) << "allocations are zeroed";
  PinnedBuffer host(device(), 8192);
  fill_pattern(host.data(), 8192, 7);
  copy_and_wait(device(), CopyKind::kHostToDevice, {{host.addr(), dev, 8192}});
  std::memset(host.data(), 0, 8192);
  copy_and_wait(device(), CopyKind::kDeviceToHost, {{dev, host.addr() + 4096, 4096}});
  EXPECT_TRUE(is_zero(host.data(), 4096));
  EXPECT_TRUE(has_pattern(host.data() + 4096, 4096, 7));
  device().free(dev);
}

TEST_P(DeviceContract, CopiesOnOneStreamRunInSubmissionOrder) {
  const DeviceAddress dev = device().allocate(4096);
  PinnedBuffer in(device(), 4096);
  PinnedBuffer out(device(), 4096);
  fill_pattern(in.data(), 4096, 11);
  const StreamHandle s = device().create_stream();
  const EventHandle done = device().create_event();
  const std::vector<CopyDescriptor> up{{in.addr(), dev, 4096}};
  const std::vector<CopyDescriptor> down{{dev, out.addr(), 4096}};
  device().copy_batch(s, CopyKind::kHostToDevice, up);
  device().copy_batch(s, CopyKind::kDeviceToHost, down);  // must see the upload
  device().record(done, s);
  device().synchronize(done);
  EXPECT_TRUE(has_pattern(out.data(), 4096, 11));
}

TEST_P(DeviceContract, ManyDescriptorsInOneCallLandWhereEachSays) {
  // A full call of scattered 1 KiB pieces, uploaded in one permutation and read back in
  // another (devices split long calls internally; every piece must still land).
  constexpr size_t kPieces = kMaxDescriptors, kPiece = 1024;
  const DeviceAddress dev = device().allocate(kPieces * kPiece);
  PinnedBuffer in(device(), kPieces * kPiece);
  PinnedBuffer out(device(), kPieces * kPiece);
  fill_pattern(in.data(), kPieces * kPiece, 5);
  std::vector<size_t> order(kPieces);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  std::vector<CopyDescriptor> up, down;
  for (size_t i = 0; i < kPieces; ++i) {
    up.push_back({in.addr() + i * kPiece, dev + order[i] * kPiece, kPiece});
    down.push_back({dev + order[i] * kPiece, out.addr() + i * kPiece, kPiece});
  }
  std::shuffle(down.begin(), down.end(), std::mt19937(4));
  copy_and_wait(device(), CopyKind::kHostToDevice, up);
  copy_and_wait(device(), CopyKind::kDeviceToHost, down);
  EXPECT_TRUE(has_pattern(out.data(), kPieces * kPiece, 5));
}

TEST_P(DeviceContract, WorkOnAStreamRunsInOrderAndEventsReportIt) {
  const StreamHandle s = device().create_stream();
  const EventHandle e = device().create_event();
  EXPECT_TRUE(device().query(e)) << "an event never recorded is complete";
  Gate gate;
  std::vector<int> order;
  device().launch_host_func(s, [&] {
    gate.wait();
    order.push_back(1);
  });
  device().launch_host_func(s, [&] { order.push_back(2); });
  device().record(e, s);
  EXPECT_FALSE(device().query(e)) << "the event waits for the gated work before it";
  gate.open();
  device().synchronize(e);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(device().query(e));
}

TEST_P(DeviceContract, WaitEventOrdersAcrossStreams) {
  const StreamHandle a = device().create_stream();
  const StreamHandle b = device().create_stream();
  const EventHandle after_a = device().create_event();
  const EventHandle after_b = device().create_event();
  Gate gate;
  bool a_ran = false;
  bool b_saw_a = false;
  device().launch_host_func(a, [&] {
    gate.wait();
    a_ran = true;
  });
  device().record(after_a, a);
  device().wait_event(b, after_a);
  device().launch_host_func(b, [&] { b_saw_a = a_ran; });
  device().record(after_b, b);
  EXPECT_FALSE(device().query(after_b)) << "b must wait for a's event";
  gate.open();
  device().synchronize(after_b);
  EXPECT_TRUE(b_saw_a);
}

TEST_P(DeviceContract, F2_BadDescriptorsAreInvalidArgumentAndEnqueueNothing) {
  const DeviceAddress dev = device().allocate(4096);
  write_device(device(), dev, 4096, 9);
  PinnedBuffer host(device(), 4096);
  const StreamHandle s = device().create_stream();
  const std::vector<CopyDescriptor> wrong_direction{{host.addr(), dev, 64}};
  EXPECT_THROW(device().copy_batch(s, CopyKind::kDeviceToHost, wrong_direction),
               std::invalid_argument);
  const std::vector<CopyDescriptor> overrun{{dev, host.addr(), 64}, {dev, host.addr(), 4097}};
  EXPECT_THROW(device().copy_batch(s, CopyKind::kDeviceToHost, overrun), std::invalid_argument);
  const std::vector<CopyDescriptor> destination_overrun{{dev, host.addr() + 4000, 200}};
  EXPECT_THROW(device().copy_batch(s, CopyKind::kDeviceToHost, destination_overrun),
               std::invalid_argument);
  const std::vector<CopyDescriptor> empty_copy{{dev, host.addr(), 0}};
  EXPECT_THROW(device().copy_batch(s, CopyKind::kDeviceToHost, empty_copy), std::invalid_argument);
  const std::vector<CopyDescriptor> too_many(kMaxDescriptors + 1,
                                             CopyDescriptor{dev, host.addr(), 1});
  EXPECT_THROW(device().copy_batch(s, CopyKind::kDeviceToHost, too_many), std::invalid_argument);
  EXPECT_THROW(device().copy_batch(StreamHandle{999}, CopyKind::kDeviceToHost, {}),
               std::invalid_argument);
  const EventHandle done = device().create_event();
  device().record(done, s);
  device().synchronize(done);
  EXPECT_TRUE(is_zero(host.data(), 4096)) << "a rejected call enqueues nothing";
}

TEST_P(DeviceContract, UnknownHandlesAndRangesAreInvalidArgument) {
  const DeviceAddress dev = device().allocate(4096);
  PinnedBuffer host(device(), 8192);
  EXPECT_THROW(device().query(EventHandle{999}), std::invalid_argument);
  EXPECT_THROW(device().record(EventHandle{999}, device().create_stream()), std::invalid_argument);
  EXPECT_THROW(device().destroy_stream(StreamHandle{999}), std::invalid_argument);
  EXPECT_THROW(device().free(dev + 64), std::invalid_argument);
  EXPECT_THROW(device().unregister_host(host.data() + 4096), std::invalid_argument);
  EXPECT_THROW(device().register_host(host.data() + 4096, 4096), std::invalid_argument)
      << "overlaps a registered range";
  EXPECT_THROW(device().close_imported(dev), std::invalid_argument);
  device().free(dev);
  EXPECT_THROW(device().free(dev), std::invalid_argument);
}

TEST_P(DeviceContract, MemorySharingFailuresAreErrorValues) {
  const DeviceAddress dev = device().allocate(4096);
  EXPECT_FALSE(device().export_memory(dev + 64).has_value());
  const std::vector<std::byte> garbage(16, std::byte{7});
  const auto imported = device().import_memory(garbage);
  ASSERT_FALSE(imported.has_value());
  EXPECT_FALSE(imported.error().message.empty());
  device().free(dev);
}

TEST_P(DeviceContract, ElapsedTimeBetweenCompletedEvents) {
  const StreamHandle s = device().create_stream();
  const EventHandle a = device().create_event();
  const EventHandle b = device().create_event();
  EXPECT_THROW(device().elapsed_ms(a, b), std::logic_error);
  device().record(a, s);
  device().record(b, s);
  device().synchronize(b);
  EXPECT_GE(device().elapsed_ms(a, b), 0.0);
}

TEST_P(DeviceContract, DestroyedStreamFinishesItsWork) {
  const StreamHandle s = device().create_stream();
  const EventHandle e = device().create_event();
  Gate gate;
  bool ran = false;
  device().launch_host_func(s, [&] {
    gate.wait();
    ran = true;
  });
  device().record(e, s);
  device().destroy_stream(s);
  gate.open();
  device().synchronize(e);
  EXPECT_TRUE(ran);
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceContract, ::testing::ValuesIn(all_device_factories()),
                         device_label<::testing::TestParamInfo<DeviceFactory>>);

}  // namespace
}  // namespace kvtier::testing
