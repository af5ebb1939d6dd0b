#include "xxh3_kernels.h"

namespace kvtier::tier_internal {
namespace {

using Kernel = uint64_t (*)(const void*, size_t, uint64_t);

struct Choice {
  Kernel kernel;
  const char* name;
};

Choice choose() {
#if defined(__x86_64__)
  // __builtin_cpu_supports also checks that the OS saves the vector registers (XCR0).
  if (__builtin_cpu_supports("avx512f")) return {xxh3_64_seeded_avx512, "avx512"};
  if (__builtin_cpu_supports("avx2")) return {xxh3_64_seeded_avx2, "avx2"};
#endif
  return {xxh3_64_seeded_baseline, "baseline"};
}

const Choice& chosen() {
  static const Choice choice = choose();
  return choice;
}

}  // namespace

uint64_t xxh3_64_seeded(const void* data, size_t bytes, uint64_t seed) {
  return chosen().kernel(data, bytes, seed);
}

const char* xxh3_kernel_name() {
  return chosen().name;
}

}  // namespace kvtier::tier_internal
