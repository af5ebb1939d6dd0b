#include "tier_bench.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <liburing.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "bench_row.h"
#include "kvtier/cache/host_pool.h"
#include "kvtier/device/host_device.h"
#include "kvtier/tier/chunk_record.h"
#include "kvtier/tier/disk_tier.h"
#include "kvtier/tier/redis_tier.h"
#include "progress.h"
#include "redis_process.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Duration kCallTimeout = std::chrono::seconds(30);

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "tiers: disk, 256 KiB chunks, round 2 of 3": what the run measures now.
std::string step(const char* tier, size_t chunk_bytes, const std::string& what, int round,
                 int rounds) {
  return std::string("tiers: ") + tier + ", " + std::to_string(chunk_bytes >> 10) +
         " KiB chunks, " + what + "round " + std::to_string(round + 1) + " of " +
         std::to_string(rounds);
}

// Chunks in one host pool (the real HostPool, on the host device), as the tier mover's fills
// and every kvtierd or connector slot are. Touched before any clock starts (no page faults inside
// a measurement).
class PoolChunks {
 public:
  PoolChunks(size_t chunk_bytes, size_t count) : chunk_bytes_(chunk_bytes) {
    auto pool = HostPool::create(device_, chunk_bytes, count);
    if (!pool) throw std::runtime_error("bench: " + pool.error().to_string());
    pool_ = std::move(*pool);
    std::memset(pool_->slot_ptr(0), 0, pool_->bytes());
  }
  std::byte* data(size_t i) const { return pool_->slot_ptr(static_cast<SlotId>(i)); }
  std::span<std::byte> span(size_t i) const { return {data(i), chunk_bytes_}; }
  void clear(size_t begin, size_t end) const {
    std::memset(data(begin), 0, (end - begin) * chunk_bytes_);
  }

 private:
  size_t chunk_bytes_;
  HostDevice device_;
  std::unique_ptr<HostPool> pool_;  // after device_: unregistered before the device goes
};

struct Workload {
  size_t chunk_bytes;
  std::vector<ChunkKey> keys;
  std::vector<std::vector<std::byte>> chunks;  // the bytes, kept to check what comes back
  // What the tiers put: the same bytes in one aligned mapping, as the tier mover's write-behind
  // copies are (its staging buffers).
  PoolChunks staged;
  PoolChunks back;  // get destinations: host pool slots, as the tier mover's fills are

  Workload(size_t chunk_bytes, size_t count, uint64_t salt)
      : chunk_bytes(chunk_bytes), staged(chunk_bytes, count), back(chunk_bytes, count) {
    std::mt19937_64 rng(salt);
    for (size_t i = 0; i < count; ++i) {
      keys.push_back(ChunkKey{.lo = rng(), .hi = salt});
      std::vector<std::byte> c(chunk_bytes);
      for (size_t j = 0; j < chunk_bytes; j += 8) {
        const uint64_t v = rng();
        std::memcpy(c.data() + j, &v, std::min<size_t>(8, chunk_bytes - j));
      }
      std::memcpy(staged.data(i), c.data(), chunk_bytes);
      chunks.push_back(std::move(c));
    }
  }
  double bytes() const { return double(chunk_bytes) * keys.size(); }
};

// Runs f(first, count) over chunks [begin, end) of the workload (all by default) in batches;
// throws on failure.
template <class F>
double timed_batches(const Workload& w, size_t batch, F f, size_t begin = 0,
                     size_t end = SIZE_MAX) {
  end = std::min(end, w.keys.size());
  const auto t0 = Clock::now();
  for (size_t i = begin; i < end; i += batch) f(i, std::min(batch, end - i));
  return seconds_since(t0);
}

void require_ok(const Result<std::vector<ChunkStatus>>& r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().to_string());
  for (ChunkStatus s : *r) {
    if (s != ChunkStatus::kOk) {
      throw std::runtime_error(std::string(what) + ": a chunk came back " +
                               std::string(to_string(s)));
    }
  }
}

