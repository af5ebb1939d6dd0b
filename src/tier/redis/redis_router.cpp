#include "redis_router.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include "redis_key_slot.h"

namespace kvtier::tier_internal {
namespace {

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381"
struct Redirect {
  bool ask = false;
  uint16_t slot = 0;
  RedisEndpoint to;
};

std::optional<Redirect> parse_redirect(std::string_view error) {
  Redirect r;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  // from_chars reads [data, data + space), never up to a terminator.
  // NOLINTNEXTLINE(bugprone-suspicious-stringview-data-usage)
  auto [end, ec] = std::from_chars(error.data(), error.data() + space, r.slot);
  if (ec != std::errc() || r.slot >= kRedisClusterSlots) return std::nullopt;
  Result<RedisEndpoint> to = parse_host_port(error.substr(space + 1));
  if (!to) return std::nullopt;
  r.to = *to;
  return r;
}

// Error replies that say the node cannot serve keys now, rather than that this key failed.
// An error that is the node's state, not the command's: the node takes no keys now (OOM: past
// its maxmemory under noeviction; MISCONF: its snapshots fail; READONLY, MASTERDOWN: it is a
// replica or lost its master; BUSY: a script or module command runs on it; NOAUTH, NOPERM,
// WRONGPASS: it refuses this client; its client limit reached).
bool node_unavailable(const RedisReply& reply) {
  if (!reply.is_error()) return false;
  for (const std::string_view state :
       {"CLUSTERDOWN", "LOADING", "OOM", "MISCONF", "READONLY", "MASTERDOWN", "BUSY", "NOAUTH",
        "NOPERM", "WRONGPASS", "ERR max number of clients"}) {
    if (reply.text.starts_with(state)) return true;
  }
  return false;
}

}  // namespace

// How long a call waits for its connections: half its time. Masters are connected one after
// another before any is asked, so one whose host never answers a connect (lost power, cut off)
// would take the whole call's time, and every other master would then time out too, and be
// marked down with it; this way they keep half the time to answer.
TimePoint connect_deadline(TimePoint deadline) {
  const TimePoint now = SteadyClock::instance().now();
  return deadline <= now ? deadline : now + (deadline - now) / 2;
}

// The commands of one batch that go to one node.
struct RedisRouter::Group {
  RedisEndpoint node;
  std::vector<size_t> which;  // indices into the batch
  std::unique_ptr<RedisConnection> connection;
  size_t stripes = 1;  // the node's commands of this batch are spread over this many groups
};

RedisRouter::RedisRouter(RedisEndpoint seed, size_t connections_per_node, HealthOptions node_health)
    : seed_(std::move(seed)),
      connections_per_node_(connections_per_node),
      node_health_(node_health) {
  HealthState check(node_health_);  // throws for options it rejects
}

bool RedisRouter::cluster_mode() const {
  std::lock_guard lock(topology_mutex_);
  return cluster_;
}

bool RedisRouter::cluster_known() const {
  std::lock_guard lock(topology_mutex_);
  return topology_known_ && cluster_;
}

std::vector<RedisEndpoint> RedisRouter::masters() const {
  std::lock_guard lock(topology_mutex_);
  return masters_;
}

RedisConnectionPool& RedisRouter::pool_for(const RedisEndpoint& endpoint) {
  std::lock_guard lock(pools_mutex_);
  std::unique_ptr<RedisConnectionPool>& pool = pools_[endpoint.to_string()];
  if (!pool) pool = std::make_unique<RedisConnectionPool>(endpoint, connections_per_node_);
  return *pool;
}

HealthState& RedisRouter::health_of(const RedisEndpoint& node) {
  std::lock_guard lock(health_mutex_);
  std::unique_ptr<HealthState>& health = health_[node.to_string()];
  if (!health) health = std::make_unique<HealthState>(node_health_);
  return *health;
}

std::vector<Result<RedisReply>> RedisRouter::run_on_each(std::span<const RedisEndpoint> nodes,
                                                         std::vector<std::string_view> args,
                                                         TimePoint deadline) {
  const RedisCommand command{.args = std::move(args)};
  const RedisConnection::Queued queued{.command = &command};
  std::vector<Result<RedisReply>> replies;
  std::vector<std::unique_ptr<RedisConnection>> connections;
  std::vector<RedisConnection*> running;
  const TimePoint connect_by = connect_deadline(deadline);
  for (const RedisEndpoint& node : nodes) {
    Result<std::unique_ptr<RedisConnection>> c = pool_for(node).borrow(connect_by);
    if (!c) {
      replies.emplace_back(std::unexpected(c.error()));
      connections.emplace_back();
      continue;
    }
    (*c)->queue(std::span(&queued, 1));
    running.push_back(c->get());
    connections.push_back(std::move(*c));
    replies.emplace_back();
  }
  run_pipelines(running, deadline);
  for (size_t n = 0; n < nodes.size(); ++n) {
    RedisConnection* c = connections[n].get();
    if (c == nullptr) continue;
    replies[n] = c->broken() ? Result<RedisReply>(std::unexpected(c->error()))
                             : Result<RedisReply>(std::move(c->replies()[0]));
    pool_for(nodes[n]).give_back(std::move(connections[n]));
  }
  return replies;
}

Result<RedisReply> RedisRouter::run_one(const RedisEndpoint& node,
                                        std::vector<std::string_view> args, TimePoint deadline) {
  return std::move(run_on_each(std::span(&node, 1), std::move(args), deadline)[0]);
}

Result<bool> RedisRouter::load_topology(const RedisEndpoint& node, TimePoint deadline) {
  Result<RedisReply> reply = run_one(node, {"CLUSTER", "SLOTS"}, deadline);
  if (!reply) return std::unexpected(reply.error());
  const RedisReply& r = *reply;
  if (r.is_error()) {
    // A node that cannot answer now (loading its data, busy, refusing this client) says nothing
    // of whether it is in a cluster: asked again on the next call.
    if (node_unavailable(r)) {
      return make_error(ErrorCode::kUnavailable, "redis " + node.to_string() + ": " + r.text);
    }
    return false;  // "ERR This instance has cluster support disabled"
  }
  if (r.type != RedisReply::Type::kArray) {
    return make_error(ErrorCode::kInternal, "redis: unexpected CLUSTER SLOTS reply");
  }
  using Type = RedisReply::Type;
  std::vector<RedisEndpoint> masters;
  std::array<int16_t, 16384> slots;
  slots.fill(-1);
  for (const RedisReply& range : r.elements) {
    if (range.type != Type::kArray || range.elements.size() < 3 ||
        range.elements[0].type != Type::kInteger || range.elements[1].type != Type::kInteger ||
        range.elements[2].type != Type::kArray || range.elements[2].elements.size() < 2 ||
        range.elements[2].elements[0].type != Type::kString ||
        range.elements[2].elements[1].type != Type::kInteger) {
      return make_error(ErrorCode::kInternal, "redis: malformed CLUSTER SLOTS entry");
    }
    const RedisReply& master = range.elements[2];
    RedisEndpoint endpoint{.host = master.elements[0].text,
                           .port = static_cast<int>(master.elements[1].integer)};
    if (endpoint.host.empty()) endpoint.host = node.host;  // "" means the node we asked
    auto it = std::ranges::find(masters, endpoint);
    const auto index = static_cast<int16_t>(it - masters.begin());
    if (it == masters.end()) masters.push_back(endpoint);
    const long long lo = std::max<long long>(0, range.elements[0].integer);
    const long long hi = std::min<long long>(kRedisClusterSlots - 1, range.elements[1].integer);
    for (long long s = lo; s <= hi; ++s) slots[s] = index;
  }
  std::lock_guard lock(topology_mutex_);
  cluster_ = true;
  topology_known_ = true;
  masters_ = std::move(masters);
  slot_master_ = slots;
  return true;
}

Status RedisRouter::ensure_topology(TimePoint deadline) {
  {
    std::lock_guard lock(topology_mutex_);
    if (topology_known_) return {};
  }
  Result<bool> cluster = load_topology(seed_, deadline);
  if (!cluster) return std::unexpected(cluster.error());
  if (!*cluster) {
    std::lock_guard lock(topology_mutex_);
    cluster_ = false;
    topology_known_ = true;
  }
  return {};
}

RedisEndpoint RedisRouter::node_for(std::string_view key) const {
  std::lock_guard lock(topology_mutex_);
  if (!cluster_) return seed_;
  const int16_t master = slot_master_[redis_key_slot(key)];
  return master < 0 ? seed_ : masters_[master];
}

// ---- per-node health ----

bool RedisRouter::admit(const RedisEndpoint& node) {
  if (!cluster_known()) return true;
  return health_of(node).admit([&] { return probe_node(node); });
}

Status RedisRouter::probe_node(const RedisEndpoint& node) {
  const TimePoint deadline = SteadyClock::instance().now() + node_health_.probe_timeout;
  // After a failover another master serves the node's slots: the map says so.
  for (const RedisEndpoint& other : masters()) {
    if (other == node || !health_of(other).up()) continue;
    if (load_topology(other, deadline)) break;
  }
  const std::vector<RedisEndpoint> now = masters();
  if (std::ranges::find(now, node) == now.end()) return {};  // no longer a master
  Result<RedisReply> info = run_one(node, {"CLUSTER", "INFO"}, deadline);
  if (!info) return std::unexpected(info.error());
  if (info->type != RedisReply::Type::kString ||
      info->text.find("cluster_state:ok") == std::string::npos) {
    return make_error(ErrorCode::kUnavailable,
                      "redis " + node.to_string() + ": cluster_state is not ok");
  }
  return {};
}

std::vector<DownPart> RedisRouter::down_nodes() const {
  std::vector<DownPart> down;
  if (!cluster_known()) return down;
  for (const RedisEndpoint& m : masters()) {
    std::lock_guard lock(health_mutex_);
    auto it = health_.find(m.to_string());
    if (it != health_.end() && !it->second->up()) {
      down.push_back({.name = m.to_string(), .error = it->second->last_error()});
    }
  }
  return down;
}

void RedisRouter::probe_down_nodes() {
  if (!cluster_known()) return;
  for (const RedisEndpoint& m : masters()) {
    if (!health_of(m).up()) admit(m);
  }
}

bool RedisRouter::every_master_down() {
  const std::vector<RedisEndpoint> all = masters();
  return !all.empty() &&
         std::ranges::none_of(all, [&](const RedisEndpoint& m) { return health_of(m).up(); });
}

std::string RedisRouter::down_summary() {
  std::string text;
  for (const DownPart& d : down_nodes()) text += (text.empty() ? "" : "; ") + d.error;
  return "every master of the Redis Cluster is down: " + text;
}

// ---- batches ----

void RedisRouter::stripe(Group& g, std::span<const RedisCommand> commands, TimePoint connect_by,
                         std::vector<Group>& stripes) {
  size_t value_bytes = 0;
  for (size_t i : g.which) {
    value_bytes += tail_bytes(commands[i]) + commands[i].head.size() + commands[i].body.size();
  }
  const size_t wanted = std::min(
      {connections_per_node_, g.which.size(), std::max<size_t>(1, value_bytes / kStripeBytes)});
  std::vector<std::unique_ptr<RedisConnection>> more;
  while (more.size() + 1 < wanted) {
    std::unique_ptr<RedisConnection> c = pool_for(g.node).try_borrow(connect_by);
    if (!c) break;
    more.push_back(std::move(c));
  }
  if (more.empty()) return;
  // Contiguous runs of the group's commands, one per connection.
  const size_t count = more.size() + 1;
  std::vector<size_t> all = std::move(g.which);
  const auto run = [&](size_t s) {
    return std::vector<size_t>(all.begin() + static_cast<ptrdiff_t>(s * all.size() / count),
                               all.begin() + static_cast<ptrdiff_t>((s + 1) * all.size() / count));
  };
  g.which = run(0);
  g.stripes = count;
  for (size_t s = 1; s < count; ++s) {
    stripes.push_back(
        {.node = g.node, .which = run(s), .connection = std::move(more[s - 1]), .stripes = count});
  }
}

Result<BatchReplies> RedisRouter::execute(std::span<const RedisCommand> commands,
                                          TimePoint deadline) {
  if (Status ok = ensure_topology(deadline); !ok) return std::unexpected(ok.error());
  const bool cluster = cluster_known();
  BatchReplies out;
  out.replies.resize(commands.size());
  out.outcomes.assign(commands.size(), CommandOutcome::kUnrouted);
  std::vector<std::optional<RedisEndpoint>> ask(commands.size());
  std::vector<size_t> pending(commands.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  std::optional<Error> failure;  // one server: the call fails whole
  // A node failed: one server fails the call; a cluster master is DOWN and its commands skip.
  const auto node_failed = [&](Group& g, size_t from, const Error& error) {
    if (!cluster) {
      if (!failure) failure = error;
      return;
    }
    health_of(g.node).mark_down(error.to_string());
    for (size_t k = from; k < g.which.size(); ++k) {
      out.outcomes[g.which[k]] = CommandOutcome::kSkipped;
    }
  };

  for (int round = 0; round <= kMaxRedirects && !pending.empty() && !failure; ++round) {
    std::vector<Group> groups;
    std::map<std::string, size_t> group_of;
    for (size_t i : pending) {
      const std::optional<RedisEndpoint>& asked = ask[i];
      RedisEndpoint node = asked ? *asked : node_for(commands[i].key);
      auto [it, added] = group_of.try_emplace(node.to_string(), groups.size());
      if (added) groups.push_back({.node = std::move(node)});
      groups[it->second].which.push_back(i);
    }
    std::vector<RedisConnection*> running;
    std::vector<Group> stripes;
    const TimePoint connect_by = connect_deadline(deadline);
    for (Group& g : groups) {
      if (cluster && !health_of(g.node).up()) {  // probed by probe_down_nodes(), not here
        for (size_t i : g.which) out.outcomes[i] = CommandOutcome::kSkipped;
        continue;
      }
      Result<std::unique_ptr<RedisConnection>> c = pool_for(g.node).borrow(connect_by);
      if (!c) {
        node_failed(g, 0, c.error());
        continue;
      }
      g.connection = std::move(*c);
      stripe(g, commands, connect_by, stripes);
    }
    for (Group& g : stripes) groups.push_back(std::move(g));
    stripes.clear();
    for (Group& g : groups) {
      if (!g.connection) continue;
      std::vector<RedisConnection::Queued> queued;
      queued.reserve(g.which.size());
      for (size_t i : g.which) queued.push_back({.command = &commands[i], .asking = bool(ask[i])});
      g.connection->queue(queued, RedisConnection::kWindowBytes / g.stripes);
      running.push_back(g.connection.get());
    }
    run_pipelines(running, deadline);

    std::vector<size_t> again;
    bool moved = false;
    for (Group& g : groups) {
      if (!g.connection) continue;
      std::vector<RedisReply>& replies = g.connection->replies();
      bool node_down = false;
      for (size_t k = 0; k < replies.size(); ++k) {
        const size_t i = g.which[k];
        RedisReply& reply = replies[k];
        ask[i].reset();
        if (cluster && node_unavailable(reply)) {
          // The master serves no key now: the rest of its batch skips.
          if (!node_down) {
            const std::string what = "redis " + g.node.to_string() + ": " + reply.text;
            node_failed(g, k, Error{ErrorCode::kUnavailable, what});
          }
          node_down = true;
          continue;
        }
        if (node_down) continue;
        if (reply.is_error()) {
          if (std::optional<Redirect> redirect = parse_redirect(reply.text)) {
            if (redirect->ask) {
              ask[i] = redirect->to;
            } else {
              std::lock_guard lock(topology_mutex_);
              auto it = std::ranges::find(masters_, redirect->to);
              if (it == masters_.end()) it = masters_.insert(masters_.end(), redirect->to);
              slot_master_[redirect->slot] = static_cast<int16_t>(it - masters_.begin());
              moved = true;
            }
            again.push_back(i);
            continue;
          }
        }
        out.replies[i] = std::move(reply);
        out.outcomes[i] = CommandOutcome::kReplied;
      }
      if (g.connection->broken() && !node_down) {
        node_failed(g, replies.size(), g.connection->error());
      }
      pool_for(g.node).give_back(std::move(g.connection));
    }
    if (moved && !failure) {
      // The slot map changed (resharding or failover): take it whole from the node that said so.
      (void)load_topology(node_for(commands[again.front()].key), deadline);
    }
    pending = std::move(again);
  }
  if (failure) return std::unexpected(*failure);
  if (cluster && every_master_down()) return make_error(ErrorCode::kUnavailable, down_summary());
  return out;
}

Status RedisRouter::ping_all(TimePoint deadline) {
  if (Status ok = ensure_topology(deadline); !ok) return ok;
  if (!cluster_known()) {
    Result<RedisReply> pong = run_one(seed_, {"PING"}, deadline);
    if (!pong) return std::unexpected(pong.error());
    if (!pong->is_status("PONG")) {
      return make_error(ErrorCode::kUnavailable,
                        "redis " + seed_.to_string() + ": PING answered " + pong->text);
    }
    return {};
  }
  // The masters that are UP at once (one that hangs costs the others nothing), then each
  // DOWN one's probe.
  std::vector<RedisEndpoint> up, down;
  for (const RedisEndpoint& m : masters()) (health_of(m).up() ? up : down).push_back(m);
  std::vector<Result<RedisReply>> pongs = run_on_each(up, {"PING"}, deadline);
  for (size_t n = 0; n < up.size(); ++n) {
    if (!pongs[n]) {
      health_of(up[n]).mark_down(pongs[n].error().to_string());
    } else if (!pongs[n]->is_status("PONG")) {
      health_of(up[n]).mark_down("redis " + up[n].to_string() + ": PING answered " +
                                 pongs[n]->text);
    }
  }
  for (const RedisEndpoint& m : down) health_of(m).probe_now([&] { return probe_node(m); });
  if (every_master_down()) return make_error(ErrorCode::kUnavailable, down_summary());
  return {};
}

}  // namespace kvtier::tier_internal
