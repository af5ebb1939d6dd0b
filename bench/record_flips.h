// Bytes flipped in the records of kvtier's lower tiers behind their backs, as a failing disk or a
// corrupting network would: the tiers must detect it (checksums) and never serve the bytes.
// Used by `kvtier bench chaos`.
#pragma once

#include <filesystem>
#include <random>

#include "redis_process.h"

namespace kvtier::bench {

// Flips one bit of a written 4 KiB block (not all zeros: a record's header or payload) of a
// disk-tier segment file (seg-*.kvs) in `directory`, through O_DIRECT so that the tier's O_DIRECT
// reads see it. False when no written block was found in a few tries.
bool flip_disk_record(const std::filesystem::path& directory, std::mt19937_64& rng);

// Flips one bit of a random key's value in `redis`. False when Redis holds no key or does not
// answer.
bool flip_redis_record(const RedisServerProcess& redis, std::mt19937_64& rng);

}  // namespace kvtier::bench