// Puts the workload's chunks under its keys, or under `keys` (one per chunk) where given.
double tier_put(Tier& tier, const Workload& w, size_t batch, size_t begin = 0,
                size_t end = SIZE_MAX, std::span<const ChunkKey> keys = {}) {
  if (keys.empty()) keys = w.keys;
  return timed_batches(
      w, batch,
      [&](size_t first, size_t n) {
        std::vector<std::span<const std::byte>> spans;
        for (size_t i = first; i < first + n; ++i) spans.push_back(w.staged.span(i));
        require_ok(tier.put(keys.subspan(first, n), spans, kCallTimeout), "tier put");
      },
      begin, end);
}

double tier_get(Tier& tier, Workload& w, size_t batch, size_t begin = 0, size_t end = SIZE_MAX) {
  return timed_batches(
      w, batch,
      [&](size_t first, size_t n) {
        std::vector<std::span<std::byte>> spans;
        for (size_t i = first; i < first + n; ++i) spans.push_back(w.back.span(i));
        require_ok(tier.get(std::span(w.keys).subspan(first, n), spans, kCallTimeout), "tier get");
      },
      begin, end);
}

// Chunks [begin, end) of w.back hold what was put.
void require_same(const Workload& w, size_t begin = 0, size_t end = SIZE_MAX) {
  for (size_t i = begin; i < std::min(end, w.keys.size()); ++i) {
    if (std::memcmp(w.back.data(i), w.chunks[i].data(), w.chunk_bytes) != 0) {
      throw std::runtime_error("tier: chunk " + std::to_string(i) + " came back different");
    }
  }
}

// ---- disk baseline: the raw device through the file system ----

// O_DIRECT sequential IO of `count` chunks in one preallocated file, `depth` requests kept in
// flight with io_uring (or, where io_uring is unavailable, `depth` threads with pwrite/pread).
class RawDisk {
 public:
  RawDisk(const std::filesystem::path& path, size_t chunk_bytes, size_t count, size_t depth)
      : chunk_bytes_(chunk_bytes), count_(count), depth_(depth) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd_ < 0) throw std::runtime_error("baseline: cannot open " + path.string() + " O_DIRECT");
    if (::posix_fallocate(fd_, 0, static_cast<off_t>(chunk_bytes * count)) != 0) {
      throw std::runtime_error("baseline: cannot preallocate " + path.string());
    }
    uring_ = io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0) == 0;
  }
  ~RawDisk() {
    if (uring_) io_uring_queue_exit(&ring_);
    ::close(fd_);
  }
  bool uring() const { return uring_; }

  // Writes chunks [begin, end): chunk i from src[i] (aligned) at i * chunk_bytes; returns
  // seconds. With a batch, the queue is drained every `batch` chunks, as the tier's calls of
  // `batch` chunks do.
  double write(const PoolChunks& src, size_t begin, size_t end, size_t batch = 0) {
    return run(true, src, begin, end, batch);
  }
  double read(const PoolChunks& dst, size_t begin, size_t end, size_t batch = 0) {
    return run(false, dst, begin, end, batch);
  }

 private:
  double run(bool write, const PoolChunks& bufs, size_t begin, size_t end, size_t batch) {
    end = std::min(end, count_);
    const auto t0 = Clock::now();
    if (uring_) {
      size_t next = begin;
      size_t inflight = 0;
      const size_t step = batch == 0 ? end - begin : batch;
      size_t batch_end = std::min(begin + step, end);
      while (next < end || inflight > 0) {
        if (inflight == 0 && next == batch_end) batch_end = std::min(batch_end + step, end);
        while (next < batch_end && inflight < depth_) {
          io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
          const off_t at = static_cast<off_t>(next * chunk_bytes_);
          if (write) {
            io_uring_prep_write(sqe, fd_, bufs.data(next), unsigned(chunk_bytes_), at);
          } else {
            io_uring_prep_read(sqe, fd_, bufs.data(next), unsigned(chunk_bytes_), at);
          }
          ++next;
          ++inflight;
        }
        if (io_uring_submit_and_wait(&ring_, 1) < 0) throw std::runtime_error("baseline: submit");
        unsigned head;
        unsigned seen = 0;
        io_uring_cqe* cqe;
        io_uring_for_each_cqe(&ring_, head, cqe) {
          if (cqe->res != static_cast<int>(chunk_bytes_)) {
            throw std::runtime_error("baseline: short or failed IO");
          }
          ++seen;
        }
        io_uring_cq_advance(&ring_, seen);
        inflight -= seen;
      }
    } else {
      std::atomic<size_t> next{begin};
      std::vector<std::jthread> threads;
      threads.reserve(depth_);
      std::atomic<bool> failed{false};
      for (size_t t = 0; t < depth_; ++t) {
        threads.emplace_back([&] {
          for (size_t i = next++; i < end; i = next++) {
            const off_t at = static_cast<off_t>(i * chunk_bytes_);
            const ssize_t n = write ? ::pwrite(fd_, bufs.data(i), chunk_bytes_, at)
                                    : ::pread(fd_, bufs.data(i), chunk_bytes_, at);
            if (n != static_cast<ssize_t>(chunk_bytes_)) failed = true;
          }
        });
      }
      threads.clear();
      if (failed) throw std::runtime_error("baseline: short or failed IO");
    }
    return seconds_since(t0);
  }

  int fd_ = -1;
  size_t chunk_bytes_;
  size_t count_;
  size_t depth_;
  io_uring ring_{};
  bool uring_ = false;
};

