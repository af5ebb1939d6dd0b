#include "kvtier/engine/in_process_collective.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvtier {

class InProcessCollectiveGroup::Rank final : public Collective {
 public:
  Rank(InProcessCollectiveGroup& group, uint32_t rank) : group_(group), rank_(rank) {}
  uint32_t rank() const override { return rank_; }
  uint32_t world_size() const override { return group_.world_size(); }

  // Three phases separated by barriers: post the buffer; every rank sums all buffers into a
  // private copy (all buffers are read-only here); every rank writes its own buffer. The last
  // barrier keeps a fast rank from posting the next call's buffer while a slow rank still
  // reads this call's pointers.
  void all_reduce_sum(std::span<float> data) override {
    group_.posted_[rank_] = data;
    group_.barrier_.arrive_and_wait();
    for (const auto& other : group_.posted_) {
      if (other.size() != data.size()) {
        group_.barrier_.arrive_and_wait();  // keep the others' phases aligned
        group_.barrier_.arrive_and_wait();
        throw std::invalid_argument("all_reduce_sum: ranks passed spans of different lengths (" +
                                    std::to_string(data.size()) + " and " +
                                    std::to_string(other.size()) + ")");
      }
    }
    scratch_.assign(group_.posted_[0].begin(), group_.posted_[0].end());
    for (size_t r = 1; r < group_.posted_.size(); ++r) {
      const std::span<float> other = group_.posted_[r];
      for (size_t i = 0; i < scratch_.size(); ++i) scratch_[i] += other[i];
    }
    group_.barrier_.arrive_and_wait();
    std::copy(scratch_.begin(), scratch_.end(), data.begin());
    group_.barrier_.arrive_and_wait();
  }

 private:
  InProcessCollectiveGroup& group_;
  const uint32_t rank_;
  std::vector<float> scratch_;
};

InProcessCollectiveGroup::InProcessCollectiveGroup(uint32_t world_size)
    : barrier_(static_cast<std::ptrdiff_t>(world_size)), posted_(world_size) {
  if (world_size == 0) throw std::invalid_argument("InProcessCollectiveGroup: world_size 0");
  for (uint32_t r = 0; r < world_size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

InProcessCollectiveGroup::~InProcessCollectiveGroup() = default;

Collective& InProcessCollectiveGroup::rank(uint32_t r) {
  if (r >= ranks_.size()) {
    throw std::out_of_range("InProcessCollectiveGroup: rank " + std::to_string(r) + " of " +
                            std::to_string(ranks_.size()));
  }
  return *ranks_[r];
}

}  // namespace kvtier
