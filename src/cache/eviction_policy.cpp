#include "kvtier/cache/eviction_policy.h"

#include <string>

#include "arc_policy.h"
#include "lru_policy.h"

namespace kvtier {

Result<std::unique_ptr<EvictionPolicy>> make_eviction_policy(std::string_view name,
                                                             size_t capacity) {
  if (capacity == 0) {
    return make_error(ErrorCode::kInvalidArgument, "eviction policy capacity must be > 0");
  }
  if (name == "lru") return std::make_unique<LruPolicy>();
  if (name == "arc") return std::make_unique<ArcPolicy>(capacity);
  return make_error(ErrorCode::kInvalidArgument,
                    "eviction policy must be 'lru' or 'arc', got '" + std::string(name) + "'");
}

}  // namespace kvtier
