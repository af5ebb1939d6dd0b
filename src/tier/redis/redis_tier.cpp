#include "kvtier/tier/redis_tier.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "kvtier/core/task_pool.h"
#include "kvtier/tier/chunk_record.h"
#include "redis_router.h"

namespace kvtier {
namespace {

using tier_internal::BatchReplies;
using tier_internal::CommandOutcome;
using tier_internal::RedisCommand;
using tier_internal::RedisReply;

TimePoint deadline_after(Duration timeout) {
  return SteadyClock::instance().now() + timeout;
}

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The status of a command that got no reply: its node was down, or it stayed redirected.
ChunkStatus without_reply(CommandOutcome outcome) {
  return outcome == CommandOutcome::kSkipped ? ChunkStatus::kSkipped : ChunkStatus::kError;
}

// From this chunk size on, a put's checksums are computed ahead on a helper. A checksum the
// calling thread computes just before the send leaves the chunk in its L2 cache for the send's
// copy, unless the chunk and the socket buffers it is copied into do not fit there together;
// then the copy reads memory either way, and the helper's checksums are time saved. Measured
// here (L2 1 MiB, puts over loopback, calls alternating): ahead, 512 KiB and 2 MiB puts ran
// 1.05-1.14x as fast; 256 KiB puts 0.93-0.98x.
size_t hash_ahead_from_bytes() {
  static const size_t bytes = [] {
    const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? static_cast<size_t>(l2) / 2 : size_t{512} << 10;
  }();
  return bytes;
}

}  // namespace

std::string redis_key_prefix(const KeyNamespace& ns) {
  std::string model = ns.model;
  for (char& c : model) {
    if (c == '{' || c == '}') c = '_';
  }
  char fingerprint[17];
  std::snprintf(fingerprint, sizeof fingerprint, "%016llx",
                static_cast<unsigned long long>(ns.layout_fingerprint));
  return "kvtier:" + model + ":" + fingerprint + ":";
}

RedisTier::RedisTier(RedisTierOptions options, std::unique_ptr<tier_internal::RedisRouter> router)
    : options_(std::move(options)), router_(std::move(router)) {
  // Two threads pinned to the first two CPUs, so that a caller on either has one beside it.
  if (const size_t cpus = TaskPool::usable_cpus().size(); cpus > 1) {
    checksum_helpers_ = std::make_unique<TaskPool>(2, TaskPlacement::kOtherCpus);
  }
}

RedisTier::~RedisTier() = default;

Result<std::unique_ptr<RedisTier>> RedisTier::open(const RedisTierOptions& options) {
  if (options.pool_size == 0) {
    return make_error(ErrorCode::kInvalidArgument, "redis tier: pool_size must be > 0");
  }
  Result<tier_internal::RedisEndpoint> seed = tier_internal::parse_redis_url(options.url);
  if (!seed) return std::unexpected(seed.error());
  try {
    return std::unique_ptr<RedisTier>(
        new RedisTier(options, std::make_unique<tier_internal::RedisRouter>(
                                   *seed, options.pool_size, options.node_health)));
  } catch (const std::invalid_argument& e) {
    return make_error(ErrorCode::kInvalidArgument, std::string("redis tier: ") + e.what());
  }
}

bool RedisTier::cluster_mode() const {
  return router_->cluster_mode();
}

std::vector<DownPart> RedisTier::down_parts() const {
  return router_->down_nodes();
}

void RedisTier::probe_down_parts() {
  router_->probe_down_nodes();
}

Result<std::vector<ChunkStatus>> RedisTier::do_put(
    std::span<const ChunkKey> keys, std::span<const std::span<const std::byte>> chunks,
    Duration timeout) {
  std::vector<std::string> names;
  std::vector<std::array<std::byte, kChunkRecordHeaderBytes>> headers(keys.size());
  std::vector<RedisCommand> commands;
  names.reserve(keys.size());
  commands.reserve(keys.size());
  for (const ChunkKey& key : keys) names.push_back(redis_key(key));
  // headers[i] is computed by whichever thread claims it first (0 free, 1 being computed,
  // 2 done): the sending thread as the SET goes out, or a helper running ahead of it.
  std::vector<std::atomic<uint8_t>> header_state(keys.size());
  const auto claim_header = [&](size_t i) {
    uint8_t free = 0;
    if (!header_state[i].compare_exchange_strong(free, 1, std::memory_order_acq_rel)) return;
    encode_chunk_header(keys[i], chunks[i], headers[i]);
    header_state[i].store(2, std::memory_order_release);
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    // The value is the record: its header, then the payload, both sent from where they are.
    // The header (the payload's checksum) is ready before the SET goes out: the sending thread
    // computes it then (so that the send finds the payload in the cache), unless the helper got
    // to it first; one the helper is computing at that moment is waited for.
    commands.push_back({.key = names[i],
                        .args = {"SET", names[i], ""},
                        .tail = {as_text(headers[i]), as_text(chunks[i])},
                        .on_release = [&, i] {
                          claim_header(i);
                          while (header_state[i].load(std::memory_order_acquire) != 2) {
                          }
                        }});
  }
  const TimePoint deadline = deadline_after(timeout);
  size_t largest = 0;
  for (const auto& c : chunks) largest = std::max(largest, c.size());
  std::optional<Result<BatchReplies>> executed;
  if (checksum_helpers_ && keys.size() > 1 && largest >= hash_ahead_from_bytes()) {
    // Two tasks, the send and the checksums ahead of it, for the caller and a helper (whichever
    // claims which). Neither waits for the other but for one checksum in progress, so the
    // caller alone may run both, one after the other. Once the send is over, the checksums left
    // are of commands that never went out (the send failed): the helper stops there.
    std::atomic<bool> send_over{false};
    checksum_helpers_->run(
        2,
        [&](size_t task) {
          if (task == 0) {
            executed.emplace(router_->execute(commands, deadline));
            send_over.store(true, std::memory_order_release);
          } else {
            for (size_t i = 0; i < keys.size() && !send_over.load(std::memory_order_acquire); ++i) {
              claim_header(i);
            }
          }
        },
        deadline + std::chrono::hours(24));  // the send is bounded by its own deadline
  } else {
    executed.emplace(router_->execute(commands, deadline));
  }
  if (!executed) {  // a task of no deadline that did not run: a bug in the pool
    return make_error(ErrorCode::kInternal, "redis tier: a put's send never ran");
  }
  Result<BatchReplies>& batch = *executed;
  if (!batch) return std::unexpected(batch.error());
  std::vector<ChunkStatus> statuses;
  statuses.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (batch->outcomes[i] != CommandOutcome::kReplied) {
      statuses.push_back(without_reply(batch->outcomes[i]));
    } else {
      statuses.push_back(batch->replies[i].is_status("OK") ? ChunkStatus::kOk
                                                           : ChunkStatus::kError);
    }
  }
  // Redis drops keys itself (maxmemory, a flush) without telling: the stores are published,
  // and the removal of what falls out of the newest options_.max_announced_chunks.
  if (KvEventPublisher* p = events()) {
    std::vector<ChunkKey> stored;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (statuses[i] == ChunkStatus::kOk) stored.push_back(keys[i]);
    }
    std::lock_guard lock(announced_mutex_);  // the events in the order of the record's changes
    p->stored(name(), stored, event_block_size());
    for (const ChunkKey& key : stored) {
      if (announced_.contains(key)) {
        announced_.move_to_mru(key);
      } else {
        announced_.push_mru(key);
      }
    }
    std::vector<ChunkKey> oldest;
    while (announced_.size() > options_.max_announced_chunks) {
      oldest.push_back(*announced_.begin());
      announced_.pop_lru();
    }
    if (!oldest.empty()) p->removed(name(), oldest);
  }
  return statuses;
}

