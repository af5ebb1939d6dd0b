#include "server_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <iomanip>
#include <iostream>
#include <latch>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <thread>

#include "kvtier/cache/host_pool.h"
#include "kvtier/device/host_device.h"
#include "kvtier/server/client.h"
#include "kvtier/server/sealed_memory.h"
#include "kvtier/server/server.h"
#include "redis_side.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunksPerRequest = 8;
constexpr size_t kWindow = 32;  // STORE/RETRIEVE requests in flight (kvtierd allows 64)
// LOOKUPs in flight on one client (the socket loop answers them at once: no server limit
// applies); the kvtierd side of a lookup row is the best of these, as Redis's is of its shapes,
// which reach the same 8192 commands in flight.
constexpr size_t kLookupWindows[] = {32, 128, 512, 2048, 8192};

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

// Appends the keys of a LOOKUP of n chunks from `first` on, wrapping around the round's
// num_chunks: a LOOKUP has its n keys whatever the chunk size (a pool of large chunks holds fewer
// than 64).
void append_lookup_keys(std::vector<ChunkKey>& keys, uint64_t round, uint32_t first, size_t n,
                        uint32_t num_chunks) {
  for (size_t j = 0; j < n; ++j)
    keys.push_back(ChunkKey{.lo = (first + j) % num_chunks, .hi = round});
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

// kvtierd: `lookups` keys, `keys_per_lookup` per LOOKUP (a prompt's chunk keys go in one),
// `window` LOOKUPs in flight. Every key was stored this round, so each must be a hit.
double kvtier_lookups(server::CacheClient& client, size_t lookups, size_t keys_per_lookup,
                      size_t window_size, uint64_t round, uint32_t num_chunks) {
  std::deque<std::pair<std::future<Result<server::LookupReply>>, size_t>> window;
  const auto check_one = [&] {
    auto found = window.front().first.get();
    if (!found) throw std::runtime_error("a kvtierd lookup failed: " + found.error().message);
    if (found->hits != window.front().second) throw std::runtime_error("a kvtierd lookup missed");
    window.pop_front();
  };
  const auto t0 = Clock::now();
  for (size_t i = 0, n = 0; i < lookups; i += n) {
    const uint32_t first = static_cast<uint32_t>(i % num_chunks);
    n = std::min(keys_per_lookup, lookups - i);  // exactly `lookups` keys
    std::vector<ChunkKey> keys;
    keys.reserve(n);
    append_lookup_keys(keys, round, first, n, num_chunks);
    window.emplace_back(client.lookup(std::move(keys)), n);
    if (window.size() >= window_size) check_one();
  }
  while (!window.empty()) check_one();
  return seconds_since(t0);
}

// The same lookups through lookup_many, as a pipelining client queues them: calls of window / 2
// LOOKUPs (each its own request, one key or a prefix), two calls in flight.
double kvtier_lookup_groups(server::CacheClient& client, size_t lookups, size_t keys_per_lookup,
                            size_t window, uint64_t round, uint32_t num_chunks) {
  const size_t group = std::max<size_t>(1, window / 2);
  std::deque<std::pair<std::future<std::vector<Result<server::LookupReply>>>, std::vector<size_t>>>
      in_flight;
  const auto check_one = [&] {
    const auto found = in_flight.front().first.get();
    for (size_t i = 0; i < found.size(); ++i) {
      if (!found[i])
        throw std::runtime_error("a kvtierd lookup failed: " + found[i].error().message);
      if (found[i]->hits != in_flight.front().second[i]) {
        throw std::runtime_error("a kvtierd lookup missed");
      }
    }
    in_flight.pop_front();
  };
  const auto t0 = Clock::now();
  for (size_t i = 0; i < lookups;) {
    server::LookupBatch batch;
    std::vector<size_t> sizes;
    for (; i < lookups && batch.size() < group;) {
      const uint32_t first = static_cast<uint32_t>(i % num_chunks);
      const size_t n = std::min(keys_per_lookup, lookups - i);
      append_lookup_keys(batch.keys, round, first, n, num_chunks);
      batch.ends.push_back(batch.keys.size());
      sizes.push_back(n);
      i += n;
    }
    in_flight.emplace_back(client.lookup_many(std::move(batch)), std::move(sizes));
    if (in_flight.size() >= 2) check_one();
  }
  while (!in_flight.empty()) check_one();
  return seconds_since(t0);
}

// How a Redis client may drive the server: `conns` connections (one thread each), each with
// `depth` commands pipelined. The Redis side of every row is the best of several shapes, so that
// the ratio is against Redis at its best on this machine, not against one client's choice.
struct RedisShape {
  size_t conns;
  size_t depth;
};
constexpr RedisShape kLookupShapes[] = {{1, 32},  {1, 128}, {1, 512},  {2, 128}, {2, 512},
                                        {4, 128}, {4, 512}, {2, 2048}, {4, 2048}};
constexpr RedisShape kTransferShapes[] = {{1, 8}, {1, 32}, {1, 128}, {2, 32}, {4, 32}};

// The transfer shapes redis-benchmark runs for values of `value_bytes`: those that pipeline at
// most 32 MiB per connection. Deeper pipelines of large values only lose, and slowly: 64 SETs and
// GETs of 2 MiB took redis-benchmark 26 s at depth 128 (a third of depth 8's rate), 7 s for 1 MiB.
std::vector<RedisShape> benchmark_transfer_shapes(size_t value_bytes) {
  std::vector<RedisShape> shapes;
  for (RedisShape shape : kTransferShapes) {
    if (shape.depth * value_bytes <= (size_t{32} << 20)) shapes.push_back(shape);
  }
  return shapes;
}

// Runs prepare(i) then, timed, run(i) for i in [0, conns), on one thread per connection (each
// with its own state from prepare); the wall time of the run()s.
template <class Prepare, class Run>
double redis_parallel(size_t conns, Prepare&& prepare, Run&& run) {
  std::vector<std::exception_ptr> errors(conns);
  std::latch ready(static_cast<std::ptrdiff_t>(conns));
  std::latch go(1);
  Clock::time_point t0;
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < conns; ++i) {
      threads.emplace_back([&, i] {
        try {
          auto state = prepare(i);
          ready.count_down();
          go.wait();
          run(state, i);
        } catch (...) {
          errors[i] = std::current_exception();
          ready.count_down();
        }
      });
    }
    ready.wait();
    t0 = Clock::now();
    go.count_down();
  }
  const double s = seconds_since(t0);
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return s;
}

