#include "kvtier/tier/health_checked_tier.h"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <system_error>

namespace kvtier {

std::string tier_part_name(std::string_view tier, std::string_view part) {
  return std::string(tier) + "/" + std::string(part);
}

std::vector<std::string> degraded_names(const TierMetrics& metrics) {
  switch (metrics.state) {
    case TierState::kUp:
      return {};
    case TierState::kDown:
      return {metrics.name};
    case TierState::kDegraded:
      break;
  }
  std::vector<std::string> names;
  names.reserve(metrics.down_parts.size());
  for (const DownPart& part : metrics.down_parts) {
    names.push_back(tier_part_name(metrics.name, part.name));
  }
  return names;
}

namespace {

HealthOptions checked(const std::unique_ptr<Tier>& inner, HealthOptions options) {
  if (!inner) throw std::invalid_argument("HealthCheckedTier: tier is null");
  return options;
}

// A call of `tier` that runs out of memory or threads fails as an unreachable tier's does, and
// the tier goes DOWN (H7): it would otherwise end the thread that called it (a tier mover's, a
// server's) and with it the process. Anything else a tier raises is a bug, and propagates.
template <class Call>
auto guarded(const Tier& tier, Call call) -> decltype(call()) {
  try {
    return call();
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted, "tier " + tier.name() + ": out of memory");
  } catch (const std::system_error& e) {
    return make_error(ErrorCode::kUnavailable, "tier " + tier.name() + ": " + e.what());
  }
}

}  // namespace

HealthCheckedTier::HealthCheckedTier(std::unique_ptr<Tier> inner, HealthOptions options)
    : inner_(std::move(inner)), health_(checked(inner_, options)) {}

TierState HealthCheckedTier::state() const {
  if (!health_.up()) return TierState::kDown;
  return inner_->down_parts().empty() ? TierState::kUp : TierState::kDegraded;
}

bool HealthCheckedTier::admit() {
  return health_.admit([&] {
    return guarded(*inner_, [&] { return inner_->ping(health_.options().probe_timeout); });
  });
}

TierState HealthCheckedTier::probe_if_due() {
  if (admit()) {
    // Out of memory or threads there: the parts stay down, probed again when due.
    static_cast<void>(guarded(*inner_, [&]() -> Status {
      inner_->probe_down_parts();
      return {};
    }));
  }
  return state();
}

std::unexpected<Error> HealthCheckedTier::skipped() {
  ++skipped_calls_;
  return make_error(ErrorCode::kUnavailable,
                    "tier " + inner_->name() + " is down: " + health_.last_error());
}

void HealthCheckedTier::observe(const Result<std::vector<ChunkStatus>>& result) {
  if (!result) {
    health_.mark_down(result.error().to_string());
  } else if (std::ranges::find(*result, ChunkStatus::kError) != result->end()) {
    health_.mark_down("a chunk failed with an error");
  }
}

Result<std::vector<ChunkStatus>> HealthCheckedTier::do_put(
    std::span<const ChunkKey> keys, std::span<const std::span<const std::byte>> chunks,
    Duration timeout) {
  if (!admit()) return skipped();
  Result<std::vector<ChunkStatus>> result =
      guarded(*inner_, [&] { return inner_->put(keys, chunks, timeout); });
  observe(result);
  return result;
}

Result<std::vector<ChunkStatus>> HealthCheckedTier::do_get(
    std::span<const ChunkKey> keys, std::span<const std::span<std::byte>> dst, Duration timeout) {
  if (!admit()) return skipped();
  Result<std::vector<ChunkStatus>> result =
      guarded(*inner_, [&] { return inner_->get(keys, dst, timeout); });
  observe(result);
  return result;
}

Result<std::vector<bool>> HealthCheckedTier::do_contains(std::span<const ChunkKey> keys,
                                                         Duration timeout) {
  if (!admit()) return skipped();
  Result<std::vector<bool>> result =
      guarded(*inner_, [&] { return inner_->contains(keys, timeout); });
  if (!result) health_.mark_down(result.error().to_string());
  return result;
}

Status HealthCheckedTier::do_ping(Duration timeout) {
  if (!admit()) return skipped();
  Status ok = guarded(*inner_, [&] { return inner_->ping(timeout); });
  if (!ok) health_.mark_down(ok.error().to_string());
  return ok;
}

TierCounters HealthCheckedTier::counters() const {
  TierCounters c = inner_->counters();
  c.skipped_calls = skipped_calls_;
  return c;
}

TierMetrics HealthCheckedTier::metrics() const {
  TierMetrics m{.name = inner_->name(), .counters = counters()};
  if (!health_.up()) {
    m.state = TierState::kDown;
    m.last_error = health_.last_error();
  } else {
    m.down_parts = inner_->down_parts();
    m.state = m.down_parts.empty() ? TierState::kUp : TierState::kDegraded;
  }
  return m;
}

}  // namespace kvtier
