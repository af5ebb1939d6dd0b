// Tenants: who kvtierd's clients are, what each may hold, and whose chunks each may see
// (docs/operations.md, "Tenants").
//
// Contract:
// - Every client is one tenant. With CURVE (server.tenants_file) a client's tenant is the one
//   whose `keys` list its public key (the ZAP handler admits only those); without CURVE (ipc://,
//   or tcp:// with server.insecure) every client is the one default tenant.
// - Namespaces: the server scopes every key a client sends to its tenant's namespace itself
//   (scope()), so a client never reaches a chunk stored under another namespace, whatever keys
//   it sends. A tenant's namespace is its sharing group when it is in one (the group's tenants
//   see each other's chunks), else its own. The default tenant's keys are used as they come
//   (one tenant: nothing to separate). A scoped key is the keyed BLAKE2b-128 of the client's key
//   under a key derived from the namespace's name: deterministic, so chunks in the lower tiers
//   stay reachable across restarts, and no client can choose a key that lands in another
//   namespace (that is a BLAKE2b second preimage).
// - Limits are per tenant (all its clients together); absent fields are unlimited, except pins
//   (server.max_pins) and sessions (server.max_sessions).
// Immutable once loaded: every thread may read it.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/cache/owner_quota.h"
#include "kvtier/core/chunk_key.h"
#include "kvtier/core/config.h"
#include "kvtier/core/status.h"

namespace kvtier::server {

using TenantId = OwnerId;  // a tenant's chunks are charged to it in the CacheManager
inline constexpr TenantId kDefaultTenant = kDefaultOwner;

struct TenantLimits {
  static constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
  uint64_t max_slots = kUnlimited;      // host slots its chunks fill (pending + ready)
  uint64_t guaranteed_slots = 0;        // never evicted below this by other tenants' stores
  uint64_t max_locks = kUnlimited;      // read-locked keys (LOOKUP locks) of all its clients
  uint64_t max_transfers = kUnlimited;  // STORE/RETRIEVE in flight of all its clients
  uint64_t max_pins = 0;                // pinned keys (PIN); server.max_pins unless set
  uint64_t max_sessions = 0;  // registered clients (REGISTER); server.max_sessions unless set
};

struct Tenant {
  std::string name;
  std::string space;  // its namespace: its sharing group, else its name ("" for the default)
  TenantLimits limits;
  std::array<uint8_t, 32> space_key{};  // BLAKE2b key of the namespace (unused for the default)
};

class Tenants {
 public:
  // The default tenant alone (no CURVE): every client, every key as it comes.
  static Tenants single(const Config& config);
  // The tenants file (YAML; docs/operations.md). kInvalidArgument naming the file and the entry
  // when it cannot be read, names an unknown field, a tenant twice or "default", a key that is
  // not a Z85 CURVE key or is listed twice, a tenant in two sharing groups or a group member
  // that is no tenant, or guaranteed shares that add up to more than `num_slots`.
  static Result<Tenants> load(const std::filesystem::path& path, const Config& config,
                              size_t num_slots);

  const Tenant& operator[](TenantId id) const { return tenants_.at(id); }
  size_t size() const { return tenants_.size(); }
  bool curve() const { return curve_; }
  // The tenant of a client's public key (the 32 raw bytes ZAP hands over), if admitted.
  std::optional<TenantId> by_key(std::span<const uint8_t> public_key) const;
  // The tenant with this name (a message's "User-Id"), if any.
  std::optional<TenantId> by_name(std::string_view name) const;
  // The keys as `tenant`'s namespace holds them (see the contract).
  void scope(TenantId tenant, std::span<ChunkKey> keys) const;

 private:
  std::vector<Tenant> tenants_;  // indexed by TenantId; 0 is the default tenant
  std::map<std::string, TenantId, std::less<>> by_name_;
  std::map<std::array<uint8_t, 32>, TenantId> by_key_;
  bool curve_ = false;
};

}  // namespace kvtier::server
