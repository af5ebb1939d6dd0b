#include "server_cache_index.h"

#include <algorithm>

namespace kvtier {
namespace {

uint32_t max_blocks_per_chunk(const KvLayout& layout) {
  uint32_t n = 1;
  for (const KvGroup& g : layout.groups) n = std::max(n, g.blocks_per_chunk);
  return n;
}

}  // namespace

ServerCacheIndex::ServerCacheIndex(const Config& config, const EngineShape& shape)
    : layout_(shape.layout),
      world_size_(shape.world_size),
      endpoint_(config.server.endpoint),
      arena_(shape.layout, max_blocks_per_chunk(shape.layout), "core"),
      // rank = world_size: not a model rank (the server only records it).
      client_(server::ClientOptions::from_config(config), arena_.registration(shape.world_size)),
      lookup_wait_(std::min(seconds_to_duration(config.server.request_timeout_s),
                            seconds_to_duration(config.server.heartbeat_interval_s))) {
  client_.wait_until_ok(seconds_to_duration(config.server.connect_timeout_s));
}

LookupResult ServerCacheIndex::lookup(std::span<const ChunkKey> keys) {
  if (keys.empty() || client_.health().state != server::ClientState::kOk) return {};
  if (SteadyClock::instance().now() < backoff_until_) return {};  // a lookup timed out just now
  std::vector<std::future<Result<server::LookupReply>>> replies;
  for (uint32_t r = 0; r < world_size_; ++r) {
    std::vector<ChunkKey> shares;
    shares.reserve(keys.size());
    for (const ChunkKey& k : keys) shares.push_back(rank_key(k, r));
    replies.push_back(client_.lookup(std::move(shares)));
  }
  // The scheduler loop waits at most lookup_wait_ (not the client's request timeout): a server
  // that stopped answering must not stall the loop's heartbeats (H6). A lookup takes no lock,
  // so an abandoned reply holds nothing.
  const TimePoint deadline = SteadyClock::instance().now() + lookup_wait_;
  std::vector<server::LookupReply> answers;
  bool failed = false;
  for (auto& f : replies) {
    if (f.wait_until(deadline) != std::future_status::ready) {
      backoff_until_ = SteadyClock::instance().now() + lookup_wait_;
      return {};
    }
    Result<server::LookupReply> reply = f.get();
    if (!reply) {
      failed = true;  // a miss: the engine recomputes
      continue;
    }
    answers.push_back(*reply);
  }
  if (failed) return {};
  LookupResult out{.hit_chunks = keys.size()};
  for (const auto& a : answers) out.hit_chunks = std::min(out.hit_chunks, a.hits);
  for (const auto& a : answers) out.pending = out.pending || (a.hits == out.hit_chunks && a.pending);
  return out;
}

std::optional<StorePlan> ServerCacheIndex::prepare_store(std::span<const ChunkKey> keys) {
  if (client_.health().state != server::ClientState::kOk) return std::nullopt;  // H7
  StorePlan plan;
  plan.keys.assign(keys.begin(), keys.end());
  plan.slots.assign(keys.size(), SlotId{0});  // kvtierd picks the slots
  return plan;
}

Result<std::vector<SlotId>> ServerCacheIndex::prepare_load(std::span<const ChunkKey> keys) {
  return std::vector<SlotId>(keys.size(), SlotId{0});  // kvtierd pins at RETRIEVE
}

std::optional<std::string> ServerCacheIndex::degraded() const {
  const server::ClientHealth h = client_.health();
  if (h.state == server::ClientState::kOk) {
    if (h.degraded_tiers.empty()) return std::nullopt;
    std::string names;  // H7: the server answers, a tier below it is DOWN
    for (const std::string& t : h.degraded_tiers) names += (names.empty() ? "" : ", ") + t;
    return "cache server " + endpoint_ + ": tiers down: " + names;
  }
  return "cache server " + endpoint_ + ": " +
         (h.reason.empty() ? std::string(to_string(h.state)) : h.reason);
}

}  // namespace kvtier
