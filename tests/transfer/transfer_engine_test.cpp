// Functional behaviour of the transfer engine on the host device, without faults.
#include "kvtier/transfer/transfer_engine.h"

#include <gtest/gtest.h>

#include <thread>

#include "support/transfer_rig.h"

namespace kvtier {
namespace {

using testing::RigOptions;
using testing::TransferRig;

class TransferEngineRoundTrip : public ::testing::TestWithParam<DeviceLayout> {};

TEST_P(TransferEngineRoundTrip, StoreThenLoadRestoresEveryByte) {
  TransferRig rig(RigOptions{.device_layout = GetParam()});
  const uint32_t bpc = rig.group().blocks_per_chunk;
  for (uint32_t b = 0; b < 4 * bpc; ++b) rig.write_block(b, 100 + b);
  // Chunks 0..3 -> slots 3, 7, 1, 0 (chunk 1's blocks are out of order on purpose).
  std::vector<ChunkTransfer> chunks{rig.chunk(0, 3), rig.chunk(bpc, 7), rig.chunk(2 * bpc, 1),
                                    rig.chunk(3 * bpc, 0)};
  std::reverse(chunks[1].blocks.begin(), chunks[1].blocks.end());
  rig.engine->submit(1, Direction::kStore, chunks);
  auto stored = rig.drain();
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].outcome, Outcome::kCompleted) << stored[0].error;
  EXPECT_EQ(stored[0].bytes, 4 * rig.group().chunk_bytes());

  // Load each chunk into other blocks; every block must come back with its own bytes.
  std::vector<ChunkTransfer> targets = chunks;
  for (auto& c : targets) {
    for (auto& b : c.blocks) b += 8 * bpc;
  }
  rig.engine->submit(2, Direction::kLoad, targets);
  auto loaded = rig.drain();
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].outcome, Outcome::kCompleted);
  for (size_t i = 0; i < chunks.size(); ++i) {
    for (size_t j = 0; j < bpc; ++j) {
      EXPECT_TRUE(rig.block_has(targets[i].blocks[j], 100 + chunks[i].blocks[j]))
          << "chunk " << i << " block " << j;
    }
  }
  ASSERT_TRUE(rig.engine->audit()) << rig.engine->audit().error().message;
}

INSTANTIATE_TEST_SUITE_P(Layouts, TransferEngineRoundTrip,
                         ::testing::Values(DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(TransferEngine, SplitsSubmissionIntoCallsOfAtMostMaxBatchDescriptors) {
  TransferRig rig(RigOptions{.transfer = {.max_batch_descriptors = 5, .coalesce = false}});
  const uint32_t bpc = rig.group().blocks_per_chunk;
  for (uint32_t b = 0; b < 2 * bpc; ++b) rig.write_block(b, b);
  const std::vector<ChunkTransfer> chunks{rig.chunk(0, 0), rig.chunk(bpc, 1)};
  rig.engine->submit(1, Direction::kStore, chunks);
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kCompleted);
  const size_t descriptors = 2 * bpc * rig.group().layers;  // 24 uncoalesced pieces
  EXPECT_EQ(results[0].descriptors, descriptors);
  const auto stats = rig.engine->stats();
  EXPECT_EQ(stats.copy_calls, (descriptors + 4) / 5);
  EXPECT_EQ(stats.descriptors_submitted, descriptors);
}

TEST(TransferEngine, CoalescingCutsDescriptorsWithoutChangingBytes) {
  TransferRig rig;
  const uint32_t bpc = rig.group().blocks_per_chunk;
  for (uint32_t b = 0; b < bpc; ++b) rig.write_block(b, 7 + b);
  const std::vector<ChunkTransfer> chunks{rig.chunk(0, 2)};
  rig.engine->submit(1, Direction::kStore, chunks);
  auto results = rig.drain();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].descriptors, rig.group().layers);
  // Load back into other blocks and check.
  std::vector<ChunkTransfer> back{rig.chunk(4 * bpc, 2)};
  rig.engine->submit(2, Direction::kLoad, back);
  ASSERT_EQ(rig.drain().at(0).outcome, Outcome::kCompleted);
  for (uint32_t b = 0; b < bpc; ++b) EXPECT_TRUE(rig.block_has(4 * bpc + b, 7 + b));
}

TEST(TransferEngine, DuplicateJobIdAndBadBlockAreRejectedWithoutSideEffects) {
  TransferRig rig;
  const std::vector<ChunkTransfer> ok{rig.chunk(0, 0)};
  rig.fault.release_hangs();
  rig.engine->submit(1, Direction::kStore, ok);
  EXPECT_THROW(rig.engine->submit(1, Direction::kLoad, ok), std::invalid_argument);
  std::vector<ChunkTransfer> bad{rig.chunk(0, 1)};
  bad[0].blocks[0] = 1000;
  EXPECT_THROW(rig.engine->submit(2, Direction::kStore, bad), std::invalid_argument);
  EXPECT_EQ(rig.engine->in_flight(), 1u);
  EXPECT_EQ(rig.drain().size(), 1u);
  EXPECT_TRUE(rig.engine->audit());
}

TEST(TransferEngine, CompletedTransfersReuseStreamsEventsAndBuffers) {
  TransferRig rig;
  const std::vector<ChunkTransfer> chunks{rig.chunk(0, 0)};
  for (JobId j = 1; j <= 10; ++j) {
    rig.engine->submit(j, j % 2 ? Direction::kStore : Direction::kLoad, chunks);
    ASSERT_EQ(rig.drain().size(), 1u);
  }
  const auto s = rig.engine->stats();
  EXPECT_EQ(s.completed, 10u);
  EXPECT_EQ(s.streams.created, 1u);
  EXPECT_EQ(s.events.created, 2u);
  EXPECT_EQ(s.descriptor_buffers.created, 1u);
}

TEST(TransferEngine, WaitBlocksUntilTheJobsCopiesFinished) {
  TransferRig rig(RigOptions{.plan = FaultPlan::rules({FaultRule{.call = 0, .hang = true}})});
  rig.write_block(0, 5);
  const std::vector<ChunkTransfer> chunks{rig.chunk(0, 0)};
  rig.engine->submit(1, Direction::kStore, chunks);
  std::thread releaser([&] { rig.fault.release_hangs(); });  // before or during wait()
  const JobId jobs[] = {1};
  rig.engine->wait(jobs);
  releaser.join();
  // wait() returned: the copies finished, so poll reports it without any device progress.
  auto results = rig.engine->poll();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, Outcome::kCompleted);
}

}  // namespace
}  // namespace kvtier