// Redis: one command per chunk in [first, first + n), `depth` pipelined, over a raw connection:
// SET writes each chunk's layer pieces straight from the region (writev: the gather costs no
// copy), GET reads each value straight into the region's pieces (the scatter costs no copy).
// The commands are formatted before the clock starts.
struct RedisTransferPart {
  RawRedisConnection connection;
  std::vector<std::string> heads;  // per chunk: the command up to its value (SET) or all (GET)
};

RedisTransferPart prepare_redis_transfer(const RedisProcess& redis, const KvRegion& region,
                                         uint32_t first, uint32_t n, uint64_t round, bool store) {
  RedisTransferPart part{.connection = RawRedisConnection(redis.socket()), .heads = {}};
  const size_t value = region.layout.groups[0].chunk_bytes();
  for (uint32_t c = first; c < first + n; ++c) {
    const std::string key = "kv:" + std::to_string(round) + ":" + std::to_string(c);
    const std::string k = "$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
    part.heads.push_back(store ? "*3\r\n$3\r\nSET\r\n" + k + "$" + std::to_string(value) + "\r\n"
                               : "*2\r\n$3\r\nGET\r\n" + k);
  }
  return part;
}

void run_redis_transfer(RedisTransferPart& part, const KvRegion& region, uint32_t first, bool store,
                        size_t depth) {
  static const std::string crlf = "\r\n";
  const uint32_t n = static_cast<uint32_t>(part.heads.size());
  for (uint32_t done = 0; done < n; done += static_cast<uint32_t>(depth)) {
    const uint32_t k = std::min<uint32_t>(static_cast<uint32_t>(depth), n - done);
    std::vector<iovec> out;
    for (uint32_t i = done; i < done + k; ++i) {
      out.push_back({const_cast<char*>(part.heads[i].data()), part.heads[i].size()});
      if (!store) continue;
      region.for_each_piece(first + i, [&](std::byte* p, size_t bytes) {
        out.push_back({p, bytes});
      });
      out.push_back({const_cast<char*>(crlf.data()), crlf.size()});
    }
    part.connection.write(std::move(out));
    if (store) {
      part.connection.expect_replies(k, "+OK\r\n");
      continue;
    }
    for (uint32_t i = done; i < done + k; ++i) {
      std::vector<std::span<std::byte>> pieces;
      region.for_each_piece(first + i,
                            [&](std::byte* p, size_t bytes) { pieces.emplace_back(p, bytes); });
      part.connection.read_bulk_into(pieces);
    }
  }
}

