// RedisRouter: sends pipelined batches of single-key commands to one redis-server or to a Redis
// Cluster, over a connection pool per node. Private to src/tier.
//
// Topology is found on first use: CLUSTER SLOTS on the seed node either fails with "cluster
// support disabled" (one server: every command goes to the seed) or returns the slot map (each
// command goes to the master of its key's slot, redis_key_slot.h). Redirections are followed:
// MOVED updates the slot map (and refreshes it whole from CLUSTER SLOTS), ASK sends the command
// once more to the named node preceded by ASKING. A command still redirected after
// kMaxRedirects rounds gets no reply (nullptr).
//
// Thread-safety: execute() and ping_all() may be called from several threads at once.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "redis_connection.h"

namespace kvtier::tier_internal {

struct RedisCommand {
  std::string_view key;                // routes the command
  std::vector<std::string_view> args;  // the whole command, key included; not owned
  std::string_view tail = {};          // sent as the end of the last argument; not owned
};

class RedisRouter {
 public:
  static constexpr int kMaxRedirects = 5;

  RedisRouter(RedisEndpoint seed, size_t connections_per_node)
      : seed_(std::move(seed)), connections_per_node_(connections_per_node) {}

  // One reply per command (nullptr: still redirected after kMaxRedirects). An error when a node
  // could not be reached or did not answer in time; the call then has no partial results.
  Result<std::vector<RedisReplyPtr>> execute(std::span<const RedisCommand> commands,
                                             TimePoint deadline);
  // PING to every master (to the seed alone when not a cluster).
  Status ping_all(TimePoint deadline);
  // Known after the first successful call.
  bool cluster_mode() const;

 private:
  Status ensure_topology(TimePoint deadline);
  // CLUSTER SLOTS from `node`; false when the node is not in cluster mode.
  Result<bool> load_topology(const RedisEndpoint& node, TimePoint deadline);
  RedisEndpoint node_for(std::string_view key) const;
  RedisConnectionPool& pool_for(const RedisEndpoint& endpoint);
  // One command on one node, no redirections followed.
  Result<RedisReplyPtr> run_one(const RedisEndpoint& node, const RedisCommand& command,
                                TimePoint deadline);
  // Runs the commands `which` on one node, pipelined. Fills replies, or records redirections.
  Status run_on_node(const RedisEndpoint& node, std::span<const RedisCommand> commands,
                     const std::vector<size_t>& which, std::vector<RedisReplyPtr>& replies,
                     std::vector<std::optional<RedisEndpoint>>& ask, std::vector<size_t>& again,
                     bool& moved, TimePoint deadline);

  const RedisEndpoint seed_;
  const size_t connections_per_node_;

  mutable std::mutex topology_mutex_;
  bool topology_known_ = false;
  bool cluster_ = false;
  std::vector<RedisEndpoint> masters_;
  std::array<int16_t, 16384> slot_master_{};  // index into masters_, -1: unknown

  std::mutex pools_mutex_;
  std::map<std::string, std::unique_ptr<RedisConnectionPool>> pools_;  // never removed
};

}  // namespace kvtier::tier_internal
