#include "tenants.h"

#include <sodium.h>
#include <yaml-cpp/yaml.h>
#include <zmq.h>

#include <charconv>
#include <cstring>
#include <set>

namespace kvtier::server {
namespace {

constexpr std::string_view kDefaultName = "default";
constexpr std::string_view kSpaceDomain = "kvtierd tenant namespace v1:";

std::array<uint8_t, 32> space_key_of(std::string_view space) {
  std::array<uint8_t, 32> key{};
  std::string input(kSpaceDomain);
  input += space;
  crypto_generichash(key.data(), key.size(), reinterpret_cast<const uint8_t*>(input.data()),
                     input.size(), nullptr, 0);
  return key;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

TenantLimits default_limits(const Config& config) {
  return TenantLimits{.max_pins = config.server.max_pins,
                      .max_sessions = config.server.max_sessions};
}

}  // namespace

Tenants Tenants::single(const Config& config) {
  Tenants t;
  t.tenants_.push_back(Tenant{.name = std::string(kDefaultName), .limits = default_limits(config)});
  t.by_name_.emplace(kDefaultName, kDefaultTenant);
  return t;
}

Result<Tenants> Tenants::load(const std::filesystem::path& path, const Config& config,
                              size_t num_slots) {
  const auto bad = [&](const std::string& what) {
    return make_error(ErrorCode::kInvalidArgument, "tenants file " + path.string() + ": " + what);
  };
  if (sodium_init() < 0) return make_error(ErrorCode::kInternal, "libsodium failed to start");
  Tenants t = single(config);
  t.curve_ = true;
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path.string());
  } catch (const YAML::Exception& e) {
    return bad(e.what());
  }
  if (!doc.IsMap() || !doc["tenants"] || !doc["tenants"].IsMap() || doc["tenants"].size() == 0) {
    return bad("expected a map 'tenants' of at least one tenant (docs/operations.md)");
  }
  // yaml-cpp keeps every copy of a key named twice in one map, and a lookup finds the first: a
  // second 'tenants:' block, or a limit given twice, would be dropped or win silently.
  std::set<std::string> top_fields;
  for (const auto& top : doc) {
    const std::string field = top.first.as<std::string>("");
    if (field != "tenants" && field != "sharing_groups") {
      return bad("unknown field '" + field + "' (expected tenants, sharing_groups)");
    }
    if (!top_fields.insert(field).second) return bad("'" + field + "' is given twice");
  }
  uint64_t guaranteed = 0;
  try {
    for (const auto& entry : doc["tenants"]) {
      const std::string name = entry.first.as<std::string>();
      const std::string where = "tenant '" + name + "': ";
      if (!valid_name(name)) {
        return bad(where + "a name is 1 to 64 letters, digits, '_', '-' or '.'");
      }
      if (name == kDefaultName)
        return bad(where + "the name is reserved for clients without CURVE");
      if (t.by_name_.contains(name)) return bad(where + "listed twice");
      const YAML::Node& body = entry.second;
      if (!body.IsMap()) return bad(where + "expected a map");
      Tenant tenant{.name = name, .space = name, .limits = default_limits(config)};
      const auto id = static_cast<TenantId>(t.tenants_.size());
      std::set<std::string> fields;
      for (const auto& f : body) {
        const std::string key = f.first.as<std::string>();
        if (!fields.insert(key).second) return bad(where + "'" + key + "' is given twice");
        if (key == "keys") {
          if (!f.second.IsSequence()) return bad(where + "'keys' must be a list of public keys");
          for (const auto& k : f.second) {
            const std::string z85 = k.as<std::string>();
            std::array<uint8_t, 32> raw{};
            if (z85.size() != 40 || zmq_z85_decode(raw.data(), z85.c_str()) == nullptr) {
              return bad(where + "'" + z85 + "' is not a Z85 CURVE public key (kvtier keygen)");
            }
            if (!t.by_key_.emplace(raw, id).second) {
              return bad(where + "key " + z85 + " is listed twice");
            }
          }
          continue;
        }
        uint64_t* limit = key == "max_slots"          ? &tenant.limits.max_slots
                          : key == "guaranteed_slots" ? &tenant.limits.guaranteed_slots
                          : key == "max_locks"        ? &tenant.limits.max_locks
                          : key == "max_transfers"    ? &tenant.limits.max_transfers
                          : key == "max_pins"         ? &tenant.limits.max_pins
                          : key == "max_sessions"     ? &tenant.limits.max_sessions
                                                      : nullptr;
        if (limit == nullptr) {
          return bad(where + "unknown field '" + key +
                     "' (expected keys, max_slots, guaranteed_slots, max_locks, max_transfers, "
                     "max_pins, max_sessions)");
        }
        // Plain decimal, as the configuration's numbers (yaml-cpp would read 010 as 8, 0x10 as 16).
        const std::string text = f.second.IsScalar() ? f.second.Scalar() : std::string();
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *limit);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
            (text.size() > 1 && text[0] == '0')) {
          return bad(where + "'" + key + "' must be a whole number >= 0 in plain decimal, got '" +
                     text + "'");
        }
      }
      if (tenant.limits.guaranteed_slots > tenant.limits.max_slots) {
        return bad(where + "guaranteed_slots exceeds max_slots");
      }
      guaranteed += std::min<uint64_t>(tenant.limits.guaranteed_slots, num_slots + 1);
      t.by_name_.emplace(name, id);
      t.tenants_.push_back(std::move(tenant));
    }
    if (doc["sharing_groups"]) {
      if (!doc["sharing_groups"].IsMap()) return bad("'sharing_groups' must be a map of lists");
      std::set<std::string> grouped;
      std::set<std::string> group_names;
      for (const auto& group : doc["sharing_groups"]) {
        const std::string name = group.first.as<std::string>();
        const std::string where = "sharing group '" + name + "': ";
        if (!group_names.insert(name).second) return bad(where + "listed twice");
        if (!valid_name(name)) return bad(where + "a name is 1 to 64 letters, digits, '_-.'");
        if (!group.second.IsSequence()) return bad(where + "expected a list of tenants");
        for (const auto& member : group.second) {
          const std::string tenant = member.as<std::string>();
          auto it = t.by_name_.find(tenant);
          if (it == t.by_name_.end() || it->second == kDefaultTenant) {
            return bad(where + "'" + tenant + "' is not a tenant of this file");
          }
          if (!grouped.insert(tenant).second) {
            return bad(where + "tenant '" + tenant + "' is in two sharing groups");
          }
          // "group:" keeps a group's namespace apart from a tenant of the same name.
          t.tenants_[it->second].space = "group:" + name;
        }
      }
    }
  } catch (const YAML::Exception& e) {
    return bad(e.what());
  }
  if (guaranteed > num_slots) {
    return bad("guaranteed_slots add up to " + std::to_string(guaranteed) +
               ", more than the host pool's " + std::to_string(num_slots) + " slots");
  }
  for (size_t i = 1; i < t.tenants_.size(); ++i) {
    t.tenants_[i].space_key = space_key_of(t.tenants_[i].space);
  }
  return t;
}

std::optional<TenantId> Tenants::by_key(std::span<const uint8_t> public_key) const {
  if (public_key.size() != 32) return std::nullopt;
  std::array<uint8_t, 32> raw{};
  std::memcpy(raw.data(), public_key.data(), raw.size());
  auto it = by_key_.find(raw);
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

std::optional<TenantId> Tenants::by_name(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

void Tenants::scope(TenantId tenant, std::span<ChunkKey> keys) const {
  if (tenant == kDefaultTenant) return;
  const Tenant& t = tenants_.at(tenant);
  for (ChunkKey& key : keys) {
    uint8_t in[16];
    std::memcpy(in, &key.lo, 8);
    std::memcpy(in + 8, &key.hi, 8);
    uint8_t out[16];
    crypto_generichash(out, sizeof out, in, sizeof in, t.space_key.data(), t.space_key.size());
    std::memcpy(&key.lo, out, 8);
    std::memcpy(&key.hi, out + 8, 8);
  }
}

}  // namespace kvtier::server
