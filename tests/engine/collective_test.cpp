#include <gtest/gtest.h>

#include <thread>

#include "kvtier/engine/in_process_collective.h"

namespace kvtier {
namespace {

// Runs fn(rank) on one thread per rank.
template <class Fn>
void on_ranks(uint32_t world_size, Fn fn) {
  std::vector<std::jthread> threads;
  for (uint32_t r = 0; r < world_size; ++r) threads.emplace_back([&fn, r] { fn(r); });
}

TEST(Collective, SingleRankLeavesDataAlone) {
  SingleRankCollective c;
  std::vector<float> data{1.5f, -2.0f};
  c.all_reduce_sum(data);
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(c.world_size(), 1u);
}

TEST(Collective, InProcessSumsInRankOrderOnEveryRank) {
  // (1e8 + 1) - 1e8 == 0 in float32, whereas any order that adds -1e8 first gives 1.
  const float values[] = {1e8f, 1.0f, -1e8f};
  const float in_order = (values[0] + values[1]) + values[2];
  ASSERT_NE(in_order, (values[0] + values[2]) + values[1]);
  InProcessCollectiveGroup group(3);
  std::vector<std::vector<float>> results(3);
  on_ranks(3, [&](uint32_t r) {
    for (int call = 0; call < 50; ++call) {  // repeated calls reuse the phases safely
      std::vector<float> data{values[r], float(r + call)};
      group.rank(r).all_reduce_sum(data);
      if (call == 49) results[r] = data;
    }
  });
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r][0], in_order) << "rank " << r;
    EXPECT_EQ(results[r][1], 0.0f + 1.0f + 2.0f + 3 * 49.0f);
    EXPECT_EQ(group.rank(r).rank(), r);
  }
}

TEST(Collective, DifferentLengthsThrowOnEveryRank) {
  InProcessCollectiveGroup group(2);
  std::atomic<int> thrown{0};
  on_ranks(2, [&](uint32_t r) {
    std::vector<float> data(r + 1, 1.0f);
    try {
      group.rank(r).all_reduce_sum(data);
    } catch (const std::invalid_argument&) {
      ++thrown;
    }
  });
  EXPECT_EQ(thrown.load(), 2);
  EXPECT_THROW(group.rank(2), std::out_of_range);
}

}  // namespace
}  // namespace kvtier
