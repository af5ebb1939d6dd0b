#include "server_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "kvtier/server/client.h"
#include "kvtier/server/sealed_memory.h"
#include "kvtier/server/server.h"
#include "redis_side.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunksPerRequest = 8;
constexpr size_t kWindow = 32;  // requests in flight, both sides (kvtierd allows 64)

// A model shape whose block is 256 KiB over 4 layers (64 KiB per layer-block); the chunk size
// is set by blocks_per_chunk.
KvLayout bench_layout(size_t chunk_bytes) {
  KvGroup g{.layers = 4, .kv_heads = 8, .head_dim = 128, .dtype_bytes = 2, .block_size = 16};
  g.blocks_per_chunk = static_cast<uint32_t>(std::max<size_t>(1, chunk_bytes / g.block_bytes()));
  return KvLayout{DeviceLayout::kPerLayer, {g}};
}

// The client's "device" KV cache: per-layer tensors in one sealed memfd.
struct KvRegion {
  KvRegion(const KvLayout& layout, uint32_t num_blocks) : layout(layout), num_blocks(num_blocks) {
    tensor_bytes = layout.tensor_bytes(0, num_blocks).value();
    bytes = layout.total_bytes(num_blocks).value();
    auto created = server::SealedMemory::create(bytes, "kvtier-bench-kv");
    if (!created) throw std::runtime_error(created.error().message);
    memory = std::move(*created);
    base = memory->data();
    for (size_t i = 0; i < bytes; i += 4096) base[i] = static_cast<std::byte>(i >> 12);
  }
  server::Registration registration() const {
    server::GroupTensors t{.num_blocks = num_blocks};
    for (size_t l = 0; l < layout.tensors_per_group(0); ++l) t.offsets.push_back(l * tensor_bytes);
    return {.rank = 0, .layout = layout, .memory = memory->describe({t})};
  }
  // The layer pieces of chunk c, in host-slot order ([layer][block]), as an LMCache-style
  // backend gathers them into one value.
  template <class F>
  void for_each_piece(uint32_t chunk, F&& f) const {
    const KvGroup& g = layout.groups[0];
    const size_t lb = layout.tensor_block_bytes(0);
    for (size_t l = 0; l < layout.tensors_per_group(0); ++l) {
      f(base + l * tensor_bytes + size_t{chunk} * g.blocks_per_chunk * lb, g.blocks_per_chunk * lb);
    }
  }
  KvLayout layout;
  uint32_t num_blocks;
  size_t tensor_bytes = 0, bytes = 0;
  std::unique_ptr<server::SealedMemory> memory;
  std::byte* base = nullptr;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<ChunkKey> chunk_keys_of(uint64_t round, uint32_t first, uint32_t n) {
  std::vector<ChunkKey> keys;
  for (uint32_t c = first; c < first + n; ++c) keys.push_back(ChunkKey{.lo = c, .hi = round});
  return keys;
}

// kvtierd: every chunk in requests of kChunksPerRequest, kWindow requests in flight.
double kvtier_transfer(server::CacheClient& client, const KvRegion& region, uint32_t num_chunks,
                       uint64_t round, bool store) {
  const uint32_t per = region.layout.groups[0].blocks_per_chunk;
  std::deque<std::future<TransferResult>> window;
  bool ok = true;
  const auto drain_one = [&] {
    ok &= window.front().get().outcome == Outcome::kCompleted;
    window.pop_front();
  };
  const auto t0 = Clock::now();
  for (uint32_t c = 0; c < num_chunks; c += kChunksPerRequest) {
    const uint32_t n = std::min<uint32_t>(kChunksPerRequest, num_chunks - c);
    std::vector<std::vector<uint32_t>> blocks(n);
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t b = 0; b < per; ++b) blocks[i].push_back((c + i) * per + b);
    }
    auto keys = chunk_keys_of(round, c, n);
    window.push_back(store ? client.store(c, 0, std::move(keys), std::move(blocks))
                           : client.retrieve(c, 0, std::move(keys), std::move(blocks)));
    if (window.size() >= kWindow) drain_one();
  }
  while (!window.empty()) drain_one();
  const double s = seconds_since(t0);
  if (!ok) throw std::runtime_error("a kvtierd transfer did not complete");
  return s;
}