double redis_transfer(const RedisProcess& redis, const KvRegion& region, uint32_t num_chunks,
                      uint64_t round, bool store, RedisShape shape) {
  const uint32_t per = static_cast<uint32_t>((num_chunks + shape.conns - 1) / shape.conns);
  const auto range = [&](size_t i) {
    const uint32_t first = std::min<uint32_t>(num_chunks, static_cast<uint32_t>(i) * per);
    return std::pair(first, std::min<uint32_t>(per, num_chunks - first));
  };
  return redis_parallel(
      shape.conns,
      [&](size_t i) {
        const auto [first, n] = range(i);
        return prepare_redis_transfer(redis, region, first, n, round, store);
      },
      [&](RedisTransferPart& part, size_t i) {
        run_redis_transfer(part, region, range(i).first, store, shape.depth);
      });
}

// Redis: one EXISTS per key, `depth` pipelined, the `lookups` keys split over the connections.
// As redis-benchmark does, the commands are formatted before the clock starts, written `depth`
// at a time in one call and their replies read in bulk (RawRedisConnection): hiredis's
// per-command formatting and reply objects would make this client, not Redis, the bottleneck.
// Every key was stored this round, so every reply must be ":1".
double redis_lookups(const RedisProcess& redis, size_t lookups, uint64_t round, uint32_t num_chunks,
                     RedisShape shape) {
  struct Part {
    RawRedisConnection connection;
    std::string commands;
    std::vector<size_t> ends;  // of each command in `commands`
  };
  return redis_parallel(
      shape.conns,
      [&](size_t part) {
        Part p{.connection = RawRedisConnection(redis.socket())};
        for (size_t i = part; i < lookups; i += shape.conns) {
          const std::string key =
              "kv:" + std::to_string(round) + ":" + std::to_string(i % num_chunks);
          p.commands +=
              "*2\r\n$6\r\nEXISTS\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
          p.ends.push_back(p.commands.size());
        }
        return p;
      },
      [&](Part& p, size_t) {
        size_t begin = 0;
        for (size_t first = 0; first < p.ends.size(); first += shape.depth) {
          const size_t n = std::min(shape.depth, p.ends.size() - first);
          const size_t end = p.ends[first + n - 1];
          p.connection.write(std::string_view(p.commands).substr(begin, end - begin));
          p.connection.expect_replies(n, ":1\r\n");
          begin = end;
        }
      });
}

