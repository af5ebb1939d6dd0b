// RedisRouter: sends pipelined batches of single-key commands to one redis-server or to a Redis
// Cluster, over a connection pool per node. Private to src/tier.
//
// Topology is found on first use: CLUSTER SLOTS on the seed node either fails with "cluster
// support disabled" (one server: every command goes to the seed) or returns the slot map (each
// command goes to the master of its key's slot, redis_key_slot.h). Redirections are followed:
// MOVED updates the slot map (and refreshes it whole from CLUSTER SLOTS), ASK sends the command
// once more to the named node preceded by ASKING. A command still redirected after
// kMaxRedirects rounds is kUnrouted. The nodes of one batch are served at once
// (run_pipelines), so a node that hangs holds up only its own commands. A node's commands that
// carry megabytes of values are spread over several of its pooled connections, each with its
// share of the window (stripe()): a single-threaded server then reads one socket while the
// others fill, and GETs of 256 KiB ran 1.3-1.5x faster here than over one connection.
//
// Per-node health (cluster only). Each master has a HealthState (health_state.h). A master that
// cannot be reached, times out, or answers CLUSTERDOWN or LOADING is DOWN: its commands are
// kSkipped at once, without contacting it, while the other masters serve theirs. It is probed
// off the request path, by probe_down_nodes() once its probe time came (the tier's
// probe_if_due(), which the tier mover calls every health tick): a probe waits up to the probe
// timeout, and inside a call it would spend the call's deadline that the other masters' commands
// need. The probe reloads the slot map from another master (after a failover the slots have a
// new master, and the node is no longer part of the tier), then the node must report
// cluster_state:ok. When every
// master is DOWN, execute() fails whole, as a single server that is down does: the tier is down.
//
// Thread-safety: every public call may come from several threads at once.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kvtier/tier/health_state.h"
#include "kvtier/tier/tier.h"
#include "redis_connection.h"

namespace kvtier::tier_internal {

enum class CommandOutcome : uint8_t {
  kReplied,   // replies[i] holds the node's reply
  kSkipped,   // its node is down (cluster): not sent, or no reply
  kUnrouted,  // still redirected after kMaxRedirects rounds
};

struct BatchReplies {
  std::vector<RedisReply> replies;
  std::vector<CommandOutcome> outcomes;
};

class RedisRouter {
 public:
  static constexpr int kMaxRedirects = 5;

  // node_health: the probes of a cluster's masters (probe_timeout bounds each probe).
  RedisRouter(RedisEndpoint seed, size_t connections_per_node, HealthOptions node_health);

  // One reply or outcome per command. An error when the call reaches no node: one server
  // that cannot be reached or does not answer in time (the call then has no partial results),
  // the cluster's topology unknown and its seed unreachable, or every master DOWN.
  Result<BatchReplies> execute(std::span<const RedisCommand> commands, TimePoint deadline);
  // One server: PING. A cluster: every master that is UP must answer, and every DOWN one is
  // probed now; succeeds when some master serves.
  Status ping_all(TimePoint deadline);
  // Known after the first successful call.
  bool cluster_mode() const;
  // The masters that are DOWN now.
  std::vector<DownPart> down_nodes() const;
  // Probes the DOWN masters whose probe is due.
  void probe_down_nodes();

 private:
  struct Group;

  // A node's commands carrying at least this many bytes of values per connection are spread
  // over more of its pool's connections, as far as they are idle or can be opened (see
  // stripe()).
  static constexpr size_t kStripeBytes = size_t{1} << 20;
  // Splits g (whose connection is borrowed) into up to connections_per_node_ groups of about
  // kStripeBytes or more, on connections free now; the new groups are appended to `stripes`.
  void stripe(Group& g, std::span<const RedisCommand> commands, TimePoint connect_by,
              std::vector<Group>& stripes);

  Status ensure_topology(TimePoint deadline);
  // CLUSTER SLOTS from `node`; false when the node is not in cluster mode.
  Result<bool> load_topology(const RedisEndpoint& node, TimePoint deadline);
  RedisEndpoint node_for(std::string_view key) const;
  RedisConnectionPool& pool_for(const RedisEndpoint& endpoint);
  // One command on each node, at once; no redirections followed.
  std::vector<Result<RedisReply>> run_on_each(std::span<const RedisEndpoint> nodes,
                                              std::vector<std::string_view> args,
                                              TimePoint deadline);
  Result<RedisReply> run_one(const RedisEndpoint& node, std::vector<std::string_view> args,
                             TimePoint deadline);

  bool cluster_known() const;
  std::vector<RedisEndpoint> masters() const;
  HealthState& health_of(const RedisEndpoint& node);
  // Whether `node` is UP, probing it when it is DOWN and its probe is due; always true for one
  // server.
  bool admit(const RedisEndpoint& node);
  // The probe of a DOWN master (see the top of this file).
  Status probe_node(const RedisEndpoint& node);
  bool every_master_down();
  std::string down_summary();

  const RedisEndpoint seed_;
  const size_t connections_per_node_;
  const HealthOptions node_health_;

  mutable std::mutex topology_mutex_;
  bool topology_known_ = false;
  bool cluster_ = false;
  std::vector<RedisEndpoint> masters_;
  std::array<int16_t, 16384> slot_master_{};  // index into masters_, -1: unknown

  std::mutex pools_mutex_;
  std::map<std::string, std::unique_ptr<RedisConnectionPool>> pools_;  // never removed

  mutable std::mutex health_mutex_;
  std::map<std::string, std::unique_ptr<HealthState>> health_;  // per node; never removed
};

}  // namespace kvtier::tier_internal