// `lookups` keys looked up, `keys_per_lookup` per LOOKUP (a prompt's chunk keys go in one).
double kvtier_lookups(server::CacheClient& client, size_t lookups, size_t keys_per_lookup,
                      uint64_t round, uint32_t num_chunks) {
  std::deque<std::future<Result<server::LookupReply>>> window;
  const auto t0 = Clock::now();
  for (size_t i = 0, n = 0; i < lookups; i += n) {
    const uint32_t first = static_cast<uint32_t>(i % num_chunks);
    n = std::min(
        {keys_per_lookup, size_t{num_chunks - first}, lookups - i});  // exactly `lookups` keys
    window.push_back(client.lookup(chunk_keys_of(round, first, static_cast<uint32_t>(n))));
    if (window.size() >= kWindow) {
      if (!window.front().get()) throw std::runtime_error("a kvtierd lookup failed");
      window.pop_front();
    }
  }
  for (auto& f : window) static_cast<void>(f.get());
  return seconds_since(t0);
}

// Redis: one pipelined command per chunk (SET gathers, GET scatters), kWindow * kChunksPerRequest
// commands in flight.
double redis_transfer(redisContext* redis, const KvRegion& region, uint32_t num_chunks,
                      uint64_t round, bool store) {
  const size_t window = kWindow * kChunksPerRequest;
  std::vector<char> value(region.layout.groups[0].chunk_bytes());
  size_t pending = 0;
  uint32_t next_reply = 0;
  const auto take_reply = [&] {
    void* raw = nullptr;
    if (redisGetReply(redis, &raw) != REDIS_OK || !raw) throw std::runtime_error("redis reply");
    auto* reply = static_cast<redisReply*>(raw);
    if (!store) {
      if (reply->type != REDIS_REPLY_STRING || size_t(reply->len) != value.size()) {
        throw std::runtime_error("redis GET returned no chunk");
      }
      size_t off = 0;
      region.for_each_piece(next_reply, [&](std::byte* p, size_t n) {
        std::memcpy(p, reply->str + off, n);
        off += n;
      });
    }
    freeReplyObject(reply);
    ++next_reply;
    --pending;
  };
  const auto t0 = Clock::now();
  for (uint32_t c = 0; c < num_chunks; ++c) {
    const std::string key = "kv:" + std::to_string(round) + ":" + std::to_string(c);
    if (store) {
      size_t off = 0;
      region.for_each_piece(c, [&](std::byte* p, size_t n) {
        std::memcpy(value.data() + off, p, n);
        off += n;
      });
      redisAppendCommand(redis, "SET %b %b", key.data(), key.size(), value.data(), value.size());
    } else {
      redisAppendCommand(redis, "GET %b", key.data(), key.size());
    }
    if (++pending >= window) take_reply();
  }
  while (pending > 0) take_reply();
  return seconds_since(t0);
}

double redis_lookups(redisContext* redis, size_t lookups, uint64_t round, uint32_t num_chunks) {
  const size_t window = kWindow;
  size_t pending = 0;
  const auto take = [&] {
    void* raw = nullptr;
    if (redisGetReply(redis, &raw) != REDIS_OK || !raw) throw std::runtime_error("redis reply");
    freeReplyObject(raw);
    --pending;
  };
  const auto t0 = Clock::now();
  for (size_t i = 0; i < lookups; ++i) {
    const std::string key = "kv:" + std::to_string(round) + ":" + std::to_string(i % num_chunks);
    redisAppendCommand(redis, "EXISTS %b", key.data(), key.size());
    if (++pending >= window) take();
  }
  while (pending > 0) take();
  return seconds_since(t0);
}

struct Row {
  std::string op;
  size_t chunk_bytes;
  double kvtier_s, redis_s;  // best of the repeats
  double amount;             // bytes (store, retrieve) or lookups
};

void print(const Row& r, bool json, std::ostream& out) {
  const bool bytes = !r.op.starts_with("lookup");
  const double kv = r.amount / r.kvtier_s / (bytes ? 1e9 : 1.0);
  const double rd = r.amount / r.redis_s / (bytes ? 1e9 : 1.0);
  if (json) {
    nlohmann::json j{{"bench", "server"}, {"op", r.op}, {"chunk_bytes", r.chunk_bytes}};
    j[bytes ? "kvtier_gbps" : "kvtier_ops"] = kv;
    j[bytes ? "redis_gbps" : "redis_ops"] = rd;
    j["ratio"] = kv / rd;
    out << j.dump() << std::endl;
  } else {
    out << std::left << std::setw(9) << r.op << std::right << std::setw(9) << (r.chunk_bytes >> 10)
        << " KiB  kvtierd " << std::setw(10) << std::setprecision(4) << kv
        << (bytes ? " GB/s" : " op/s") << "  redis " << std::setw(10) << rd
        << (bytes ? " GB/s" : " op/s") << "  ratio " << kv / rd << std::endl;
  }
}

}  // namespace

