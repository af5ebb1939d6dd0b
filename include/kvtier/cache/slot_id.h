// SlotId: the index of one chunk-sized slot of a host pool, in [0, num_slots).
#pragma once

#include <cstdint>

namespace kvtier {

using SlotId = uint32_t;

}  // namespace kvtier
