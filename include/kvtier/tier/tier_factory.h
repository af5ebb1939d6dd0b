// make_tiers(): the tiers a configuration asks for, top (fastest) first, each wrapped in a
// HealthCheckedTier: the disk tier when tiers.disk_path is set, then the Redis tier when
// tiers.redis_url is set. Neither is required; no tiers is a valid answer.
#pragma once

#include <memory>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/config.h"
#include "kvtier/tier/health_checked_tier.h"

namespace kvtier {

// Errors from opening the disk directory or parsing the Redis URL (kInvalidArgument,
// kUnavailable), naming the field. Redis is not contacted here. `clock` must outlive the tiers.
Result<std::vector<std::unique_ptr<HealthCheckedTier>>> make_tiers(
    const TiersConfig& config, const KeyNamespace& ns,
    const Clock& clock = SteadyClock::instance());

// The call timeout of a tier made by make_tiers, by its name().
Duration tier_timeout(const TiersConfig& config, std::string_view tier_name);

}  // namespace kvtier
