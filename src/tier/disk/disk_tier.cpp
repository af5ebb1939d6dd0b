#include "kvtier/tier/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>
#include <optional>
#include <system_error>

#include "io_pool.h"
#include "kvtier/tier/chunk_record.h"

namespace kvtier {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kRecordSuffix = ".kvc";
constexpr std::string_view kTempMarker = ".tmp.";

std::optional<ChunkKey> parse_key_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  ChunkKey key;
  const auto parse = [](std::string_view part, uint64_t& out) {
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out, 16);
    return ec == std::errc() && end == part.data() + part.size();
  };
  if (!parse(hex.substr(0, 16), key.hi) || !parse(hex.substr(16), key.lo)) return std::nullopt;
  // from_chars accepts upper case; hex() writes lower case only, so anything else is not ours.
  if (key.hex() != hex) return std::nullopt;
  return key;
}

// Writes or reads exactly `bytes` at `offset` with `io` (pwrite or pread); false on an error or
// end of file.
template <class Io, class Byte>
bool transfer_all(Io io, int fd, Byte* data, size_t bytes, off_t offset) {
  while (bytes > 0) {
    const ssize_t n = io(fd, data, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    bytes -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

bool pwrite_all(int fd, const std::byte* data, size_t bytes, off_t offset) {
  return transfer_all(::pwrite, fd, data, bytes, offset);
}

bool pread_all(int fd, std::byte* data, size_t bytes, off_t offset) {
  return transfer_all(::pread, fd, data, bytes, offset);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

TimePoint deadline_after(Duration timeout) {
  return SteadyClock::instance().now() + timeout;
}

}  // namespace

DiskTier::DiskTier(const DiskTierOptions& options)
    : options_(options), io_(std::make_unique<tier_internal::IoPool>(options.io_threads)) {}

DiskTier::~DiskTier() = default;

Result<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierOptions& options) {
  if (options.directory.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "disk tier: directory is empty");
  }
  if (options.capacity_bytes == 0 || options.io_threads == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "disk tier: capacity_bytes and io_threads must be > 0");
  }
  std::error_code ec;
  fs::create_directories(options.directory, ec);  // the 2-digit folders come with their first file
  if (ec) {
    return make_error(
        ErrorCode::kUnavailable,
        "disk tier: cannot create " + options.directory.string() + ": " + ec.message());
  }
  std::unique_ptr<DiskTier> tier(new DiskTier(options));
  if (Status ok = tier->rebuild_index(); !ok) return std::unexpected(ok.error());
  return tier;
}

fs::path DiskTier::path_of(const ChunkKey& key) const {
  const std::string hex = key.hex();
  return options_.directory / hex.substr(0, 2) / (hex + std::string(kRecordSuffix));
}

Status DiskTier::rebuild_index() {
  struct Found {
    fs::file_time_type mtime;
    ChunkKey key;
    uint64_t bytes;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(options_.directory, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string file = it->path().filename().string();
    if (file.find(kTempMarker) != std::string::npos) {
      fs::remove(it->path(), ec);  // a write that never reached its rename
      continue;
    }
    if (!file.ends_with(kRecordSuffix)) continue;
    std::optional<ChunkKey> key = parse_key_hex(file.substr(0, file.size() - kRecordSuffix.size()));
    if (!key || it->path() != path_of(*key)) continue;  // not a file this tier wrote
    const uint64_t bytes = it->file_size(ec);
    const fs::file_time_type mtime = it->last_write_time(ec);
    if (!ec) found.push_back({mtime, *key, bytes});
    ec.clear();
  }
  if (ec) {
    return make_error(
        ErrorCode::kUnavailable,
        "disk tier: cannot read " + options_.directory.string() + ": " + ec.message());
  }
  std::ranges::sort(found, {}, &Found::mtime);
  std::lock_guard lock(mutex_);
  for (const Found& f : found) insert_locked(f.key, f.bytes);  // the newest ends most recent
  return {};
}

void DiskTier::insert_locked(const ChunkKey& key, uint64_t bytes) {
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_used_ -= it->second.bytes;
    it->second.bytes = bytes;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  } else {
    lru_.push_front(key);
    index_.emplace(key, Entry{bytes, lru_.begin()});
  }
  bytes_used_ += bytes;
  while (bytes_used_ > options_.capacity_bytes && lru_.size() > 1) {
    erase_locked(lru_.back());
    ++evictions_;
  }
}

void DiskTier::erase_locked(const ChunkKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  std::error_code ec;
  fs::remove(path_of(key), ec);
  bytes_used_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
}

