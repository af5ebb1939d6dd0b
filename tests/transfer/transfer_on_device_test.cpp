// The transfer engine, unmodified, on every device (support/device_factories.h), faults
// injected through FaultInjectingDevice around it: bytes round-trip store -> load in both
// device layouts, a submit fault is Failed and the engine keeps serving (F1), a sticky fault is
// Unprovable and fail-stops (F7), and leases are conserved at the end (F12). Device memory is
// reached only through copies, so the same test runs on a GPU. The full fault contract runs on
// the host device in transfer_contract_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/transfer/transfer_engine.h"
#include "support/device_factories.h"
#include "support/device_io.h"
#include "support/transfer_rig.h"

namespace kvtier::testing {
namespace {

constexpr uint32_t kBlocks = 16;
constexpr uint32_t kSlots = 4;

struct TransferOnDeviceParam {
  DeviceFactory factory;
  DeviceLayout layout;
};

void PrintTo(const TransferOnDeviceParam& p, std::ostream* os) {
  *os << p.factory.label << "/" << to_string(p.layout);
}

class TransferOnDevice : public ::testing::TestWithParam<TransferOnDeviceParam> {
 protected:
  void SetUp() override {
    auto opened = GetParam().factory.open(8192);
    if (!opened) GTEST_SKIP() << opened.error().message;
    device_ = std::move(*opened);
    fault_ = std::make_unique<FaultInjectingDevice>(*device_, FaultPlan{});
    layout_ = small_layout(GetParam().layout);
    piece_bytes_ = layout_.tensor_block_bytes(0);
    const size_t tensor_bytes = layout_.tensor_bytes(0, kBlocks).value();
    GroupCacheAddresses cache{.num_blocks = kBlocks};
    for (size_t i = 0; i < layout_.tensors_per_group(0); ++i) {
      cache.bases.push_back(device_->allocate(tensor_bytes));
      write_device(*device_, cache.bases.back(), tensor_bytes, 100 + i);
    }
    caches_.groups.push_back(cache);
    const size_t pool_bytes = layout_.max_chunk_bytes() * kSlots;
    pool_ = static_cast<std::byte*>(std::aligned_alloc(4096, (pool_bytes + 4095) / 4096 * 4096));
    std::memset(pool_, 0, pool_bytes);
    slots_ =
        HostSlots{device_->register_host(pool_, pool_bytes), layout_.max_chunk_bytes(), kSlots};
    compute_ = device_->create_stream();
    engine_ = std::make_unique<TransferEngine>(*fault_, layout_, caches_, slots_, compute_,
                                               TransferOptions{});
  }
  // An Unprovable transfer may leave copies running on the pool and the cache (F7: nothing it
  // touches is released). So the device goes first — destroying it waits for all its work and
  // releases its memory and registrations — and the pool memory is freed after it.
  void TearDown() override {
    engine_.reset();
    fault_.reset();
    device_.reset();
    std::free(pool_);
  }

  ChunkTransfer chunk(uint32_t first_block, uint32_t slot) const {
    ChunkTransfer c{.group = 0, .slot = slot};
    for (uint32_t j = 0; j < layout_.groups[0].blocks_per_chunk; ++j) {
      c.blocks.push_back(first_block + j);
    }
    return c;
  }
  // Submits one chunk and polls until it has its result. wait() returns early for a job that
  // saw a fault, before its end marker completed, so polling goes on; the engine's deadline
  // (TransferOptions, 30 s) bounds the loop.
  TransferResult run(JobId job, Direction direction, const ChunkTransfer& c) {
    const std::vector<ChunkTransfer> chunks{c};
    engine_->submit(job, direction, chunks);
    const std::vector<JobId> jobs{job};
    std::vector<TransferResult> results;
    while (engine_->in_flight() > 0) {
      engine_->wait(jobs);
      for (TransferResult& r : engine_->poll()) results.push_back(std::move(r));
      std::this_thread::yield();
    }
    EXPECT_EQ(results.size(), 1u);
    return results.empty() ? TransferResult{} : results[0];
  }
  // The bytes of `count` blocks starting at `first` in every device tensor.
  std::vector<std::byte> blocks(uint32_t first, uint32_t count) {
    std::vector<std::byte> out;
    for (DeviceAddress base : caches_.groups[0].bases) {
      auto part = read_device(*device_, base + first * piece_bytes_, count * piece_bytes_);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
  void expect_audit() {
    const Status s = engine_->audit();
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message);
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<FaultInjectingDevice> fault_;
  KvLayout layout_;
  size_t piece_bytes_ = 0;
  KvCacheAddresses caches_;
  std::byte* pool_ = nullptr;
  HostSlots slots_;
  StreamHandle compute_;
  std::unique_ptr<TransferEngine> engine_;
};

TEST_P(TransferOnDevice, StoreThenLoadRoundTripsTheBytes) {
  const uint32_t n = layout_.groups[0].blocks_per_chunk;
  ASSERT_EQ(run(1, Direction::kStore, chunk(0, 2)).outcome, Outcome::kCompleted);
  EXPECT_FALSE(is_zero(pool_ + 2 * slots_.slot_bytes, layout_.groups[0].chunk_bytes()));
  ASSERT_NE(blocks(0, n), blocks(2 * n, n));
  ASSERT_EQ(run(2, Direction::kLoad, chunk(2 * n, 2)).outcome, Outcome::kCompleted);
  EXPECT_EQ(blocks(0, n), blocks(2 * n, n));
  expect_audit();
}

TEST_P(TransferOnDevice, F1_SubmitFaultIsFailedAndTheEngineKeepsServing) {
  fault_->set_plan(FaultPlan::rules({FaultRule{.call = 0, .fail_at = 1}}));
  const TransferResult failed = run(1, Direction::kStore, chunk(0, 0));
  EXPECT_EQ(failed.outcome, Outcome::kFailed) << failed.error;
  EXPECT_FALSE(engine_->fail_stopped());
  EXPECT_EQ(run(2, Direction::kStore, chunk(0, 1)).outcome, Outcome::kCompleted);
  expect_audit();
}

TEST_P(TransferOnDevice, F7_StickyFaultIsUnprovableAndFailStops) {
  fault_->set_plan(FaultPlan::rules({FaultRule{.call = 0, .fail_at = 1, .sticky = true}}));
  const TransferResult result = run(1, Direction::kLoad, chunk(0, 0));
  EXPECT_EQ(result.outcome, Outcome::kUnprovable) << result.error;
  EXPECT_TRUE(engine_->fail_stopped());
  expect_audit();
}

std::vector<TransferOnDeviceParam> params() {
  std::vector<TransferOnDeviceParam> out;
  for (const DeviceFactory& f : all_device_factories()) {
    out.push_back({f, DeviceLayout::kPerLayer});
    out.push_back({f, DeviceLayout::kCrossLayer});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Devices, TransferOnDevice, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<TransferOnDeviceParam>& info) {
                           std::string name = info.param.factory.label + "_" +
                                              std::string(to_string(info.param.layout));
                           std::erase(name, '_');
                           return name;
                         });

}  // namespace
}  // namespace kvtier::testing
