// What only the host device's model promises beyond the Device contract (device_contract_test
// proves that part): copies read their descriptors when they run, quiesce() returns once every
// stream is idle or blocked, destroyed streams are reaped, and a copy op spread over several
// copy threads moves exactly its bytes and ends before its stream's next op starts.
#include "kvtier/device/host_device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <iterator>
#include <memory>
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

TEST(HostDevice, CopyThreadsCopyExactlyTheBytesOfUnevenDescriptors) {
  // One op of uneven pieces, gathered into the host buffer in reverse order, so the parts the
  // threads take begin and end inside descriptors. Bytes no descriptor names stay zero.
  HostDevice device(HostDevice::kDefaultMaxDescriptorsPerCall, 3);
  constexpr size_t kBytes = size_t{6} << 20;
  const DeviceAddress dev = device.allocate(kBytes);
  PinnedBuffer host(device, kBytes);
  fill_pattern(reinterpret_cast<void*>(dev), kBytes, 11);
  const size_t sizes[] = {1, 4095, 70001, 300001, 12, size_t{1} << 20, 262144, 999999, 4096};
  std::vector<CopyDescriptor> descriptors;
  std::vector<std::pair<size_t, size_t>> gaps;  // host [from, to) no descriptor writes
  size_t src = 0, dst_end = kBytes;
  for (size_t i = 0; src + sizes[i % std::size(sizes)] + 7 <= kBytes / 2; ++i) {
    const size_t n = sizes[i % std::size(sizes)];
    descriptors.push_back({dev + src, host.addr() + dst_end - n, n});
    gaps.emplace_back(dst_end - n - 7, dst_end - n);
    src += n + 3;  // sources with gaps too
    dst_end -= n + 7;
  }
  ASSERT_GT(descriptors.size(), 10u);
  const StreamHandle s = device.create_stream();
  const EventHandle done = device.create_event();
  device.copy_batch(s, CopyKind::kDeviceToHost, descriptors);
  device.record(done, s);
  device.synchronize(done);
  for (const CopyDescriptor& d : descriptors) {
    ASSERT_EQ(std::memcmp(reinterpret_cast<const void*>(d.dst),
                          reinterpret_cast<const void*>(d.src), d.bytes),
              0)
        << d.bytes << " bytes at source offset " << d.src - dev;
  }
  for (const auto& [from, to] : gaps) EXPECT_TRUE(is_zero(host.data() + from, to - from));
  EXPECT_TRUE(is_zero(host.data(), dst_end));
}

TEST(HostDevice, F5_ACopyOpOnSeveralThreadsEndsBeforeItsStreamsNextOp) {
  // Two streams, each copying large ops that the shared copy threads split: a host function
  // queued after an op must find every byte of it copied (a stream runs one op at a time).
  // More copy threads than cores, so that helpers are preempted inside their parts.
  HostDevice device(HostDevice::kDefaultMaxDescriptorsPerCall, 8);
  constexpr size_t kBytes = size_t{8} << 20;
  constexpr int kRounds = 64;
  struct Lane {
    StreamHandle stream;
    DeviceAddress dev = 0;
    std::unique_ptr<PinnedBuffer> host;
    std::vector<CopyDescriptor> descriptors;
    std::vector<bool> complete_when_next_op_ran;
  };
  Lane lanes[2];
  for (int l = 0; l < 2; ++l) {
    Lane& lane = lanes[l];
    lane.stream = device.create_stream();
    lane.dev = device.allocate(kBytes);
    fill_pattern(reinterpret_cast<void*>(lane.dev), kBytes, 20 + l);
    lane.host = std::make_unique<PinnedBuffer>(device, kBytes);
    lane.descriptors = {{lane.dev, lane.host->addr(), kBytes}};
  }
  const EventHandle done = device.create_event();
  for (int round = 0; round < kRounds; ++round) {
    for (Lane& lane : lanes) {
      device.copy_batch(lane.stream, CopyKind::kDeviceToHost, lane.descriptors);
      device.launch_host_func(lane.stream, [&lane] {
        // The last byte of every 64 KiB first (a part still being copied has not written its
        // last bytes yet, and the probes take no time), then every byte.
        const auto* src = reinterpret_cast<const std::byte*>(lane.dev);
        bool complete = true;
        for (size_t end = kBytes; end > 0; end -= 64 << 10) {
          complete = complete && lane.host->data()[end - 1] == src[end - 1];
        }
        complete = complete && std::memcmp(lane.host->data(), src, kBytes) == 0;
        lane.complete_when_next_op_ran.push_back(complete);
        std::memset(lane.host->data(), 0, kBytes);  // the next round copies into zeros again
      });
    }
  }
  for (Lane& lane : lanes) {
    device.record(done, lane.stream);
    device.synchronize(done);
    EXPECT_EQ(lane.complete_when_next_op_ran, std::vector<bool>(kRounds, true));
  }
}

}  // namespace
}  // namespace kvtier