ChunkStatus DiskTier::write_one(const ChunkKey& key, std::span<const std::byte> payload) {
  const uint64_t record_bytes = kChunkRecordHeaderBytes + payload.size();
  if (record_bytes > options_.capacity_bytes) return ChunkStatus::kError;
  {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end() && it->second.bytes == record_bytes) {
      // Equal keys hold equal KV: the record is there already.
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return ChunkStatus::kOk;
    }
  }
  static std::atomic<uint64_t> temp_counter{0};
  const fs::path final_path = path_of(key);
  const fs::path temp_path = final_path.string() + std::string(kTempMarker) +
                             std::to_string(::getpid()) + "." + std::to_string(++temp_counter);
  std::array<std::byte, kChunkRecordHeaderBytes> header;
  encode_chunk_header(key, payload, header);
  {
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    Fd out{::open(temp_path.c_str(), flags, 0644)};
    if (out.fd < 0 && errno == ENOENT) {
      std::error_code ec;
      fs::create_directories(final_path.parent_path(), ec);
      out.fd = ::open(temp_path.c_str(), flags, 0644);
    }
    if (out.fd < 0) return ChunkStatus::kError;
    if (!pwrite_all(out.fd, header.data(), header.size(), 0) ||
        !pwrite_all(out.fd, payload.data(), payload.size(), kChunkRecordHeaderBytes)) {
      ::unlink(temp_path.c_str());
      return ChunkStatus::kError;
    }
  }
  std::lock_guard lock(mutex_);
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    ::unlink(temp_path.c_str());
    return ChunkStatus::kError;
  }
  insert_locked(key, record_bytes);
  return ChunkStatus::kOk;
}

ChunkStatus DiskTier::read_one(const ChunkKey& key, std::span<std::byte> dst) {
  {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return ChunkStatus::kMiss;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  const fs::path path = path_of(key);
  Fd in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) {
    if (errno != ENOENT) return ChunkStatus::kError;
    std::lock_guard lock(mutex_);  // deleted behind our back: forget it
    erase_locked(key);
    return ChunkStatus::kMiss;
  }
  std::array<std::byte, kChunkRecordHeaderBytes> header;
  struct stat st {};
  bool whole = ::fstat(in.fd, &st) == 0 &&
               static_cast<uint64_t>(st.st_size) == kChunkRecordHeaderBytes + dst.size() &&
               pread_all(in.fd, header.data(), header.size(), 0) &&
               pread_all(in.fd, dst.data(), dst.size(), kChunkRecordHeaderBytes);
  if (whole && verify_chunk_record(header, key, dst) == RecordCheck::kOk) return ChunkStatus::kOk;
  // Never served; deleted so that the next lookup misses instead of finding it again.
  std::lock_guard lock(mutex_);
  erase_locked(key);
  return ChunkStatus::kCorrupt;
}

namespace {

// Runs one_key(i) for every key on the IO pool; kDeadlineExceeded when some never ran.
Result<std::vector<ChunkStatus>> run_batch(tier_internal::IoPool& io, size_t n,
                                           const std::function<ChunkStatus(size_t)>& one_key,
                                           Duration timeout, std::string_view op) {
  std::vector<ChunkStatus> statuses(n, ChunkStatus::kError);
  const std::vector<bool> ran = io.run(
      n, [&](size_t i) { statuses[i] = one_key(i); }, deadline_after(timeout));
  if (std::ranges::find(ran, false) != ran.end()) {
    return make_error(ErrorCode::kDeadlineExceeded, "disk tier: " + std::string(op) + " timed out");
  }
  return statuses;
}

}  // namespace

Result<std::vector<ChunkStatus>> DiskTier::do_put(
    std::span<const ChunkKey> keys, std::span<const std::span<const std::byte>> chunks,
    Duration timeout) {
  return run_batch(
      *io_, keys.size(), [&](size_t i) { return write_one(keys[i], chunks[i]); }, timeout, "put");
}

Result<std::vector<ChunkStatus>> DiskTier::do_get(std::span<const ChunkKey> keys,
                                                  std::span<const std::span<std::byte>> dst,
                                                  Duration timeout) {
  return run_batch(
      *io_, keys.size(), [&](size_t i) { return read_one(keys[i], dst[i]); }, timeout, "get");
}

Result<std::vector<bool>> DiskTier::do_contains(std::span<const ChunkKey> keys, Duration) {
  std::lock_guard lock(mutex_);
  std::vector<bool> present(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) present[i] = index_.contains(keys[i]);
  return present;
}

Status DiskTier::do_ping(Duration) {
  if (::access(options_.directory.c_str(), R_OK | W_OK | X_OK) != 0) {
    return make_error(ErrorCode::kUnavailable, "disk tier: " + options_.directory.string() +
                                                   " is not accessible: " + std::strerror(errno));
  }
  return {};
}

uint64_t DiskTier::bytes_used() const {
  std::lock_guard lock(mutex_);
  return bytes_used_;
}

size_t DiskTier::chunk_count() const {
  std::lock_guard lock(mutex_);
  return index_.size();
}

uint64_t DiskTier::evictions() const {
  std::lock_guard lock(mutex_);
  return evictions_;
}

}  // namespace kvtier