// ---- redis baseline: pipelined SET/GET straight to Redis over hiredis ----

// hiredis builds each reply through these functions: a GET's value goes from hiredis's read
// buffer straight to the destination the caller named (RawRedis::into), as a careful user of
// hiredis would have it, not into a reply object to be copied again (whose best was about 6 %
// lower here). The baseline never meets arrays; their elements would be the shared kElement.
struct RawReply {
  int type = 0;
  size_t len = 0;
};
struct Into {
  std::byte* at = nullptr;  // where the next string value goes (none: it is dropped)
  size_t room = 0;
  bool fitted = false;  // the last string value had the room
};
RawReply kElement;

void* raw_reply(const redisReadTask* task, size_t len) {
  if (task->parent != nullptr) return &kElement;
  return new RawReply{.type = task->type, .len = len};
}
void* raw_string(const redisReadTask* task, char* str, size_t len) {
  auto* into = static_cast<Into*>(task->privdata);
  if (task->type == REDIS_REPLY_STRING && task->parent == nullptr && into->at != nullptr) {
    into->fitted = len == into->room;
    if (into->fitted) std::memcpy(into->at, str, len);
  }
  return raw_reply(task, len);
}
void* raw_array(const redisReadTask* task, int elements) {
  return raw_reply(task, static_cast<size_t>(elements));
}
void* raw_integer(const redisReadTask* task, long long) {
  return raw_reply(task, 0);
}
void* raw_nil(const redisReadTask* task) {
  return raw_reply(task, 0);
}
void raw_free(void* reply) {
  if (reply != &kElement) delete static_cast<RawReply*>(reply);
}
redisReplyObjectFunctions kRawReplies = {raw_string, raw_array, raw_integer, raw_nil, raw_free};

struct RawRedis {
  redisContext* c = nullptr;
  Into into;  // the reader's privdata
  RawRedis(const std::string& host, int port) {
    c = redisConnectWithTimeout(host.c_str(), port, timeval{5, 0});
    if (c == nullptr || c->err) throw std::runtime_error("baseline: cannot connect to Redis");
    redisSetTimeout(c, timeval{30, 0});
    c->reader->fn = &kRawReplies;
    c->reader->privdata = &into;
  }
  ~RawRedis() { redisFree(c); }
  RawRedis(const RawRedis&) = delete;
  RawRedis& operator=(const RawRedis&) = delete;
  // Appends n commands (built by argv(i)), then reads n replies, each string value into
  // into(i) (where given: a value of another size is an error); throws on an error reply.
  template <class Argv, class IntoFn = std::nullptr_t>
  void pipeline(size_t n, Argv argv, int expect_type, IntoFn into_fn = nullptr) {
    for (size_t i = 0; i < n; ++i) {
      auto [args, lengths] = argv(i);
      redisAppendCommandArgv(c, int(args.size()), args.data(), lengths.data());
    }
    for (size_t i = 0; i < n; ++i) {
      into = {};
      if constexpr (!std::is_same_v<IntoFn, std::nullptr_t>) {
        const std::span<std::byte> place = into_fn(i);
        into = {.at = place.data(), .room = place.size()};
      }
      void* reply = nullptr;
      if (redisGetReply(c, &reply) != REDIS_OK) {
        throw std::runtime_error("baseline: Redis IO error");
      }
      const int type = static_cast<RawReply*>(reply)->type;
      raw_free(reply);
      if (type != expect_type) throw std::runtime_error("baseline: unexpected Redis reply");
      if (into.at != nullptr && !into.fitted) throw std::runtime_error("baseline: a value's size");
    }
  }
};

