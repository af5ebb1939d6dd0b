// The injector does what its plan says, and nothing when the plan is empty.
#include "kvtier/device/fault_injecting_device.h"

#include <gtest/gtest.h>

#include <vector>

#include "kvtier/device/device_fault.h"
#include "kvtier/device/host_device.h"
#include "support/byte_pattern.h"

namespace kvtier {
namespace {

using testing::fill_pattern;
using testing::is_zero;

struct Fixture {
  Fixture(FaultPlan plan) : fault(host, std::move(plan)) {
    dev = fault.allocate(4096);
    fill_pattern(reinterpret_cast<void*>(dev), 4096, 1);
    host_addr = fault.register_host(host_mem.data(), host_mem.size());
    stream = fault.create_stream();
    event = fault.create_event();
    for (uint64_t i = 0; i < 4; ++i) descs.push_back({dev + i * 1024, host_addr + i * 1024, 1024});
  }
  ~Fixture() {
    fault.release_hangs();
    host.quiesce();
    fault.unregister_host(host_mem.data());
  }
  HostDevice host;
  FaultInjectingDevice fault;
  std::vector<std::byte> host_mem = std::vector<std::byte>(4096);
  DeviceAddress dev = 0, host_addr = 0;
  StreamHandle stream;
  EventHandle event;
  std::vector<CopyDescriptor> descs;
};

// Submit failures, hangs and latched errors are proven on every device in
// device_fault_contract_test.cpp.

TEST(FaultInjectingDevice, RecordFailureAndNonDeviceError) {
  Fixture f(FaultPlan::rules({FaultRule{.call = 0, .record_fails = true},
                              FaultRule{.call = 1, .non_device_error = true}}));
  f.fault.copy_batch(f.stream, CopyKind::kDeviceToHost, f.descs);
  EXPECT_THROW(f.fault.record(f.event, f.stream), DeviceFault);
  f.fault.record(f.event, f.stream);  // only the next record fails
  EXPECT_THROW(f.fault.copy_batch(f.stream, CopyKind::kDeviceToHost, f.descs), std::logic_error);
  const auto c = f.fault.counts();
  EXPECT_EQ(c.record_failures, 1u);
  EXPECT_EQ(c.non_device_errors, 1u);
}

TEST(FaultInjectingDevice, RandomPlansAreDeterministicPerSeed) {
  auto draws = [](uint64_t seed) {
    FaultPlan plan = FaultPlan::random(
        seed,
        RandomFaultRates{
            .submit_failure = 0.3, .latched_error = 0.3, .record_failure = 0.2, .delay = 0.2});
    std::vector<std::tuple<bool, size_t, uint32_t, bool>> out;
    for (uint64_t c = 0; c < 200; ++c) {
      FaultRule r = plan.draw(c, 16);
      out.emplace_back(r.fail_at.has_value(), r.fail_at.value_or(0), r.latched_errors,
                       r.record_fails);
      if (r.fail_at) {
        EXPECT_LT(*r.fail_at, 16u);
      }
    }
    return out;
  };
  EXPECT_EQ(draws(42), draws(42));
  EXPECT_NE(draws(42), draws(43));
}

TEST(FaultInjectingDevice, EmptyPlanInjectsNothing) {
  Fixture f(FaultPlan{});
  f.fault.copy_batch(f.stream, CopyKind::kDeviceToHost, f.descs);
  f.fault.record(f.event, f.stream);
  f.fault.synchronize(f.event);
  EXPECT_FALSE(is_zero(f.host_mem.data(), 4096));
  EXPECT_TRUE(f.fault.faulted_streams().empty());
}

}  // namespace
}  // namespace kvtier
