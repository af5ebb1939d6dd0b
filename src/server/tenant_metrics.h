// TenantMetrics: kvtierd's counters per tenant, for /metrics (label `tenant`) and STATS
// (`tenant.<name>.<counter>`, `tenant.<name>.rejected.<code>`).
//
// Thread-safe: the socket loop and the cache service thread count, the metrics endpoint reads.
// A tenant's counters are created at its first use and live as long as the TenantMetrics, so a
// reference to them may be kept (a session keeps its tenant's).
//
// Tenants: which tenant a client belongs to is decided in one place,
// CacheService::tenant_of(); until clients are admitted by key every client is in kDefaultTenant.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/core/counter_kind.h"

namespace kvtier::server {

class TenantCounters {
 public:
  explicit TenantCounters(std::string name) : name(std::move(name)) {}

  const std::string name;
  std::atomic<uint64_t> lookups{0};            // LOOKUPs answered (not rejected)
  std::atomic<uint64_t> hit_chunks{0};         // keys those LOOKUPs found ready in the host pool
  std::atomic<uint64_t> missed_chunks{0};      // keys they asked for and did not find ready
  std::atomic<uint64_t> stored_bytes{0};       // bytes of completed STOREs
  std::atomic<uint64_t> retrieved_bytes{0};    // bytes of completed RETRIEVEs
  std::atomic<uint64_t> evicted_chunks{0};     // chunks evicted to make room for its STOREs
  std::atomic<uint64_t> quarantined_slots{0};  // slots its Unprovable transfers retained (F7)

  // One error reply with `code` (documented in docs/protocol.md) went to this tenant.
  void reject(std::string_view code);
  // Error replies by code, every code seen so far.
  std::map<std::string, uint64_t> rejections() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t, std::less<>> rejected_;
};

// Names the counters above (counter_kind.h); /metrics appends "_total".
template <class F>
void visit_counters(const TenantCounters& c, F&& f) {
  using enum CounterKind;
  f("lookups", c.lookups.load(), kCounter);
  f("hit_chunks", c.hit_chunks.load(), kCounter);
  f("missed_chunks", c.missed_chunks.load(), kCounter);
  f("stored_bytes", c.stored_bytes.load(), kCounter);
  f("retrieved_bytes", c.retrieved_bytes.load(), kCounter);
  f("evicted_chunks", c.evicted_chunks.load(), kCounter);
  f("quarantined_slots", c.quarantined_slots.load(), kCounter);
}

class TenantMetrics {
 public:
  static constexpr std::string_view kDefaultTenant = "default";

  TenantMetrics() { tenant(kDefaultTenant); }  // listed from the start

  // The counters of tenant `name`, created at first use.
  TenantCounters& tenant(std::string_view name);
  // Every tenant's counters, in name order.
  std::vector<const TenantCounters*> tenants() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<TenantCounters>, std::less<>> tenants_;
};

}  // namespace kvtier::server