using Argv = std::pair<std::vector<const char*>, std::vector<size_t>>;

// How the baseline moves the chunks: `connections` hiredis connections, each on its own
// thread with an equal share of the chunks, each sending pipelines of `depth` commands.
struct RawShape {
  size_t depth;
  size_t connections;
};
constexpr size_t kRawDepths[] = {4, 16, 64};
constexpr size_t kRawConnections[] = {1, 2, 4};

// Runs op(connection, first, n) over the workload's chunks in the given shape; its seconds.
template <class Op>
double raw_run(std::vector<std::unique_ptr<RawRedis>>& redis, RawShape shape, size_t count, Op op) {
  const auto share = [&](size_t t) {
    const size_t begin = count * t / shape.connections;
    const size_t end = count * (t + 1) / shape.connections;
    for (size_t i = begin; i < end; i += shape.depth) {
      op(*redis[t], i, std::min(shape.depth, end - i));
    }
  };
  const auto t0 = Clock::now();
  if (shape.connections == 1) {
    share(0);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(shape.connections);
    std::exception_ptr failure;
    std::mutex failure_mutex;
    for (size_t t = 0; t < shape.connections; ++t) {
      threads.emplace_back([&, t] {
        try {
          share(t);
        } catch (...) {
          std::lock_guard lock(failure_mutex);
          failure = std::current_exception();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    if (failure) std::rethrow_exception(failure);
  }
  return seconds_since(t0);
}

double raw_set(std::vector<std::unique_ptr<RawRedis>>& redis, RawShape shape,
               const std::vector<std::string>& names, const Workload& w) {
  return raw_run(redis, shape, w.keys.size(), [&](RawRedis& r, size_t first, size_t n) {
    r.pipeline(
        n,
        [&](size_t i) {
          const std::string& k = names[first + i];
          const auto* v = reinterpret_cast<const char*>(w.staged.data(first + i));
          return Argv{{"SET", k.data(), v}, {3, k.size(), w.chunk_bytes}};
        },
        REDIS_REPLY_STATUS);
  });
}

// Gets every value into its place in w.back, the tier's get destinations: a value left in
// hiredis's reply is not yet where a caller needs it. (Left there, the baseline never writes the
// destinations' memory, and on a machine whose caches hold hiredis's few buffers but not the
// destinations, its best ran up to 1.3x faster for that alone: docs/tiers.md, The bench's
// memory.)
double raw_get(std::vector<std::unique_ptr<RawRedis>>& redis, RawShape shape,
               const std::vector<std::string>& names, const Workload& w) {
  return raw_run(redis, shape, w.keys.size(), [&](RawRedis& r, size_t first, size_t n) {
    r.pipeline(
        n,
        [&](size_t i) {
          const std::string& k = names[first + i];
          return Argv{{"GET", k.data()}, {3, k.size()}};
        },
        REDIS_REPLY_STRING, [&](size_t i) { return w.back.span(first + i); });
  });
}

void unlink_keys(RawRedis& r, const std::vector<std::string>& names) {
  r.pipeline(
      names.size(),
      [&](size_t i) {
        return Argv{{"UNLINK", names[i].data()}, {6, names[i].size()}};
      },
      REDIS_REPLY_INTEGER);
}

void row(std::ostream& out, bool json, const char* tier, const char* op, size_t chunk_bytes,
         size_t chunks, double bytes, double kvtier_s, double baseline_s,
         const std::string& baseline, const nlohmann::ordered_json& extra = {}) {
  const double kvtier_gbps = bytes / kvtier_s / 1e9;
  const double baseline_gbps = bytes / baseline_s / 1e9;
  nlohmann::ordered_json r = {{"bench", "tiers"},
                              {"tier", tier},
                              {"op", op},
                              {"chunk_bytes", chunk_bytes},
                              {"chunks", chunks},
                              {"kvtier_gbps", kvtier_gbps},
                              {"baseline_gbps", baseline_gbps},
                              {"ratio", kvtier_gbps / baseline_gbps},
                              {"baseline", baseline}};
  if (extra.is_object()) r.update(extra);
  emit(out, json, r);
}

struct TempDirectory {
  std::filesystem::path path;
  explicit TempDirectory(const std::filesystem::path& parent) {
    std::string pattern = (parent / "kvtier-bench-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = pattern;
  }
  ~TempDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

void bench_disk(const TierBenchOptions& o, std::ostream& out, uint64_t& salt, Progress& progress) {
  const std::filesystem::path parent =
      o.disk_dir.empty() ? std::filesystem::temp_directory_path() : o.disk_dir;
  for (size_t chunk_bytes : o.chunk_bytes) {
    const size_t total = o.disk_total_bytes > 0 ? o.disk_total_bytes
                         : o.total_given        ? o.total_bytes
                                                : size_t{512} << 20;
    const size_t count = std::max<size_t>(1, total / chunk_bytes);
    double put = 1e30, get = 1e30, write = 1e30, read = 1e30, verify = 1e30, debian = 1e30;
    double batch_write = 1e30, batch_read = 1e30, full_put = 1e30, overwrite = 1e30;
    uint64_t reused = 0;
    size_t depth = 0;
    std::string io;
    bool raw_uring = true;
    for (int r = 0; r < o.repeat; ++r) {
      progress.show(step("disk", chunk_bytes, "", r, o.repeat));
      TempDirectory dir(parent);
      Workload w(chunk_bytes, count, ++salt);
      auto tier =
          DiskTier::open({.directory = dir.path / "tier",
                          .capacity_bytes = std::max<uint64_t>(
                              uint64_t{2} * count * (chunk_bytes + 4096) + (uint64_t{512} << 20),
                              uint64_t{4} << 30)});
      if (!tier) throw std::runtime_error(tier.error().to_string());
      depth = std::min((*tier)->queue_depth_for(chunk_bytes), o.batch_chunks);
      io = (*tier)->io_description();
      // The raw IO writes from and reads into the very memory the tier's puts and gets use.
      // Where DMA lands matters: a device takes a descriptor per physically contiguous run, and
      // on 4 KiB pages from a fragmented allocator separate buffers differed 1.5-3x here,
      // measuring their pages rather than the tier.
      const PoolChunks& written = w.staged;
      const PoolChunks& read_into = w.back;
      RawDisk plain(dir.path / "plain.bin", chunk_bytes, count, depth);
      // The raw device in the tier's calling pattern: drained every batch_chunks.
      RawDisk batched(dir.path / "batched.bin", chunk_bytes, count, depth);
      raw_uring = plain.uring();
      // An untimed pass of raw IO over all of the memory first (to a file of its own: the
      // measured files stay freshly preallocated, as the tier's segments are), so that no side
      // meets memory the kernel has not transferred from or into yet (the Redis rows below say
      // why that matters here).
      {
        RawDisk warm(dir.path / "warm.bin", chunk_bytes, count, depth);
        warm.write(written, 0, count);
        warm.read(read_into, 0, count);
      }
      std::filesystem::remove(dir.path / "warm.bin");
      // The sides take turns slice by slice (8 MiB, the order rotating), so that all of them
      // meet the device in the same moods: a shared or virtual disk's speed drifts within
      // seconds.
      const size_t slice = std::max<size_t>(o.batch_chunks, (size_t{8} << 20) / chunk_bytes);
      double s_put = 0, s_get = 0, s_write = 0, s_read = 0, s_bwrite = 0, s_bread = 0;
      for (const bool writing : {true, false}) {
        size_t turn = static_cast<size_t>(r);
        for (size_t begin = 0; begin < count; begin += slice, ++turn) {
          const size_t end = std::min(begin + slice, count);
          for (size_t k = 0; k < 3; ++k) {
            const size_t side = (turn + k) % 3;
            if (side == 0 && writing) s_put += tier_put(**tier, w, o.batch_chunks, begin, end);
            if (!writing) read_into.clear(begin, end);  // each side's reads must land
            if (side == 0 && !writing) {
              s_get += tier_get(**tier, w, o.batch_chunks, begin, end);
              require_same(w, begin, end);
            }
            if (side == 1 && writing) s_write += plain.write(written, begin, end);
            if (side == 1 && !writing) s_read += plain.read(read_into, begin, end);
            if (side == 2 && writing)
              s_bwrite += batched.write(written, begin, end, o.batch_chunks);
            if (side == 2 && !writing) {
              s_bread += batched.read(read_into, begin, end, o.batch_chunks);
            }
          }
        }
      }
      put = std::min(put, s_put);
      get = std::min(get, s_get);
      write = std::min(write, s_write);
      read = std::min(read, s_read);
      batch_write = std::min(batch_write, s_bwrite);
      batch_read = std::min(batch_read, s_bread);
      require_same(w);  // the raw reads read what was written
      // A full tier, as a disk tier in service is: half the workload's size, filled first under
      // other keys, so that every new segment is a file that eviction emptied. Against raw
      // writes over the plain file's blocks, written once above.
      {
        // At least eight records, so that each of the tier's four segments holds two (in a
        // short run the tier is then never full).
        const uint64_t full_capacity = std::max<uint64_t>(
            {count * (chunk_bytes + 4096) / 2, 8 * (chunk_bytes + 4096), uint64_t{4} << 20});
        auto full =
            DiskTier::open({.directory = dir.path / "full", .capacity_bytes = full_capacity});
        if (!full) throw std::runtime_error(full.error().to_string());
        std::vector<ChunkKey> other = w.keys;
        for (ChunkKey& k : other) k.hi = ~k.hi;
        tier_put(**full, w, o.batch_chunks, 0, count, other);
        double s_full = 0, s_over = 0;
        size_t turn = static_cast<size_t>(r);
        for (size_t begin = 0; begin < count; begin += slice, ++turn) {
          const size_t end = std::min(begin + slice, count);
          for (size_t k = 0; k < 2; ++k) {
            if ((turn + k) % 2 == 0) {
              s_full += tier_put(**full, w, o.batch_chunks, begin, end);
            } else {
              s_over += plain.write(written, begin, end);
            }
          }
        }
        full_put = std::min(full_put, s_full);
        overwrite = std::min(overwrite, s_over);
        reused = (*full)->segments_reused();
      }
      // Checksums over the same chunks, cold in the caches as after a read from disk.
      uint64_t sink = 0;
      auto t0 = Clock::now();
      for (size_t i = 0; i < count; ++i) sink += chunk_checksum(w.keys[i], w.chunks[i]);
      verify = std::min(verify, seconds_since(t0));
      t0 = Clock::now();
      for (size_t i = 0; i < count; ++i) {
        sink += XXH3_64bits_withSeed(w.chunks[i].data(), chunk_bytes, i);
      }
      debian = std::min(debian, seconds_since(t0));
      if (sink == 42) std::cerr << "";  // keeps the hashing
    }
    const double bytes = double(chunk_bytes) * count;
    const std::string how = std::string(raw_uring ? "io_uring" : "threads") + ", queue depth " +
                            std::to_string(depth) + ", one preallocated file";
    // batch_*: the same raw IO drained every batch_chunks, as calls of that many chunks are:
    // how much of the gap is the calling pattern rather than the tier.
    const auto extra = [&](double tier_s, double batch_s) {
      return nlohmann::ordered_json{{"queue_depth", depth},
                                    {"batch_chunks", o.batch_chunks},
                                    {"batch_baseline_gbps", bytes / batch_s / 1e9},
                                    {"batch_ratio", batch_s / tier_s},
                                    {"io", io}};
    };
    row(out, o.json, "disk", "put", chunk_bytes, count, bytes, put, write,
        "O_DIRECT sequential writes, " + how, extra(put, batch_write));
    row(out, o.json, "disk", "get", chunk_bytes, count, bytes, get, read,
        "O_DIRECT sequential reads, " + how, extra(get, batch_read));
    row(out, o.json, "disk", "put_full", chunk_bytes, count, bytes, full_put, overwrite,
        "O_DIRECT sequential overwrites of written blocks, " + how,
        {{"queue_depth", depth}, {"segments_reused", reused}, {"io", io}});
    row(out, o.json, "disk", "verify", chunk_bytes, count, bytes, verify, debian,
        "Debian libxxhash XXH3_64bits_withSeed (baseline x86-64 build)",
        {{"kernel", std::string(chunk_checksum_kernel())}});
  }
}

void bench_redis(const TierBenchOptions& o, std::ostream& out, uint64_t& salt, Progress& progress) {
  std::unique_ptr<TempDirectory> server_dir;
  std::unique_ptr<RedisServerProcess> server;
  std::string url = o.redis_url;
  if (url.empty()) {
    server_dir = std::make_unique<TempDirectory>(std::filesystem::temp_directory_path());
    auto s = RedisServerProcess::start({.directory = server_dir->path}, std::chrono::seconds(10));
    if (!s) throw std::runtime_error(s.error().to_string());
    server = std::move(*s);
    url = server->url();
  }
  std::string host_port = url.starts_with("redis://") ? url.substr(8) : url;
  const size_t colon = host_port.rfind(':');
  const std::string host = host_port.substr(0, colon);
  const int port = colon == std::string::npos ? 6379 : std::stoi(host_port.substr(colon + 1));
  std::vector<std::unique_ptr<RawRedis>> raw;
  raw.reserve(std::ranges::max(kRawConnections));
  for (size_t c = 0; c < std::ranges::max(kRawConnections); ++c) {
    raw.push_back(std::make_unique<RawRedis>(host, port));
  }
  auto tier = RedisTier::open({.url = url, .key_prefix = "kvtier-bench:tier:"});
  if (!tier) throw std::runtime_error(tier.error().to_string());
  std::vector<RawShape> shapes;
  for (size_t depth : kRawDepths) {
    for (size_t connections : kRawConnections) shapes.push_back({depth, connections});
  }
  for (size_t chunk_bytes : o.chunk_bytes) {
    const size_t count = std::max<size_t>(1, o.total_bytes / chunk_bytes);
    // One workload for every measurement at this size, and an untimed pass of each side over it
    // first; later SETs overwrite the keys of earlier ones, which are unlinked only at the end.
    // In service the memory a Redis tier sends from and reads into (staging buffers, pool slots)
    // is long-lived and reused, and so is redis-server's once it is full. On a virtual machine
    // the kernel's first copy from or into a page can cost several times its later ones (here
    // 0.6 against 3-4 GB/s through a loopback socket): fresh memory per round, on either side
    // of the socket, measured that and not the tier.
    Workload w(chunk_bytes, count, ++salt);
    std::vector<std::string> tier_names, names;
    for (const ChunkKey& k : w.keys) {
      tier_names.push_back((*tier)->redis_key(k));
      names.push_back("kvtier-bench:raw:" + k.hex());
    }
    tier_put(**tier, w, o.batch_chunks);
    tier_get(**tier, w, o.batch_chunks);
    require_same(w);
    raw_set(raw, shapes.front(), names, w);
    w.back.clear(0, count);
    raw_get(raw, shapes.front(), names, w);
    require_same(w);  // the baseline's gets deliver the values too
    // 1. The baseline's best shape for this size: every shape, best of `repeat` rounds, and
    // after each round the tier as many times as there are shapes. The baseline's figure is the
    // best of all its measurements (its fastest shape's best), so the tier's is the best of as
    // many: on a machine whose speed comes in streaks, a best over more tries is higher,
    // whichever side it measures. The shapes run back to back as before: with a tier round
    // between every two of them, they ran slower in a trial.
    double put = 1e30, get = 1e30;
    size_t tries = 0;  // measurements of each side
    const auto tier_round = [&] {
      ++tries;
      w.back.clear(0, count);
      put = std::min(put, tier_put(**tier, w, o.batch_chunks));
      get = std::min(get, tier_get(**tier, w, o.batch_chunks));
      require_same(w);
    };
    std::vector<double> shape_set(shapes.size(), 1e30), shape_get(shapes.size(), 1e30);
    for (int r = 0; r < o.repeat; ++r) {
      progress.show(step("redis", chunk_bytes, "baseline shapes and tier, ", r, o.repeat));
      for (size_t s = 0; s < shapes.size(); ++s) {
        shape_set[s] = std::min(shape_set[s], raw_set(raw, shapes[s], names, w));
        shape_get[s] = std::min(shape_get[s], raw_get(raw, shapes[s], names, w));
      }
      for (size_t s = 0; s < shapes.size(); ++s) tier_round();
    }
    const size_t set_best = std::ranges::min_element(shape_set) - shape_set.begin();
    const size_t get_best = std::ranges::min_element(shape_get) - shape_get.begin();
    const RawShape set_shape = shapes[set_best];
    const RawShape get_shape = shapes[get_best];
    // 2. The tier against that shape, in turns, as many times each. Each side's best over both
    // phases is compared ((shapes + 1) x `repeat` measurements each): the baseline is the
    // fastest its best shape ran in this run, so that one slow streak of it cannot flatter the
    // tier.
    double set = shape_set[set_best], raw_get_s = shape_get[get_best];
    for (int r = 0; r < o.repeat; ++r) {
      progress.show(step("redis", chunk_bytes, "best shape against tier, ", r, o.repeat));
      const auto baseline = [&] {
        set = std::min(set, raw_set(raw, set_shape, names, w));
        raw_get_s = std::min(raw_get_s, raw_get(raw, get_shape, names, w));
      };
      // Each side goes first in every other round, so neither always runs right after the other.
      const bool raw_first = r % 2 == 0;
      if (raw_first) baseline();
      tier_round();
      if (!raw_first) baseline();
    }
    unlink_keys(*raw[0], names);  // leaves a server we were given as we found it
    unlink_keys(*raw[0], tier_names);
    const double bytes = double(chunk_bytes) * count;
    const auto extra = [&](RawShape best, const std::vector<double>& seconds) {
      nlohmann::ordered_json all = nlohmann::ordered_json::object();
      for (size_t s = 0; s < shapes.size(); ++s) {
        all[std::to_string(shapes[s].depth) + "x" + std::to_string(shapes[s].connections)] =
            bytes / seconds[s] / 1e9;
      }
      return nlohmann::ordered_json{{"baseline_depth", best.depth},
                                    {"baseline_connections", best.connections},
                                    {"batch_chunks", o.batch_chunks},
                                    {"tries", tries},
                                    {"baseline_shapes_gbps", all}};
    };
    const std::string how = "best of depth 4/16/64 x 1/2/4 connections (a thread each)";
    row(out, o.json, "redis", "put", chunk_bytes, count, bytes, put, set,
        "pipelined SET over hiredis, " + how, extra(set_shape, shape_set));
    row(out, o.json, "redis", "get", chunk_bytes, count, bytes, get, raw_get_s,
        "pipelined GET over hiredis, each value copied to its destination, " + how,
        extra(get_shape, shape_get));
  }
}

}  // namespace

int run_tier_bench(const TierBenchOptions& o, std::ostream& out) {
  if (!o.json) out << "each tier vs its raw baseline, same bytes, side by side\n";
  uint64_t salt = 0;
  Progress progress;
  try {
    bench_disk(o, out, salt, progress);
    if (!o.skip_redis) bench_redis(o, out, salt, progress);
  } catch (const std::exception& e) {
    std::cerr << "kvtier bench tiers: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace kvtier::bench
