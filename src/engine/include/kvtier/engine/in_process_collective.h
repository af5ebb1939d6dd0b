// InProcessCollectiveGroup: `world_size` ranks as threads of one process, for tests.
//
// rank(r) is the Collective that rank r's thread uses; each must be used by exactly one
// thread. A call blocks until every rank has made the same call. Summation order is rank 0,
// rank 1, … (collective.h). Not resilient to a rank that stops calling: the others wait.
#pragma once

#include <barrier>
#include <memory>
#include <vector>

#include "kvtier/engine/collective.h"

namespace kvtier {

class InProcessCollectiveGroup {
 public:
  explicit InProcessCollectiveGroup(uint32_t world_size);  // world_size > 0
  ~InProcessCollectiveGroup();
  InProcessCollectiveGroup(const InProcessCollectiveGroup&) = delete;
  InProcessCollectiveGroup& operator=(const InProcessCollectiveGroup&) = delete;

  uint32_t world_size() const { return static_cast<uint32_t>(ranks_.size()); }
  Collective& rank(uint32_t r);

 private:
  class Rank;
  std::barrier<> barrier_;
  std::vector<std::span<float>> posted_;  // rank r's buffer during a call, written by rank r
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace kvtier