// The copy limit: `threads` threads (kvtierd's copy threads) memcpy the same bytes between the
// client's region and a host pool like kvtierd's, piece by piece as the chunks lie in it (gather
// for store, scatter for retrieve), each thread a contiguous share of the chunks. The threads
// start before the clock does.
double memcpy_transfer(const KvRegion& region, std::byte* pool, uint32_t num_chunks, bool store,
                       size_t threads) {
  const size_t chunk_bytes = region.layout.groups[0].chunk_bytes();
  const auto copy_chunks = [&](uint32_t first, uint32_t end) {
    for (uint32_t c = first; c < end; ++c) {
      std::byte* slot = pool + size_t{c} * chunk_bytes;
      region.for_each_piece(c, [&](std::byte* p, size_t bytes) {
        if (store) {
          std::memcpy(slot, p, bytes);
        } else {
          std::memcpy(p, slot, bytes);
        }
        slot += bytes;
      });
    }
  };
  const auto share = [&](size_t t) { return static_cast<uint32_t>(num_chunks * t / threads); };
  std::latch go(1);
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) {
    helpers.emplace_back([&, t] {
      go.wait();
      copy_chunks(share(t), share(t + 1));
    });
  }
  const auto t0 = Clock::now();
  go.count_down();
  copy_chunks(share(0), share(1));
  for (std::thread& h : helpers) h.join();
  return seconds_since(t0);
}

// redis-benchmark against the same server: requests/s per test name ("SET", "GET", or the
// command line), the best over `shapes`. Empty when redis-benchmark is not installed or fails.
std::map<std::string, double> redis_benchmark(const std::string& binary, const std::string& socket,
                                              size_t requests, std::vector<std::string> test,
                                              std::span<const RedisShape> shapes) {
  std::map<std::string, double> best;
  const std::string csv = "/tmp/kvtier-bench-rb-" + std::to_string(getpid()) + ".csv";
  for (const RedisShape& shape : shapes) {
    unlink(csv.c_str());
    std::vector<std::string> argv = {binary,
                                     "-s",
                                     socket,
                                     "-n",
                                     std::to_string(requests),
                                     "-c",
                                     std::to_string(shape.conns),
                                     "-P",
                                     std::to_string(shape.depth),
                                     "--csv"};
    argv.insert(argv.end(), test.begin(), test.end());
    ChildProcess p;
    try {
      p = ChildProcess::spawn(argv, {.search_path = true, .output_file = csv});
    } catch (const std::exception&) {
      return {};
    }
    if (!p.wait_exit(std::chrono::seconds(60)) || p.wait_status() != 0) {
      p.kill_and_reap();
      unlink(csv.c_str());
      return {};
    }
    std::ifstream in(csv);
    for (std::string line; std::getline(in, line);) {
      // "NAME","RPS",...  (the header line's rps column is not a number)
      const size_t a = line.find("\",\"");
      if (line.size() < 2 || line[0] != '"' || a == std::string::npos) continue;
      const std::string name = line.substr(1, a - 1);
      char* end = nullptr;
      const double rps = std::strtod(line.c_str() + a + 3, &end);
      if (end == line.c_str() + a + 3) continue;
      best[name] = std::max(best[name], rps);
    }
  }
  unlink(csv.c_str());
  return best;
}

struct Row {
  std::string op;
  size_t chunk_bytes;
  double kvtier_s = 1e30, redis_s = 1e30, memcpy_s = 1e30;  // best of the repeats
  double amount;                                            // bytes (store, retrieve) or keys
  RedisShape redis_shape{};                                 // of the best Redis measurement
  // Of the best kvtierd measurement: the client call (lookup rows) and requests in flight.
  std::string kvtier_api = "store/retrieve";
  size_t kvtier_window = kWindow;
  size_t copy_threads = 1;     // kvtierd's copy threads (store, retrieve), the memcpy limit's too
  double redis_benchmark = 0;  // redis-benchmark's best, in the row's unit (0: not measured)

  void redis(double s, RedisShape shape) {
    if (s < redis_s) redis_s = s, redis_shape = shape;
  }
  void kvtier(double s, std::string api, size_t window) {
    if (s < kvtier_s) kvtier_s = s, kvtier_api = std::move(api), kvtier_window = window;
  }
};

