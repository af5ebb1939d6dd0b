// xxh3-64, avx512 build (see xxh3_kernels.h; compile flags in src/tier/CMakeLists.txt).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "xxh3_kernels.h"

namespace kvtier::tier_internal {

uint64_t xxh3_64_seeded_avx512(const void* data, size_t bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(data, bytes, seed);
}

}  // namespace kvtier::tier_internal
