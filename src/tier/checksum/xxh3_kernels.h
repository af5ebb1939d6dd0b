// xxh3-64 built three times from Debian's xxhash.h (XXH_INLINE_ALL): for the baseline ISA, for
// AVX2 and for AVX-512. All three compute the same function (xxh3 is defined independently of
// the vector width); only the speed differs. chunk_record.cpp picks one at run time
// (xxh3_64_seeded), so one build runs on every x86-64 and uses the widest vectors the CPU has.
//
// Why: Debian's libxxhash.so is built for baseline x86-64 (SSE2), ~9 GB/s, which bounds a disk
// tier that verifies every chunk it reads. The AVX2 build runs ~2.5x faster, AVX-512 faster still.
//
// The kernel translation units include nothing but this header and xxhash.h, so no inline
// function compiled with AVX2 / AVX-512 can be shared with (and picked by the linker for) code
// that runs on a CPU without them.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace kvtier::tier_internal {

uint64_t xxh3_64_seeded_baseline(const void* data, size_t bytes, uint64_t seed);
#if defined(__x86_64__)
uint64_t xxh3_64_seeded_avx2(const void* data, size_t bytes, uint64_t seed);
uint64_t xxh3_64_seeded_avx512(const void* data, size_t bytes, uint64_t seed);
#endif

// The widest kernel this CPU runs, chosen once.
uint64_t xxh3_64_seeded(const void* data, size_t bytes, uint64_t seed);
// "avx512", "avx2" or "baseline": which kernel xxh3_64_seeded uses.
const char* xxh3_kernel_name();

}  // namespace kvtier::tier_internal
