#include "tenant_metrics.h"

namespace kvtier::server {

void TenantCounters::reject(std::string_view code) {
  std::lock_guard lock(mu_);
  auto it = rejected_.find(code);
  if (it == rejected_.end()) it = rejected_.emplace(std::string(code), 0).first;
  ++it->second;
}

std::map<std::string, uint64_t> TenantCounters::rejections() const {
  std::lock_guard lock(mu_);
  return {rejected_.begin(), rejected_.end()};
}

TenantCounters& TenantMetrics::tenant(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = tenants_.find(name);
  if (it == tenants_.end()) {
    it = tenants_.emplace(std::string(name), std::make_unique<TenantCounters>(std::string(name)))
             .first;
  }
  return *it->second;
}

std::vector<const TenantCounters*> TenantMetrics::tenants() const {
  std::lock_guard lock(mu_);
  std::vector<const TenantCounters*> all;
  all.reserve(tenants_.size());
  for (const auto& [name, counters] : tenants_) all.push_back(counters.get());
  return all;
}

}  // namespace kvtier::server
