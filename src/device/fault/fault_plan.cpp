#include "kvtier/device/fault_plan.h"

namespace kvtier {

FaultPlan FaultPlan::rules(std::vector<FaultRule> rules) {
  FaultPlan plan;
  plan.rules_ = std::move(rules);
  return plan;
}

FaultPlan FaultPlan::random(uint64_t seed, RandomFaultRates rates) {
  FaultPlan plan;
  plan.rates_ = rates;
  plan.rng_.seed(seed);
  return plan;
}

FaultRule FaultPlan::draw(uint64_t call, size_t descriptors, CopyKind kind) {
  FaultRule drawn;
  drawn.call = call;
  for (const FaultRule& r : rules_) {
    if (r.call == call) return r;
  }
  if (!rates_ || (rates_->only_kind && *rates_->only_kind != kind)) return drawn;
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  if (coin(rng_) < rates_->submit_failure) {
    drawn.fail_at = std::uniform_int_distribution<size_t>(0, descriptors)(rng_);
    if (*drawn.fail_at == descriptors && descriptors > 0) drawn.fail_at = descriptors - 1;
  }
  if (coin(rng_) < rates_->latched_error) {
    drawn.latched_errors = coin(rng_) < rates_->latched_forever ? FaultRule::kForever : 1;
  }
  drawn.record_fails = coin(rng_) < rates_->record_failure;
  if (coin(rng_) < rates_->delay) {
    drawn.delay =
        Duration(std::uniform_int_distribution<int64_t>(0, rates_->max_delay.count())(rng_));
  }
  drawn.hang = coin(rng_) < rates_->hang;
  return drawn;
}

namespace {

std::optional<CopyKind> only_kind(FaultDirection direction) {
  switch (direction) {
    case FaultDirection::kLoad:
      return CopyKind::kHostToDevice;
    case FaultDirection::kStore:
      return CopyKind::kDeviceToHost;
    case FaultDirection::kBoth:
      break;
  }
  return std::nullopt;
}

}  // namespace

bool injects_device_faults(const FaultsConfig& f) {
  return f.submit_failure_rate > 0 || f.latched_error_rate > 0 || f.delay_rate > 0 ||
         f.record_failure_rate > 0 || f.hang_rate > 0;
}

FaultPlan fault_plan_from_config(const FaultsConfig& f, uint32_t rank) {
  if (!injects_device_faults(f)) return FaultPlan{};
  return FaultPlan::random(uint64_t{f.seed} * 1000 + rank,
                           RandomFaultRates{.submit_failure = f.submit_failure_rate,
                                            .latched_error = f.latched_error_rate,
                                            .record_failure = f.record_failure_rate,
                                            .delay = f.delay_rate,
                                            .hang = f.hang_rate,
                                            .only_kind = only_kind(f.direction)});
}

}  // namespace kvtier
