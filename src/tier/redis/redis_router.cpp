#include "redis_router.h"

#include <algorithm>
#include <charconv>

#include "redis_key_slot.h"

namespace kvtier::tier_internal {
namespace {

bool is_error(const redisReply* r) {
  return r->type == REDIS_REPLY_ERROR;
}
std::string_view text_of(const redisReply* r) {
  return {r->str, r->len};
}

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

}  // namespace

bool RedisRouter::cluster_mode() const {
  std::lock_guard lock(topology_mutex_);
  return cluster_;
}

RedisConnectionPool& RedisRouter::pool_for(const RedisEndpoint& endpoint) {
  std::lock_guard lock(pools_mutex_);
  std::unique_ptr<RedisConnectionPool>& pool = pools_[endpoint.to_string()];
  if (!pool) pool = std::make_unique<RedisConnectionPool>(endpoint, connections_per_node_);
  return *pool;
}

Result<bool> RedisRouter::load_topology(const RedisEndpoint& node, TimePoint deadline) {
  Result<RedisReplyPtr> reply = run_one(node, {.key = "", .args = {"CLUSTER", "SLOTS"}}, deadline);
  if (!reply) return std::unexpected(reply.error());
  const redisReply* r = reply->get();
  if (r == nullptr || is_error(r))
    return false;  // "ERR This instance has cluster support disabled"
  if (r->type != REDIS_REPLY_ARRAY) {
    return make_error(ErrorCode::kInternal, "redis: unexpected CLUSTER SLOTS reply");
  }
  std::vector<RedisEndpoint> masters;
  std::array<int16_t, 16384> slots;
  slots.fill(-1);
  for (size_t i = 0; i < r->elements; ++i) {
    const redisReply* range = r->element[i];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        range->element[0]->type != REDIS_REPLY_INTEGER ||
        range->element[1]->type != REDIS_REPLY_INTEGER ||
        range->element[2]->type != REDIS_REPLY_ARRAY || range->element[2]->elements < 2) {
      return make_error(ErrorCode::kInternal, "redis: malformed CLUSTER SLOTS entry");
    }
    const redisReply* master = range->element[2];
    RedisEndpoint endpoint{.host = std::string(text_of(master->element[0])),
                           .port = static_cast<int>(master->element[1]->integer)};
    if (endpoint.host.empty()) endpoint.host = node.host;  // "" means the node we asked
    auto it = std::ranges::find(masters, endpoint);
    const auto index = static_cast<int16_t>(it - masters.begin());
    if (it == masters.end()) masters.push_back(endpoint);
    const long long lo = std::max<long long>(0, range->element[0]->integer);
    const long long hi = std::min<long long>(kRedisClusterSlots - 1, range->element[1]->integer);
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

Result<RedisReplyPtr> RedisRouter::run_one(const RedisEndpoint& node, const RedisCommand& command,
                                           TimePoint deadline) {
  std::vector<RedisReplyPtr> replies(1);
  std::vector<std::optional<RedisEndpoint>> ask(1);
  std::vector<size_t> again;
  bool moved = false;
  if (Status ok =
          run_on_node(node, std::span(&command, 1), {0}, replies, ask, again, moved, deadline);
      !ok) {
    return std::unexpected(ok.error());
  }
  return std::move(replies[0]);  // null when redirected
}

Status RedisRouter::run_on_node(const RedisEndpoint& node, std::span<const RedisCommand> commands,
                                const std::vector<size_t>& which,
                                std::vector<RedisReplyPtr>& replies,
                                std::vector<std::optional<RedisEndpoint>>& ask,
                                std::vector<size_t>& again, bool& moved, TimePoint deadline) {
  RedisConnectionPool& pool = pool_for(node);
  Result<std::unique_ptr<RedisConnection>> connection = pool.borrow(deadline);
  if (!connection) return std::unexpected(connection.error());
  RedisConnection& c = **connection;
  for (size_t i : which) {
    if (ask[i]) c.append({"ASKING"});
    c.append(commands[i].args, commands[i].tail);
  }
  Status status;
  // Every queued reply is read, or the connection is broken and closed, so that no reply of
  // this batch is read by the next one.
  for (size_t i : which) {
    if (ask[i]) {
      if (Result<RedisReplyPtr> asking = c.read_reply(deadline); !asking) {
        status = std::unexpected(asking.error());
        break;
      }
    }
    Result<RedisReplyPtr> reply = c.read_reply(deadline);
    if (!reply) {
      status = std::unexpected(reply.error());
      break;
    }
    ask[i].reset();
    if (is_error(reply->get())) {
      if (std::optional<Redirect> redirect = parse_redirect(text_of(reply->get()))) {
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
    replies[i] = std::move(*reply);
  }
  pool.give_back(std::move(*connection));
  return status;
}

Result<std::vector<RedisReplyPtr>> RedisRouter::execute(std::span<const RedisCommand> commands,
                                                        TimePoint deadline) {
  if (Status ok = ensure_topology(deadline); !ok) return std::unexpected(ok.error());
  std::vector<RedisReplyPtr> replies(commands.size());
  std::vector<std::optional<RedisEndpoint>> ask(commands.size());
  std::vector<size_t> pending(commands.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  for (int round = 0; round <= kMaxRedirects && !pending.empty(); ++round) {
    std::map<std::string, std::pair<RedisEndpoint, std::vector<size_t>>> by_node;
    for (size_t i : pending) {
      const std::optional<RedisEndpoint>& asked = ask[i];
      RedisEndpoint node = asked ? *asked : node_for(commands[i].key);
      auto& group = by_node[node.to_string()];
      group.first = std::move(node);
      group.second.push_back(i);
    }
    std::vector<size_t> again;
    bool moved = false;
    for (const auto& [name, group] : by_node) {
      if (Status ok = run_on_node(group.first, commands, group.second, replies, ask, again, moved,
                                  deadline);
          !ok) {
        return std::unexpected(ok.error());
      }
    }
    if (moved) {
      // The slot map changed (resharding or failover): take it whole from the node that said so.
      (void)load_topology(node_for(commands[again.front()].key), deadline);
    }
    pending = std::move(again);
  }
  return replies;
}

Status RedisRouter::ping_all(TimePoint deadline) {
  if (Status ok = ensure_topology(deadline); !ok) return ok;
  std::vector<RedisEndpoint> nodes;
  {
    std::lock_guard lock(topology_mutex_);
    nodes = cluster_ ? masters_ : std::vector<RedisEndpoint>{seed_};
  }
  for (const RedisEndpoint& node : nodes) {
    Result<RedisReplyPtr> pong = run_one(node, {.key = "", .args = {"PING"}}, deadline);
    if (!pong) return std::unexpected(pong.error());
    if (!*pong || is_error(pong->get())) {
      return make_error(ErrorCode::kUnavailable,
                        "redis " + node.to_string() + ": PING answered with an error");
    }
  }
  return {};
}

}  // namespace kvtier::tier_internal