void print(const Row& r, bool json, std::ostream& out) {
  const bool bytes = !r.op.starts_with("lookup");
  const double scale = bytes ? 1e9 : 1.0;
  const double kv = r.amount / r.kvtier_s / scale;
  const double rd = r.amount / r.redis_s / scale;
  const double mc = r.amount / r.memcpy_s / scale;
  if (json) {
    nlohmann::ordered_json j{{"bench", "server"}, {"op", r.op}, {"chunk_bytes", r.chunk_bytes}};
    j[bytes ? "kvtier_gbps" : "kvtier_ops"] = kv;
    j[bytes ? "redis_gbps" : "redis_ops"] = rd;
    j["ratio"] = kv / rd;
    if (bytes) {
      j["memcpy_gbps"] = mc;
      j["limit_ratio"] = kv / mc;
      j["copy_threads"] = r.copy_threads;
    }
    if (!bytes) j["kvtier_api"] = r.kvtier_api;
    j["kvtier_window"] = r.kvtier_window;
    j["redis_conns"] = r.redis_shape.conns;
    j["redis_depth"] = r.redis_shape.depth;
    if (r.redis_benchmark > 0) {
      j[bytes ? "redis_benchmark_gbps" : "redis_benchmark_ops"] = r.redis_benchmark;
      j["redis_benchmark_ratio"] = kv / r.redis_benchmark;  // against Redis's own tool
    }
    out << j.dump() << std::endl;
  } else {
    out << std::left << std::setw(16) << r.op << std::right << std::setw(6) << (r.chunk_bytes >> 10)
        << " KiB  kvtierd " << std::setw(10) << std::setprecision(4) << kv
        << (bytes ? " GB/s" : " op/s") << "  redis " << std::setw(10) << rd << " ("
        << r.redis_shape.conns << "x" << r.redis_shape.depth << "; kvtierd "
        << (bytes ? "" : r.kvtier_api + " ") << "window " << r.kvtier_window << ")  ratio "
        << std::setw(6) << kv / rd;
    if (bytes) {
      out << "  memcpy " << std::setw(6) << mc << " GB/s  limit " << kv / mc << " ("
          << r.copy_threads << " threads)";
    }
    if (r.redis_benchmark > 0) out << "  redis-benchmark " << r.redis_benchmark;
    out << std::endl;
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
  // redis-benchmark's EXISTS (the same for every chunk size), for the lookup rows.
  const auto exists_rps = redis_benchmark(options.redis_benchmark, redis->socket(),
                                          options.lookups * 2, {"EXISTS", "kv:1:1"}, kLookupShapes);
  if (exists_rps.empty()) {
    std::cerr << "bench server: " << options.redis_benchmark
              << " did not run: no redis_benchmark fields\n";
  }
  uint64_t round = 1;
  for (size_t chunk_bytes : options.chunk_bytes) {
    const KvLayout layout = bench_layout(chunk_bytes);
    const KvGroup& g = layout.groups[0];
    const uint32_t num_chunks =
        static_cast<uint32_t>(std::max<size_t>(1, options.total_bytes / g.chunk_bytes()));
    KvRegion region(layout, num_chunks * g.blocks_per_chunk);
    // The memcpy baseline's destination: a host pool as kvtierd's (page-aligned slots: a
    // malloc'd buffer 16 bytes off a page runs `rep movsb` on its slow path, 4x slower here).
    HostDevice memcpy_device;
    auto memcpy_pool_or = HostPool::create(memcpy_device, g.chunk_bytes(), num_chunks);
    if (!memcpy_pool_or) throw std::runtime_error(memcpy_pool_or.error().message);
    const std::unique_ptr<HostPool> memcpy_pool = std::move(*memcpy_pool_or);

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
    // kvtierd's copy threads, the memcpy limit's too.
    config.server.copy_threads = options.copy_threads;
    const size_t copy_threads = server::effective_copy_threads(config.server);
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
        Row store{.op = "store",
                  .chunk_bytes = g.chunk_bytes(),
                  .amount = double(g.chunk_bytes()) * num_chunks,
                  .copy_threads = copy_threads};
        Row retrieve{.op = "retrieve",
                     .chunk_bytes = g.chunk_bytes(),
                     .amount = store.amount,
                     .copy_threads = copy_threads};
        // One key per LOOKUP, and a 64-chunk prompt prefix per LOOKUP (Redis: one EXISTS per
        // key either way, pipelined, as a Redis backend checks chunk keys).
        Row lookup{
            .op = "lookup", .chunk_bytes = g.chunk_bytes(), .amount = double(options.lookups)};
        Row prefix{.op = "lookup_prefix64",
                   .chunk_bytes = g.chunk_bytes(),
                   .amount = double(options.lookups)};
        const auto set_get = redis_benchmark(
            options.redis_benchmark, redis->socket(), std::max<size_t>(num_chunks, 64),
            {"-t", "set,get", "-d", std::to_string(g.chunk_bytes())},
            benchmark_transfer_shapes(g.chunk_bytes()));
        if (auto it = set_get.find("SET"); it != set_get.end()) {
          store.redis_benchmark = it->second * double(g.chunk_bytes()) / 1e9;
        }
        if (auto it = set_get.find("GET"); it != set_get.end()) {
          retrieve.redis_benchmark = it->second * double(g.chunk_bytes()) / 1e9;
        }
        if (auto it = exists_rps.find("EXISTS kv:1:1"); it != exists_rps.end()) {
          lookup.redis_benchmark = prefix.redis_benchmark = it->second;
        }
        freeReplyObject(redisCommand(redis->context(), "FLUSHALL"));
        // Warm-up round, not measured: faults in the pool's pages and Redis's allocations.
        kvtier_transfer(client, region, num_chunks, round, true);
        redis_transfer(*redis, region, num_chunks, round, true, {1, 32});
        memcpy_transfer(region, memcpy_pool->base(), num_chunks, true, copy_threads);
        freeReplyObject(redisCommand(redis->context(), "FLUSHALL"));
        ++round;
        for (int r = 0; r < options.repeat; ++r, ++round) {
          store.kvtier_s =
              std::min(store.kvtier_s, kvtier_transfer(client, region, num_chunks, round, true));
          for (RedisShape shape : kTransferShapes) {
            store.redis(redis_transfer(*redis, region, num_chunks, round, true, shape), shape);
          }
          store.memcpy_s = std::min(
              store.memcpy_s,
              memcpy_transfer(region, memcpy_pool->base(), num_chunks, true, copy_threads));
          retrieve.kvtier_s = std::min(retrieve.kvtier_s,
                                       kvtier_transfer(client, region, num_chunks, round, false));
          for (RedisShape shape : kTransferShapes) {
            retrieve.redis(redis_transfer(*redis, region, num_chunks, round, false, shape), shape);
          }
          retrieve.memcpy_s = std::min(
              retrieve.memcpy_s,
              memcpy_transfer(region, memcpy_pool->base(), num_chunks, false, copy_threads));
          for (size_t window : kLookupWindows) {
            for (auto [row, keys] :
                 {std::pair{&lookup, size_t{1}}, std::pair{&prefix, size_t{64}}}) {
              row->kvtier(kvtier_lookups(client, options.lookups, keys, window, round, num_chunks),
                          "lookup", window);
              row->kvtier(
                  kvtier_lookup_groups(client, options.lookups, keys, window, round, num_chunks),
                  "lookup_many", window);
            }
          }
          for (RedisShape shape : kLookupShapes) {
            const double s = redis_lookups(*redis, options.lookups, round, num_chunks, shape);
            lookup.redis(s, shape);
            prefix.redis(s, shape);
          }
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