int run_server_bench(const ServerBenchOptions& options, std::ostream& out) {
  std::unique_ptr<RedisProcess> redis;
  try {
    redis = std::make_unique<RedisProcess>(options.redis_server);
  } catch (const std::exception& e) {
    std::cerr << "bench server: " << e.what() << "\n";
    return 2;
  }
  uint64_t round = 1;
  for (size_t chunk_bytes : options.chunk_bytes) {
    const KvLayout layout = bench_layout(chunk_bytes);
    const KvGroup& g = layout.groups[0];
    const uint32_t num_chunks =
        static_cast<uint32_t>(std::max<size_t>(1, options.total_bytes / g.chunk_bytes()));
    KvRegion region(layout, num_chunks * g.blocks_per_chunk);

    Config config;
    config.server.endpoint = "ipc:///tmp/kvtier-bench-" + std::to_string(getpid()) + ".sock";
    config.layout = LayoutConfig{.device_layout = layout.device_layout,
                                 .layers = g.layers,
                                 .kv_heads = g.kv_heads,
                                 .head_dim = g.head_dim,
                                 .dtype_bytes = g.dtype_bytes,
                                 .block_size = g.block_size,
                                 .blocks_per_chunk = g.blocks_per_chunk};
    // Room for one round: after the warm-up round every store reuses warm slots, evicting the
    // previous round's chunks (LRU), as a full cache does in steady state.
    config.cache.host_bytes = uint64_t{g.chunk_bytes()} * num_chunks;
    server::Server server(server::ServerOptions{.config = config});
    std::promise<Status> served;
    std::thread server_thread([&] { served.set_value(server.run()); });
    int rc = 0;
    {
      server::ClientOptions client_options = server::ClientOptions::from_config(config);
      server::CacheClient client(client_options, region.registration());
      if (!client.wait_until_ok(std::chrono::seconds(10))) {
        std::cerr << "bench server: kvtierd: " << client.health().reason << "\n";
        rc = 1;
      } else {
        Row store{"store", g.chunk_bytes(), 1e30, 1e30, double(g.chunk_bytes()) * num_chunks};
        Row retrieve{"retrieve", g.chunk_bytes(), 1e30, 1e30, store.amount};
        // One key per LOOKUP, and a 64-chunk prompt prefix per LOOKUP (Redis: one EXISTS per
        // key either way, pipelined, as a Redis backend checks chunk keys).
        Row lookup{"lookup", g.chunk_bytes(), 1e30, 1e30, double(options.lookups)};
        Row prefix{"lookup_prefix64", g.chunk_bytes(), 1e30, 1e30, double(options.lookups)};
        // Warm-up round, not measured: faults in the pool's pages and Redis's allocations.
        kvtier_transfer(client, region, num_chunks, round, true);
        redis_transfer(redis->context(), region, num_chunks, round, true);
        freeReplyObject(redisCommand(redis->context(), "FLUSHALL"));
        ++round;
        for (int r = 0; r < options.repeat; ++r, ++round) {
          store.kvtier_s =
              std::min(store.kvtier_s, kvtier_transfer(client, region, num_chunks, round, true));
          store.redis_s = std::min(
              store.redis_s, redis_transfer(redis->context(), region, num_chunks, round, true));
          retrieve.kvtier_s = std::min(retrieve.kvtier_s,
                                       kvtier_transfer(client, region, num_chunks, round, false));
          retrieve.redis_s = std::min(
              retrieve.redis_s, redis_transfer(redis->context(), region, num_chunks, round, false));
          lookup.kvtier_s = std::min(lookup.kvtier_s,
                                     kvtier_lookups(client, options.lookups, 1, round, num_chunks));
          prefix.kvtier_s = std::min(
              prefix.kvtier_s, kvtier_lookups(client, options.lookups, 64, round, num_chunks));
          prefix.redis_s = std::min(
              prefix.redis_s, redis_lookups(redis->context(), options.lookups, round, num_chunks));
          lookup.redis_s = std::min(
              lookup.redis_s, redis_lookups(redis->context(), options.lookups, round, num_chunks));
          freeReplyObject(redisCommand(redis->context(), "FLUSHALL"));
        }
        for (const Row& row : {store, retrieve, lookup, prefix}) print(row, options.json, out);
      }
    }
    server.request_stop();
    server_thread.join();
    if (Status st = served.get_future().get(); !st) {
      std::cerr << "bench server: kvtierd: " << st.error().message << "\n";
      rc = 1;
    }
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace kvtier::bench
