#include "kvtier/tier/health_checked_tier.h"

#include <algorithm>
#include <stdexcept>

namespace kvtier {

std::string_view to_string(TierState state) {
  return state == TierState::kUp ? "up" : "down";
}

HealthCheckedTier::HealthCheckedTier(std::unique_ptr<Tier> inner, HealthOptions options)
    : inner_(std::move(inner)), options_(options) {
  if (!inner_) throw std::invalid_argument("HealthCheckedTier: tier is null");
  if (options_.clock == nullptr) throw std::invalid_argument("HealthCheckedTier: clock is null");
  if (options_.probe_initial <= Duration::zero() || options_.probe_max < options_.probe_initial) {
    throw std::invalid_argument("HealthCheckedTier: need 0 < probe_initial <= probe_max");
  }
}

TierState HealthCheckedTier::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void HealthCheckedTier::mark_down(const std::string& error) {
  std::lock_guard lock(mutex_);
  last_error_ = error;
  if (state_ == TierState::kUp) {
    backoff_ = options_.probe_initial;
  } else if (probing_) {
    backoff_ = std::min(backoff_ * 2, options_.probe_max);  // the probe failed
  } else {
    return;  // a call that raced the first failure: the probe time stands
  }
  state_ = TierState::kDown;
  next_probe_ = options_.clock->now() + backoff_;
}

bool HealthCheckedTier::admit() {
  {
    std::lock_guard lock(mutex_);
    if (state_ == TierState::kUp) return true;
    if (probing_ || options_.clock->now() < next_probe_) return false;
    probing_ = true;
  }
  const Status ping = inner_->ping(options_.probe_timeout);
  if (!ping) mark_down(ping.error().to_string());
  std::lock_guard lock(mutex_);
  probing_ = false;
  if (ping) {
    state_ = TierState::kUp;
    last_error_.clear();
  }
  return state_ == TierState::kUp;
}

TierState HealthCheckedTier::probe_if_due() {
  admit();
  return state();
}

std::unexpected<Error> HealthCheckedTier::skipped() {
  std::lock_guard lock(mutex_);
  ++skipped_calls_;
  return make_error(ErrorCode::kUnavailable, "tier " + inner_->name() + " is down: " + last_error_);
}

void HealthCheckedTier::observe(const Result<std::vector<ChunkStatus>>& result) {
  if (!result) {
    mark_down(result.error().to_string());
  } else if (std::ranges::find(*result, ChunkStatus::kError) != result->end()) {
    mark_down("a chunk failed with an error");
  }
}

Result<std::vector<ChunkStatus>> HealthCheckedTier::do_put(
    std::span<const ChunkKey> keys, std::span<const std::span<const std::byte>> chunks,
    Duration timeout) {
  if (!admit()) return skipped();
  Result<std::vector<ChunkStatus>> result = inner_->put(keys, chunks, timeout);
  observe(result);
  return result;
}

Result<std::vector<ChunkStatus>> HealthCheckedTier::do_get(
    std::span<const ChunkKey> keys, std::span<const std::span<std::byte>> dst, Duration timeout) {
  if (!admit()) return skipped();
  Result<std::vector<ChunkStatus>> result = inner_->get(keys, dst, timeout);
  observe(result);
  return result;
}

Result<std::vector<bool>> HealthCheckedTier::do_contains(std::span<const ChunkKey> keys,
                                                         Duration timeout) {
  if (!admit()) return skipped();
  Result<std::vector<bool>> result = inner_->contains(keys, timeout);
  if (!result) mark_down(result.error().to_string());
  return result;
}

Status HealthCheckedTier::do_ping(Duration timeout) {
  if (!admit()) return skipped();
  Status ok = inner_->ping(timeout);
  if (!ok) mark_down(ok.error().to_string());
  return ok;
}

TierCounters HealthCheckedTier::counters() const {
  TierCounters c = inner_->counters();
  std::lock_guard lock(mutex_);
  c.skipped_calls = skipped_calls_;
  return c;
}

TierMetrics HealthCheckedTier::metrics() const {
  TierMetrics m{.name = inner_->name(), .counters = counters()};
  std::lock_guard lock(mutex_);
  m.state = state_;
  m.last_error = last_error_;
  return m;
}

}  // namespace kvtier
