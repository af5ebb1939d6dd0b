#include "kvtier/tier/redis_tier.h"

#include <array>
#include <cstdio>
#include <cstring>

#include "kvtier/tier/chunk_record.h"
#include "redis_router.h"

namespace kvtier {
namespace {

using tier_internal::RedisCommand;
using tier_internal::RedisReplyPtr;

TimePoint deadline_after(Duration timeout) {
  return SteadyClock::instance().now() + timeout;
}

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::span<const std::byte> as_bytes(const redisReply* r) {
  return {reinterpret_cast<const std::byte*>(r->str), r->len};
}

// One `<verb> <redis key>` command per key, pipelined.
Result<std::vector<RedisReplyPtr>> run_per_key(tier_internal::RedisRouter& router,
                                               const RedisTier& tier, std::string_view verb,
                                               std::span<const ChunkKey> keys, Duration timeout) {
  std::vector<std::string> names;
  names.reserve(keys.size());
  for (const ChunkKey& key : keys) names.push_back(tier.redis_key(key));
  std::vector<RedisCommand> commands;
  commands.reserve(names.size());
  for (const std::string& name : names) commands.push_back({.key = name, .args = {verb, name}});
  return router.execute(commands, deadline_after(timeout));
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
    : options_(std::move(options)), router_(std::move(router)) {}

RedisTier::~RedisTier() = default;

Result<std::unique_ptr<RedisTier>> RedisTier::open(const RedisTierOptions& options) {
  if (options.pool_size == 0) {
    return make_error(ErrorCode::kInvalidArgument, "redis tier: pool_size must be > 0");
  }
  Result<tier_internal::RedisEndpoint> seed = tier_internal::parse_redis_url(options.url);
  if (!seed) return std::unexpected(seed.error());
  return std::unique_ptr<RedisTier>(new RedisTier(
      options, std::make_unique<tier_internal::RedisRouter>(*seed, options.pool_size)));
}

bool RedisTier::cluster_mode() const {
  return router_->cluster_mode();
}

Result<std::vector<ChunkStatus>> RedisTier::do_put(
    std::span<const ChunkKey> keys, std::span<const std::span<const std::byte>> chunks,
    Duration timeout) {
  std::vector<std::string> names;
  std::vector<std::array<std::byte, kChunkRecordHeaderBytes>> headers(keys.size());
  std::vector<RedisCommand> commands;
  names.reserve(keys.size());
  commands.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    names.push_back(redis_key(keys[i]));
    encode_chunk_header(keys[i], chunks[i], headers[i]);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    // The value is the record: header, then the payload straight from the caller's buffer.
    commands.push_back({.key = names[i],
                        .args = {"SET", names[i], as_text(headers[i])},
                        .tail = as_text(chunks[i])});
  }
  Result<std::vector<RedisReplyPtr>> replies = router_->execute(commands, deadline_after(timeout));
  if (!replies) return std::unexpected(replies.error());
  std::vector<ChunkStatus> statuses;
  for (const RedisReplyPtr& r : *replies) {
    const bool ok = r && r->type == REDIS_REPLY_STATUS && std::string_view(r->str, r->len) == "OK";
    statuses.push_back(ok ? ChunkStatus::kOk : ChunkStatus::kError);
  }
  return statuses;
}

Result<std::vector<ChunkStatus>> RedisTier::do_get(std::span<const ChunkKey> keys,
                                                   std::span<const std::span<std::byte>> dst,
                                                   Duration timeout) {
  Result<std::vector<RedisReplyPtr>> replies = run_per_key(*router_, *this, "GET", keys, timeout);
  if (!replies) return std::unexpected(replies.error());
  std::vector<ChunkStatus> statuses;
  for (size_t i = 0; i < keys.size(); ++i) {
    const redisReply* r = (*replies)[i].get();
    if (r == nullptr || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
      statuses.push_back(ChunkStatus::kError);
      continue;
    }
    if (r->type == REDIS_REPLY_NIL) {
      statuses.push_back(ChunkStatus::kMiss);
      continue;
    }
    const std::span<const std::byte> record = as_bytes(r);
    if (record.size() != kChunkRecordHeaderBytes + dst[i].size() ||
        verify_chunk_record(record.first(kChunkRecordHeaderBytes), keys[i],
                            record.subspan(kChunkRecordHeaderBytes)) != RecordCheck::kOk) {
      statuses.push_back(ChunkStatus::kCorrupt);  // never copied out
      continue;
    }
    if (!dst[i].empty()) {
      std::memcpy(dst[i].data(), record.data() + kChunkRecordHeaderBytes, dst[i].size());
    }
    statuses.push_back(ChunkStatus::kOk);
  }
  return statuses;
}

Result<std::vector<bool>> RedisTier::do_contains(std::span<const ChunkKey> keys, Duration timeout) {
  Result<std::vector<RedisReplyPtr>> replies =
      run_per_key(*router_, *this, "EXISTS", keys, timeout);
  if (!replies) return std::unexpected(replies.error());
  std::vector<bool> present;
  for (const RedisReplyPtr& r : *replies) {
    present.push_back(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  }
  return present;
}

Status RedisTier::do_ping(Duration timeout) {
  return router_->ping_all(deadline_after(timeout));
}

}  // namespace kvtier