Result<std::vector<ChunkStatus>> RedisTier::do_get(std::span<const ChunkKey> keys,
                                                   std::span<const std::span<std::byte>> dst,
                                                   Duration timeout) {
  std::vector<std::string> names;
  std::vector<std::array<std::byte, kChunkRecordHeaderBytes>> headers(keys.size());
  std::vector<RedisCommand> commands;
  names.reserve(keys.size());
  commands.reserve(keys.size());
  for (const ChunkKey& key : keys) names.push_back(redis_key(key));
  std::vector<uint8_t> verified(keys.size(), 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    // A record of the expected size is read straight into its header and dst[i], and verified
    // as soon as it is there, while it is in the cache.
    commands.push_back({.key = names[i],
                        .args = {"GET", names[i]},
                        .head = headers[i],
                        .body = dst[i],
                        .on_reply = [&, i](const RedisReply& r) {
                          verified[i] =
                              r.in_buffers &&
                              verify_chunk_record(headers[i], keys[i], dst[i]) == RecordCheck::kOk;
                        }});
  }
  Result<BatchReplies> batch = router_->execute(commands, deadline_after(timeout));
  if (!batch) return std::unexpected(batch.error());
  std::vector<ChunkStatus> statuses;
  statuses.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const RedisReply& r = batch->replies[i];
    if (batch->outcomes[i] != CommandOutcome::kReplied) {
      statuses.push_back(without_reply(batch->outcomes[i]));
    } else if (r.type == RedisReply::Type::kNil) {
      statuses.push_back(ChunkStatus::kMiss);
    } else if (r.type != RedisReply::Type::kString) {
      statuses.push_back(ChunkStatus::kError);
    } else if (!r.in_buffers) {
      statuses.push_back(ChunkStatus::kCorrupt);  // not a record of this size; never copied out
    } else {
      // dst[i] holds the payload; one that failed the check is left there, unspecified.
      statuses.push_back(verified[i] ? ChunkStatus::kOk : ChunkStatus::kCorrupt);
    }
  }
  if (KvEventPublisher* p = events()) {  // an announced chunk Redis dropped: announced removed
    std::lock_guard lock(announced_mutex_);
    std::vector<ChunkKey> gone;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (statuses[i] == ChunkStatus::kMiss && announced_.erase(keys[i])) gone.push_back(keys[i]);
    }
    if (!gone.empty()) p->removed(name(), gone);
  }
  return statuses;
}

Result<std::vector<bool>> RedisTier::do_contains(std::span<const ChunkKey> keys, Duration timeout) {
  std::vector<std::string> names;
  std::vector<RedisCommand> commands;
  names.reserve(keys.size());
  commands.reserve(keys.size());
  for (const ChunkKey& key : keys) names.push_back(redis_key(key));
  for (const std::string& name : names) commands.push_back({.key = name, .args = {"EXISTS", name}});
  Result<BatchReplies> batch = router_->execute(commands, deadline_after(timeout));
  if (!batch) return std::unexpected(batch.error());
  std::vector<bool> present;
  present.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const RedisReply& r = batch->replies[i];
    // A key of a master that is down is not there as far as anyone can use it.
    present.push_back(batch->outcomes[i] == CommandOutcome::kReplied &&
                      r.type == RedisReply::Type::kInteger && r.integer == 1);
  }
  return present;
}

Status RedisTier::do_ping(Duration timeout) {
  return router_->ping_all(deadline_after(timeout));
}

}  // namespace kvtier
