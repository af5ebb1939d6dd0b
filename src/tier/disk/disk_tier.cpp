#include "kvtier/tier/disk_tier.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <thread>

#include "aligned_buffer.h"
#include "io_engine.h"
#include "kvtier/core/log.h"
#include "segment_record.h"

namespace kvtier {
namespace fs = std::filesystem;
using tier_internal::AlignedBuffer;
using tier_internal::IoRequest;
using tier_internal::IoSlot;
using tier_internal::kIoAlign;
using tier_internal::round_up_io;
using tier_internal::scan_segment;
using tier_internal::Scanned;
using tier_internal::ScanResult;
using tier_internal::segment_record_bytes;

namespace {

constexpr std::string_view kSegmentPrefix = "seg-";
constexpr std::string_view kSparePrefix = "spare-";
constexpr std::string_view kSegmentSuffix = ".kvs";
// Retired segment files kept for reuse, at most: one is enough for the next new segment; the
// second covers one that a read still in flight holds.
constexpr size_t kMaxSpares = 2;
constexpr uint64_t kInflightBudget = uint64_t{16} << 20;  // bytes in flight per call, at most
constexpr uint64_t kCompactGroupBytes = uint64_t{32} << 20;

std::string file_name(std::string_view prefix, uint64_t id) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(id));
  return std::string(prefix) + hex + std::string(kSegmentSuffix);
}

std::string segment_name(uint64_t id) {
  return file_name(kSegmentPrefix, id);
}

// The id in "<prefix><16 hex digits>.kvs".
std::optional<uint64_t> parse_file_name(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix) || name.size() != prefix.size() + 16 + kSegmentSuffix.size()) {
    return std::nullopt;
  }
  const std::string_view hex = name.substr(prefix.size(), 16);
  uint64_t id = 0;
  auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), id, 16);
  if (ec != std::errc() || end != hex.data() + hex.size() || file_name(prefix, id) != name) {
    return std::nullopt;
  }
  return id;
}

std::optional<uint64_t> parse_segment_name(std::string_view name) {
  return parse_file_name(name, kSegmentPrefix);
}

TimePoint deadline_after(Duration timeout) {
  return SteadyClock::instance().now() + timeout;
}

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace

struct DiskTier::Segment {
  uint64_t id = 0;
  fs::path path;
  int fd = -1;
  uint64_t bytes = 0;       // file size
  uint64_t write_off = 0;   // next append
  uint64_t live_bytes = 0;  // records the index points at
  uint64_t pending = 0;     // appends reserved and not completed
  bool compacting = false;
  bool retired = false;  // given up by this tier: deleted, or kept as a spare (its fd may
                         // still serve reads in flight either way)

  ~Segment() {
    if (fd >= 0) ::close(fd);
  }
};

DiskTier::DiskTier(const DiskTierOptions& options) : options_(options) {}

DiskTier::~DiskTier() {
  engine_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierOptions& options) {
  if (struct sigaction current{};
      ::sigaction(SIGXFSZ, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGXFSZ, SIG_IGN);  // see the header: EFBIG instead of the end of the process
  }
  if (options.directory.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "disk tier: directory is empty");
  }
  if (options.io_threads == 0 || options.queue_depth == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "disk tier: io_threads and queue_depth must be > 0");
  }
  if (!(options.compact_below >= 0.0 && options.compact_below < 1.0)) {
    return make_error(ErrorCode::kInvalidArgument, "disk tier: compact_below must be in [0, 1)");
  }
  const uint64_t segment_bytes = std::min(options.segment_bytes / kIoAlign * kIoAlign,
                                          options.capacity_bytes / 4 / kIoAlign * kIoAlign);
  if (segment_bytes < 2 * kIoAlign) {
    return make_error(ErrorCode::kInvalidArgument,
                      "disk tier: capacity_bytes and segment_bytes must allow four segments of at "
                      "least 8 KiB");
  }
  std::error_code ec;
  fs::create_directories(options.directory, ec);
  if (ec) {
    return make_error(
        ErrorCode::kUnavailable,
        "disk tier: cannot create " + options.directory.string() + ": " + ec.message());
  }
  std::unique_ptr<DiskTier> tier(new DiskTier(options));
  tier->segment_bytes_ = segment_bytes;
  if (Status ok = tier->take_lock(); !ok) return std::unexpected(ok.error());
  tier->probe_direct_io();

  std::vector<std::string> notes;
  if (options.io != DiskIo::kThreads) {
    std::string why_not;
    tier->engine_ =
        tier_internal::make_uring_engine(options.io_threads, options.queue_depth, &why_not);
    if (!tier->engine_) {
      if (options.io == DiskIo::kIoUring) {
        return make_error(ErrorCode::kUnavailable, "disk tier: " + why_not);
      }
      notes.push_back("io_uring unavailable (" + why_not + "); using " +
                      std::to_string(options.io_threads) + " threads with preadv/pwritev");
    }
  }
  if (!tier->engine_) tier->engine_ = tier_internal::make_thread_engine(options.io_threads);
  if (options.direct_io && !tier->direct_io_) {
    notes.push_back("O_DIRECT unsupported on this file system; using the page cache");
  }
  tier->io_description_ =
      std::string(tier->uses_io_uring() ? "io_uring" : "threads") +
      (tier->direct_io_ ? ", O_DIRECT (buffers aligned to " + std::to_string(tier->dio_mem_align_) +
                              " bytes go direct)"
                        : ", page cache") +
      ", queue depth " + std::to_string(options.queue_depth) + ", " +
      std::to_string(options.io_threads) + (tier->uses_io_uring() ? " rings" : " threads") +
      ", xxh3 " + std::string(chunk_checksum_kernel());
  for (const std::string& note : notes) {
    tier->io_description_ += "; " + note;
    log_warning("disk tier " + options.directory.string() + ": " + note);
  }
  tier->remove_legacy_files();
  if (Status ok = tier->rebuild_index(); !ok) return std::unexpected(ok.error());
  return tier;
}

Status DiskTier::take_lock() {
  const fs::path path = options_.directory / "LOCK";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return make_error(ErrorCode::kUnavailable,
                      "disk tier: cannot open " + path.string() + ": " + errno_text(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    return make_error(ErrorCode::kUnavailable,
                      "disk tier: " + options_.directory.string() +
                          " is in use by another disk tier (flock: " + errno_text(err) + ")");
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = fd;
  return {};
}

void DiskTier::probe_direct_io() {
  const fs::path path = options_.directory / "LOCK";
  // The lock file tells whether this file system takes O_DIRECT.
  direct_io_ = false;
  if (options_.direct_io) {
    const int probe = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    direct_io_ = probe >= 0;
    if (probe >= 0) ::close(probe);
  }
  // Which caller memory the device can DMA to and from: statx says (Linux 6.1+; NVMe takes any
  // 4-byte-aligned buffer, virtio-blk 512-byte-aligned ones); without an answer, 4 KiB.
  dio_mem_align_ = direct_io_ ? kIoAlign : 1;
  struct statx stx {};
  if (direct_io_ && ::statx(lock_fd_, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0) {
    // 0: no direct IO for this file; larger than 4 KiB: not with this layout.
    if (stx.stx_dio_offset_align == 0 || stx.stx_dio_offset_align > kIoAlign ||
        kIoAlign % stx.stx_dio_offset_align != 0 || stx.stx_dio_mem_align == 0) {
      direct_io_ = false;
      dio_mem_align_ = 1;
    } else {
      dio_mem_align_ = std::min<uint64_t>(stx.stx_dio_mem_align, kIoAlign);
    }
  }
}

bool DiskTier::direct_ok(const void* memory) const {
  return reinterpret_cast<uintptr_t>(memory) % dio_mem_align_ == 0;
}

int DiskTier::segment_open_flags() const {
  return O_RDWR | O_CLOEXEC | (direct_io_ ? O_DIRECT : 0);
}

// The one-file-per-chunk layout of earlier versions: <2 hex digits>/<32 hex digits>.kvc (and
// .tmp. files); its files are outside this tier's bound, so they go.
void DiskTier::remove_legacy_files() {
  std::error_code ec;
  for (auto it = fs::directory_iterator(options_.directory, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != 2 || !std::isxdigit(static_cast<unsigned char>(name[0])) ||
        !std::isxdigit(static_cast<unsigned char>(name[1])) || !it->is_directory(ec)) {
      continue;
    }
    std::error_code inner;
    for (auto f = fs::directory_iterator(it->path(), inner);
         !inner && f != fs::directory_iterator(); f.increment(inner)) {
      const std::string file = f->path().filename().string();
      if (file.ends_with(".kvc") || file.find(".kvc.tmp.") != std::string::npos) {
        fs::remove(f->path(), inner);
      }
    }
    fs::remove(it->path(), inner);  // only when empty
  }
}

Status DiskTier::rebuild_index() {
  std::vector<SegmentPtr> found;
  std::error_code ec;
  std::vector<SegmentPtr> spares;
  for (auto it = fs::directory_iterator(options_.directory, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::optional<uint64_t> spare_id = parse_file_name(name, kSparePrefix);
    const std::optional<uint64_t> id = spare_id ? spare_id : parse_segment_name(name);
    if (!id) continue;
    auto segment = std::make_shared<Segment>();
    segment->id = *id;
    segment->path = it->path();
    segment->fd = ::open(segment->path.c_str(), segment_open_flags());
    struct stat st {};
    if (segment->fd < 0 || ::fstat(segment->fd, &st) != 0) {
      return make_error(
          ErrorCode::kUnavailable,
          "disk tier: cannot open " + segment->path.string() + ": " + errno_text(errno));
    }
    segment->bytes = static_cast<uint64_t>(st.st_size) / kIoAlign * kIoAlign;
    segment->write_off = segment->bytes;
    if (spare_id) {
      segment->retired = true;
      spares.push_back(std::move(segment));
    } else {
      found.push_back(std::move(segment));
    }
  }
  if (ec) {
    return make_error(
        ErrorCode::kUnavailable,
        "disk tier: cannot read " + options_.directory.string() + ": " + ec.message());
  }
  std::ranges::sort(found, {}, [](const SegmentPtr& s) { return s->id; });

  // Scan the segments in parallel, one thread per segment at a time.
  std::vector<ScanResult> scans(found.size());
  {
    std::atomic<size_t> next{0};
    const auto worker = [&] {
      for (size_t i = next++; i < found.size(); i = next++) {
        scans[i] = scan_segment(found[i]->fd, found[i]->bytes, found[i]->id);
      }
    };
    std::vector<std::jthread> threads;
    const size_t n = std::min<size_t>(options_.io_threads, found.size());
    for (size_t i = 1; i < n; ++i) threads.emplace_back(worker);
    worker();
  }

  struct Found {
    Scanned record;
    SegmentPtr segment;
  };
  std::vector<Found> records;
  for (size_t i = 0; i < found.size(); ++i) {
    for (const Scanned& r : scans[i].records) records.push_back({r, found[i]});
  }
  std::ranges::sort(records, {}, [](const Found& f) { return f.record.header.seq; });

  std::lock_guard lock(mutex_);
  for (const SegmentPtr& segment : found) {
    segments_[segment->id] = segment;
    disk_bytes_ += segment->bytes;
    next_segment_id_ = std::max(next_segment_id_, segment->id + 1);
  }
  for (const SegmentPtr& spare : spares) {
    next_segment_id_ = std::max(next_segment_id_, spare->id + 1);
    disk_bytes_ += spare->bytes;
    if (spares_.size() < kMaxSpares && spare->bytes == segment_bytes_) {
      spares_.push_back(spare);
    } else {
      drop_spare_locked(spare);
    }
  }
  // In sequence order, so the newest record of a key wins and ends most recent. Every segment
  // is pinned meanwhile: one whose records so far were all superseded is not empty yet.
  for (const SegmentPtr& segment : found) ++segment->pending;
  for (const Found& f : records) {
    insert_locked(f.record.header.key, f.segment, f.record.offset, f.record.header.payload_bytes,
                  false);
    seq_ = std::max(seq_, f.record.header.seq);
  }
  for (const SegmentPtr& segment : found) --segment->pending;
  // Appends continue after the last record of the newest segment.
  if (!found.empty()) {
    const SegmentPtr& last = found.back();
    const uint64_t end = scans.back().end;
    if (end + 2 * kIoAlign <= last->bytes) {
      last->write_off = end;
      active_ = last;
    }
  }
  for (const SegmentPtr& segment : found) maybe_retire_locked(segment);
  if (Status ok = make_room_locked(0); !ok) return ok;  // a smaller capacity than before
  return {};
}

// ---- index and space (mutex_ held) ----

void DiskTier::insert_locked(const ChunkKey& key, const SegmentPtr& segment, uint64_t offset,
                             uint64_t payload_bytes, bool verified) {
  const uint64_t record_bytes = segment_record_bytes(payload_bytes);
  auto it = index_.find(key);
  if (it != index_.end()) {
    Entry& e = it->second;
    const SegmentPtr old = e.segment;
    const uint64_t old_bytes = segment_record_bytes(e.payload_bytes);
    old->live_bytes -= old_bytes;
    bytes_used_ -= old_bytes;
    e.segment = segment;
    e.offset = offset;
    e.payload_bytes = payload_bytes;
    e.verified = verified;
    lru_.splice(lru_.begin(), lru_, e.lru);
    segment->live_bytes += record_bytes;
    bytes_used_ += record_bytes;
    if (old != segment) maybe_retire_locked(old);
    return;
  }
  lru_.push_front(key);
  index_.emplace(key, Entry{segment, offset, payload_bytes, lru_.begin(), verified});
  if (KvEventPublisher* p = events()) p->stored(name(), std::span(&key, 1), event_block_size());
  segment->live_bytes += record_bytes;
  bytes_used_ += record_bytes;
}

Status DiskTier::can_hold(uint64_t bytes) const {
  const uint64_t record = segment_record_bytes(bytes);
  if (record <= segment_bytes_) return {};
  return make_error(ErrorCode::kInvalidArgument,
                    "disk tier: a chunk of " + std::to_string(bytes) + " bytes is a record of " +
                        std::to_string(record) + " bytes, more than a segment of " +
                        std::to_string(segment_bytes_) +
                        " (a quarter of the capacity, at most 256 MiB): the capacity must be at "
                        "least " +
                        std::to_string(4 * record) + " bytes");
}

void DiskTier::publish_events(KvEventPublisher* publisher, uint32_t block_size) {
  std::lock_guard lock(mutex_);
  Tier::publish_events(publisher, block_size);
  if (!publisher) return;
  std::vector<ChunkKey> held;
  held.reserve(index_.size());
  for (const auto& [key, entry] : index_) held.push_back(key);
  publisher->stored(name(), held, block_size);
}

void DiskTier::erase_locked(const ChunkKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  if (KvEventPublisher* p = events()) p->removed(name(), std::span(&key, 1));
  const SegmentPtr segment = it->second.segment;
  const uint64_t record_bytes = segment_record_bytes(it->second.payload_bytes);
  segment->live_bytes -= record_bytes;
  bytes_used_ -= record_bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  maybe_retire_locked(segment);
}

void DiskTier::maybe_retire_locked(const SegmentPtr& segment) {
  if (segment->live_bytes == 0 && segment->pending == 0 && !segment->compacting &&
      !segment->retired && segment != active_) {
    retire_locked(segment);
  }
}

void DiskTier::retire_locked(const SegmentPtr& segment) {
  segment->retired = true;
  segments_.erase(segment->id);
  // Kept as a spare for a later segment where there is room for one (its file keeps counting
  // toward the capacity): writing over blocks written before is much cheaper than writing into
  // freshly allocated ones (ext4 converts unwritten extents as each write completes; here an
  // O_DIRECT overwrite ran about twice as fast).
  if (spares_.size() < kMaxSpares && segment->bytes == segment_bytes_) {
    const fs::path spare = options_.directory / file_name(kSparePrefix, segment->id);
    if (::rename(segment->path.c_str(), spare.c_str()) == 0) {
      segment->path = spare;
      spares_.push_back(segment);
      return;
    }
  }
  ::unlink(segment->path.c_str());
  disk_bytes_ -= segment->bytes;
  graveyard_.push_back(segment);  // closed (and its blocks freed) outside the lock
}

void DiskTier::drop_spare_locked(SegmentPtr spare) {
  std::erase(spares_, spare);
  ::unlink(spare->path.c_str());
  disk_bytes_ -= spare->bytes;
  graveyard_.push_back(std::move(spare));
}

Status DiskTier::free_space_step_locked() {
  if (!spares_.empty()) {
    drop_spare_locked(spares_.back());  // spares go before any live chunk
    return {};
  }
  if (!lru_.empty()) {
    erase_locked(lru_.back());  // retires the segment that this empties
    ++evictions_;
    return {};
  }
  // Nothing indexed is left: only empty segments waiting for appends in flight, or the active
  // one.
  if (active_ && active_->pending == 0) {
    const SegmentPtr active = active_;
    active_ = nullptr;
    maybe_retire_locked(active);
    return {};
  }
  return make_error(ErrorCode::kResourceExhausted,
                    "disk tier: no room for another segment while writes are in flight");
}

Status DiskTier::make_room_locked(uint64_t extra_bytes) {
  while (disk_bytes_ + extra_bytes > options_.capacity_bytes) {
    if (Status ok = free_space_step_locked(); !ok) return ok;
  }
  return {};
}

bool DiskTier::reuse_spare_locked() {
  while (!spares_.empty()) {
    // Only a spare that nothing else holds: a read still in flight on its old records must not
    // meet new ones.
    const auto it = std::ranges::find_if(spares_, [](const SegmentPtr& s) {
      return s.use_count() == 1;  // spares_ alone; under mutex_ no new reference can appear
    });
    if (it == spares_.end()) return false;
    const SegmentPtr spare = std::move(*it);
    spares_.erase(it);
    auto segment = std::make_shared<Segment>();
    segment->id = next_segment_id_++;
    segment->path = options_.directory / segment_name(segment->id);
    struct stat st {};
    if (::fstat(spare->fd, &st) != 0 || st.st_nlink == 0 ||
        ::rename(spare->path.c_str(), segment->path.c_str()) != 0) {
      drop_spare_locked(spare);  // deleted behind the tier's back, or not renamable
      continue;
    }
    segment->fd = std::exchange(spare->fd, -1);
    segment->bytes = spare->bytes;
    segments_[segment->id] = segment;
    active_ = segment;
    compaction_due_ = true;
    ++segments_reused_;
    return true;
  }
  return false;
}

Status DiskTier::new_segment_locked() {
  // A spare first; else a new file where it fits, after making room. Making room evicts the
  // least recently used chunks, and the segment they leave empty becomes a spare: so a full
  // tier goes on writing into the files it has.
  for (;;) {
    if (reuse_spare_locked()) return {};
    if (disk_bytes_ + segment_bytes_ <= options_.capacity_bytes) break;
    if (Status ok = free_space_step_locked(); !ok) return ok;
  }
  auto segment = std::make_shared<Segment>();
  segment->id = next_segment_id_++;
  segment->path = options_.directory / segment_name(segment->id);
  segment->bytes = segment_bytes_;
  segment->fd = ::open(segment->path.c_str(), segment_open_flags() | O_CREAT | O_EXCL, 0644);
  if (segment->fd < 0) {
    const int err = errno;
    if (err == ENOENT) broken_ = "the directory " + options_.directory.string() + " is gone";
    return make_error(ErrorCode::kUnavailable, "disk tier: cannot create " +
                                                   segment->path.string() + ": " + errno_text(err));
  }
  // Preallocated, so that appends never extend the file: direct writes that extend a file are
  // serialized (ext4), and a full disk shows here rather than in the middle of a write.
  int ret = ::posix_fallocate(segment->fd, 0, static_cast<off_t>(segment->bytes));
  if (ret == EOPNOTSUPP || ret == EINVAL) {
    ret = ::ftruncate(segment->fd, static_cast<off_t>(segment->bytes)) == 0 ? 0 : errno;
  }
  if (ret != 0) {
    ::unlink(segment->path.c_str());
    return make_error(ErrorCode::kUnavailable, "disk tier: cannot allocate " +
                                                   std::to_string(segment->bytes) + " bytes for " +
                                                   segment->path.string() + ": " + errno_text(ret));
  }
  segments_[segment->id] = segment;
  disk_bytes_ += segment->bytes;
  active_ = segment;
  compaction_due_ = true;
  return {};
}

Result<std::pair<DiskTier::SegmentPtr, uint64_t>> DiskTier::allocate_locked(
    uint64_t record_bytes, CheckedSegments& checked) {
  if (active_ && vanished_locked(active_, checked)) return std::unexpected(broken_error_locked());
  if (!active_ || active_->write_off + record_bytes > active_->bytes) {
    if (active_) {
      const SegmentPtr sealed = active_;
      active_ = nullptr;
      maybe_retire_locked(sealed);
    }
    if (Status ok = new_segment_locked(); !ok) return std::unexpected(ok.error());
  }
  const uint64_t offset = active_->write_off;
  active_->write_off += record_bytes;
  ++active_->pending;
  return std::pair{active_, offset};
}

bool DiskTier::vanished_locked(const SegmentPtr& segment, CheckedSegments& checked) {
  if (segment->retired || std::ranges::find(checked, segment->id) != checked.end()) return false;
  struct stat st {};
  if (::fstat(segment->fd, &st) == 0 && st.st_nlink > 0) {
    checked.push_back(segment->id);
    return false;
  }
  forget_vanished_locked();
  return true;
}

void DiskTier::forget_vanished_locked() {
  std::vector<SegmentPtr> gone;
  for (const auto& [id, segment] : segments_) {
    struct stat st {};
    if (::fstat(segment->fd, &st) != 0 || st.st_nlink == 0) gone.push_back(segment);
  }
  if (gone.empty()) return;
  std::string names;
  for (const SegmentPtr& segment : gone) {
    names += (names.empty() ? "" : ", ") + segment->path.filename().string();
    segment->retired = true;  // its file is gone already; nothing of it is served any more
    segments_.erase(segment->id);
    disk_bytes_ -= segment->bytes;
    if (segment == active_) active_ = nullptr;
    graveyard_.push_back(segment);
  }
  std::vector<ChunkKey> forgotten;
  for (auto it = index_.begin(); it != index_.end();) {
    if (it->second.segment->retired) {
      const uint64_t record_bytes = segment_record_bytes(it->second.payload_bytes);
      it->second.segment->live_bytes -= record_bytes;
      bytes_used_ -= record_bytes;
      lru_.erase(it->second.lru);
      forgotten.push_back(it->first);
      it = index_.erase(it);
    } else {
      ++it;
    }
  }
  if (KvEventPublisher* p = events(); p && !forgotten.empty()) p->removed(name(), forgotten);
  broken_ = "segment files deleted behind the tier's back: " + names;
}

Error DiskTier::broken_error_locked() const {
  return Error{ErrorCode::kUnavailable, "disk tier: " + broken_};
}

// ---- IO ----

DiskTier::WriteResult DiskTier::write_records(std::span<const ChunkKey> keys,
                                              std::span<const Source> sources,
                                              std::span<const Move> moves, TimePoint deadline) {
  const size_t n = keys.size();
  const bool moving = !moves.empty();
  WriteResult result{.statuses = std::vector<ChunkStatus>(n, ChunkStatus::kError)};
  struct Placed {
    SegmentPtr segment;
    uint64_t offset = 0;
  };
  std::vector<Placed> placed(n);
  uint64_t largest = 0;
  for (const Source& s : sources) largest = std::max<uint64_t>(largest, s.payload.size());
  std::mutex failure_mutex;  // the thread engine prepares on several threads
  CheckedSegments checked;   // under mutex_

  const auto prepare = [&](size_t i, IoSlot& slot, IoRequest& request) {
    const std::span<const std::byte> payload = sources[i].payload;
    const uint64_t record_bytes = segment_record_bytes(payload.size());
    uint64_t seq;
    {
      std::lock_guard lock(mutex_);
      {
        std::lock_guard failure(failure_mutex);
        if (result.error) return false;
      }
      if (!broken_.empty()) {
        std::lock_guard failure(failure_mutex);
        result.error = broken_error_locked();
        return false;
      }
      if (!moving) {
        auto it = index_.find(keys[i]);
        if (it != index_.end() && it->second.payload_bytes == payload.size() &&
            it->second.verified) {
          // Equal keys hold equal KV: the record is there already, and intact.
          if (vanished_locked(it->second.segment, checked)) {
            std::lock_guard failure(failure_mutex);
            result.error = broken_error_locked();
            return false;
          }
          lru_.splice(lru_.begin(), lru_, it->second.lru);
          result.statuses[i] = ChunkStatus::kOk;
          return false;
        }
      } else {
        auto it = index_.find(keys[i]);
        if (it == index_.end() || it->second.segment != moves[i].from ||
            it->second.offset != moves[i].offset) {
          result.statuses[i] = ChunkStatus::kMiss;  // evicted or replaced meanwhile
          return false;
        }
      }
      if (record_bytes > segment_bytes_) return false;  // kError: never fits
      Result<std::pair<SegmentPtr, uint64_t>> at = allocate_locked(record_bytes, checked);
      if (!at && at.error().code == ErrorCode::kResourceExhausted) {
        return false;  // kError for this key: all the room is in writes still in flight
      }
      if (!at) {
        std::lock_guard failure(failure_mutex);
        result.error = at.error();
        return false;
      }
      placed[i] = {at->first, at->second};
      seq = ++seq_;
    }
    request.fd = placed[i].segment->fd;
    request.offset = placed[i].offset;
    request.write = true;
    request.add(slot.header.data(), kIoAlign);
    const size_t padded = round_up_io(payload.size());
    // The whole blocks straight from the caller's memory where the device can DMA from it;
    // the rest (a partial last block, or everything) through the slot's bounce buffer.
    const size_t whole = sources[i].padded           ? padded
                         : direct_ok(payload.data()) ? payload.size() / kIoAlign * kIoAlign
                                                     : 0;
    if (whole > 0) request.add(payload.data(), whole);
    std::span<const std::byte> hashed = payload;
    if (whole < payload.size()) {
      const size_t rest = payload.size() - whole;
      slot.bounce.reserve(padded - whole);
      std::memcpy(slot.bounce.data(), payload.data() + whole, rest);
      std::memset(slot.bounce.data() + rest, 0, padded - payload.size());
      request.add(slot.bounce.data(), padded - whole);
      // All of it copied: the checksum is taken from the copy, which the copy just brought
      // into the cache (one read of the caller's memory instead of two), and which is exactly
      // what is written.
      if (whole == 0) hashed = std::span<const std::byte>(slot.bounce.data(), payload.size());
    }
    tier_internal::encode_segment_header(keys[i], hashed, seq, placed[i].segment->id,
                                         slot.header.span());
    return true;
  };

  const auto complete = [&](size_t i, IoSlot&, int64_t transferred) {
    const uint64_t record_bytes = segment_record_bytes(sources[i].payload.size());
    std::lock_guard lock(mutex_);
    const SegmentPtr segment = std::move(placed[i].segment);
    --segment->pending;
    if (transferred != static_cast<int64_t>(record_bytes) || segment->retired) {
      maybe_retire_locked(segment);
      return;  // kError
    }
    if (!moving) {
      insert_locked(keys[i], segment, placed[i].offset, sources[i].payload.size(), true);
      result.statuses[i] = ChunkStatus::kOk;
      return;
    }
    auto it = index_.find(keys[i]);
    if (it == index_.end() || it->second.segment != moves[i].from ||
        it->second.offset != moves[i].offset) {
      result.statuses[i] = ChunkStatus::kMiss;  // the copy is dead on arrival
      maybe_retire_locked(segment);
      return;
    }
    Entry& e = it->second;
    e.segment->live_bytes -= record_bytes;
    const SegmentPtr from = e.segment;
    e.segment = segment;
    e.offset = placed[i].offset;
    e.verified = true;  // compaction moves only records it read back intact
    segment->live_bytes += record_bytes;
    maybe_retire_locked(from);
    result.statuses[i] = ChunkStatus::kOk;
  };

  result.started = engine_->run(n, queue_depth_for(largest), prepare, complete, deadline);
  return result;
}

Result<std::vector<ChunkStatus>> DiskTier::do_put(
    std::span<const ChunkKey> keys, std::span<const std::span<const std::byte>> chunks,
    Duration timeout) {
  const TimePoint deadline = deadline_after(timeout);
  std::vector<Source> sources;
  sources.reserve(chunks.size());
  for (const auto& c : chunks) sources.push_back({c, false});
  WriteResult written = write_records(keys, sources, {}, deadline);
  maybe_compact(deadline);
  {
    std::vector<SegmentPtr> closing;
    std::lock_guard lock(mutex_);
    closing.swap(graveyard_);
  }
  if (written.error) return std::unexpected(*written.error);
  if (written.started < keys.size()) {
    return make_error(ErrorCode::kDeadlineExceeded, "disk tier: put timed out");
  }
  return std::move(written.statuses);
}

Result<std::vector<ChunkStatus>> DiskTier::do_get(std::span<const ChunkKey> keys,
                                                  std::span<const std::span<std::byte>> dst,
                                                  Duration timeout) {
  const TimePoint deadline = deadline_after(timeout);
  const size_t n = keys.size();
  std::vector<ChunkStatus> statuses(n, ChunkStatus::kError);
  struct Found {
    SegmentPtr segment;
    uint64_t offset = 0;
    size_t whole = 0;       // payload bytes read straight into the caller's buffer
    bool verified = false;  // the entry's, when prepared
  };
  std::vector<Found> found(n);
  std::optional<Error> failure;
  std::mutex failure_mutex;
  CheckedSegments checked;  // under mutex_
  uint64_t largest = 0;
  for (const auto& d : dst) largest = std::max<uint64_t>(largest, d.size());

  const auto prepare = [&](size_t i, IoSlot& slot, IoRequest& request) {
    {
      std::lock_guard lock(mutex_);
      {
        std::lock_guard f(failure_mutex);
        if (failure) return false;
      }
      if (!broken_.empty()) {
        std::lock_guard f(failure_mutex);
        failure = broken_error_locked();
        return false;
      }
      auto it = index_.find(keys[i]);
      if (it == index_.end()) {
        statuses[i] = ChunkStatus::kMiss;
        return false;
      }
      if (it->second.payload_bytes != dst[i].size()) {
        // Not this caller's chunk: never served, and forgotten like any corrupt record.
        statuses[i] = ChunkStatus::kCorrupt;
        erase_locked(keys[i]);
        return false;
      }
      if (vanished_locked(it->second.segment, checked)) {
        std::lock_guard f(failure_mutex);
        failure = broken_error_locked();
        return false;
      }
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      found[i].segment = it->second.segment;
      found[i].offset = it->second.offset;
      found[i].verified = it->second.verified;
    }
    const std::span<std::byte> out = dst[i];
    const size_t padded = round_up_io(out.size());
    request.fd = found[i].segment->fd;
    request.offset = found[i].offset;
    request.write = false;
    request.add(slot.header.data(), kIoAlign);
    // As for writes: whole blocks straight into the caller's memory where the device can DMA
    // to it, the rest into the bounce buffer.
    found[i].whole = direct_ok(out.data()) ? out.size() / kIoAlign * kIoAlign : 0;
    if (found[i].whole > 0) request.add(out.data(), found[i].whole);
    if (found[i].whole < padded) {
      slot.bounce.reserve(padded - found[i].whole);
      request.add(slot.bounce.data(), padded - found[i].whole);
    }
    return true;
  };

  const auto complete = [&](size_t i, IoSlot& slot, int64_t transferred) {
    const std::span<std::byte> out = dst[i];
    const int64_t expected = static_cast<int64_t>(segment_record_bytes(out.size()));
    if (transferred < 0) return;  // kError: the disk failed this read
    // Verified where the bytes are: in the caller's buffer (the tail copied in first), or in the
    // bounce buffer before they are copied out.
    const size_t whole = found[i].whole;
    const bool bounced = whole == 0;
    if (!bounced && whole < out.size()) {
      std::memcpy(out.data() + whole, slot.bounce.data(), out.size() - whole);
    }
    const std::span<const std::byte> payload =
        bounced ? std::span<const std::byte>(slot.bounce.data(), out.size())
                : std::span<const std::byte>(out);
    if (transferred == expected &&
        tier_internal::verify_segment_record(slot.header.span(), found[i].segment->id, keys[i],
                                             payload) == RecordCheck::kOk) {
      if (bounced && !out.empty()) std::memcpy(out.data(), payload.data(), out.size());
      statuses[i] = ChunkStatus::kOk;
      if (!found[i].verified) {  // a record found by the scan on open: now known intact
        std::lock_guard lock(mutex_);
        auto it = index_.find(keys[i]);
        if (it != index_.end() && it->second.segment == found[i].segment &&
            it->second.offset == found[i].offset) {
          it->second.verified = true;
        }
      }
      return;
    }
    // Torn, truncated or corrupt: never served, and forgotten so the next lookup misses.
    statuses[i] = ChunkStatus::kCorrupt;
    std::lock_guard lock(mutex_);
    auto it = index_.find(keys[i]);
    if (it != index_.end() && it->second.segment == found[i].segment &&
        it->second.offset == found[i].offset) {
      erase_locked(keys[i]);
    }
  };

  const size_t started = engine_->run(n, queue_depth_for(largest), prepare, complete, deadline);
  found.clear();  // drop segment references before closing retired files
  {
    std::vector<SegmentPtr> closing;
    std::lock_guard lock(mutex_);
    closing.swap(graveyard_);
  }
  if (failure) return std::unexpected(*failure);
  if (started < n) return make_error(ErrorCode::kDeadlineExceeded, "disk tier: get timed out");
  return statuses;
}

void DiskTier::maybe_compact(TimePoint deadline) {
  SegmentPtr victim;
  std::vector<Live> live;
  {
    std::lock_guard lock(mutex_);
    if (compacting_ || !compaction_due_ || !broken_.empty()) return;
    double lowest = options_.compact_below;
    for (const auto& [id, segment] : segments_) {
      if (segment == active_ || segment->pending > 0 || segment->compacting) continue;
      const double fraction = double(segment->live_bytes) / double(segment->bytes);
      if (segment->live_bytes > 0 && fraction < lowest) {
        lowest = fraction;
        victim = segment;
      }
    }
    compaction_due_ = false;
    if (!victim) return;
    for (const auto& [key, e] : index_) {
      if (e.segment == victim) live.push_back({key, e.offset, e.payload_bytes});
    }
    victim->compacting = true;
    compacting_ = true;
  }
  try {
    compact(victim, live, deadline);
  } catch (...) {
    // An allocation that failed: compaction stays on (the next new segment tries again), and
    // the victim may be retired once empty.
    std::lock_guard lock(mutex_);
    victim->compacting = false;
    compacting_ = false;
    compaction_due_ = true;
    throw;
  }
}

void DiskTier::compact(const SegmentPtr& victim, std::vector<Live>& live, TimePoint deadline) {
  std::ranges::sort(live, {}, &Live::offset);

  // In groups of at most kCompactGroupBytes: read and verify, then append.
  std::vector<AlignedBuffer> buffers;
  size_t first = 0;
  bool finished = true;
  while (first < live.size()) {
    size_t count = 0;
    uint64_t group_bytes = 0;
    while (first + count < live.size() &&
           (count == 0 || group_bytes + segment_record_bytes(live[first + count].payload_bytes) <=
                              kCompactGroupBytes)) {
      group_bytes += segment_record_bytes(live[first + count].payload_bytes);
      ++count;
    }
    if (buffers.size() < count) buffers.resize(count);
    std::vector<uint8_t> intact(count, 0);  // bytes: completions may run on several threads
    uint64_t largest = 0;
    for (size_t i = 0; i < count; ++i) {
      buffers[i].reserve(segment_record_bytes(live[first + i].payload_bytes));
      largest = std::max(largest, live[first + i].payload_bytes);
    }
    const size_t read = engine_->run(
        count, queue_depth_for(largest),
        [&](size_t i, IoSlot&, IoRequest& request) {
          request.fd = victim->fd;
          request.offset = live[first + i].offset;
          request.add(buffers[i].data(), segment_record_bytes(live[first + i].payload_bytes));
          return true;
        },
        [&](size_t i, IoSlot&, int64_t transferred) {
          const Live& r = live[first + i];
          const std::span<const std::byte> record(buffers[i].data(),
                                                  segment_record_bytes(r.payload_bytes));
          intact[i] = transferred == static_cast<int64_t>(record.size()) &&
                      tier_internal::verify_segment_record(
                          record.first(kIoAlign), victim->id, r.key,
                          record.subspan(kIoAlign, r.payload_bytes)) == RecordCheck::kOk;
        },
        deadline);
    std::vector<ChunkKey> keys;
    std::vector<Source> sources;
    std::vector<Move> moves;
    for (size_t i = 0; i < read; ++i) {
      const Live& r = live[first + i];
      if (!intact[i]) {
        std::lock_guard lock(mutex_);  // corrupt: dropped, not carried along
        auto it = index_.find(r.key);
        if (it != index_.end() && it->second.segment == victim && it->second.offset == r.offset) {
          erase_locked(r.key);
        }
        continue;
      }
      keys.push_back(r.key);
      sources.push_back(
          {std::span<const std::byte>(buffers[i].data() + kIoAlign, r.payload_bytes), true});
      moves.push_back({victim, r.offset});
    }
    const WriteResult written = write_records(keys, sources, moves, deadline);
    if (read < count || written.started < keys.size() || written.error) {
      finished = false;
      break;
    }
    first += count;
  }
  std::lock_guard lock(mutex_);
  victim->compacting = false;
  compacting_ = false;
  if (victim->live_bytes == 0 && !victim->retired) {
    retire_locked(victim);
    ++compactions_;
  } else if (!finished) {
    compaction_due_ = true;  // try again after the next new segment
  }
}

Result<std::vector<bool>> DiskTier::do_contains(std::span<const ChunkKey> keys, Duration) {
  std::lock_guard lock(mutex_);
  std::vector<bool> present(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) present[i] = index_.contains(keys[i]);
  return present;
}

Status DiskTier::do_ping(Duration) {
  std::vector<SegmentPtr> closing;
  std::lock_guard lock(mutex_);
  const auto closing_guard = [&] { closing.swap(graveyard_); };
  if (::access(options_.directory.c_str(), R_OK | W_OK | X_OK) != 0) {
    std::error_code ec;
    fs::create_directories(options_.directory, ec);
    if (ec) {
      return make_error(
          ErrorCode::kUnavailable,
          "disk tier: cannot create " + options_.directory.string() + ": " + ec.message());
    }
  }
  forget_vanished_locked();
  if (!broken_.empty()) {
    // The lock file may have gone with the directory: take it again.
    if (struct stat st{}; ::fstat(lock_fd_, &st) != 0 || st.st_nlink == 0) {
      if (Status ok = take_lock(); !ok) return ok;
    }
  }
  // Ready when a record can be appended: the active segment has room, or a new one can be made.
  if (!active_ || active_->write_off + 2 * kIoAlign > active_->bytes) {
    if (active_) {
      const SegmentPtr sealed = active_;
      active_ = nullptr;
      maybe_retire_locked(sealed);
    }
    Status ok = new_segment_locked();
    closing_guard();
    if (!ok) return ok;
  }
  broken_.clear();
  closing_guard();
  return {};
}

size_t DiskTier::queue_depth_for(uint64_t chunk_bytes) const {
  const uint64_t record = segment_record_bytes(chunk_bytes);
  // At most a segment's worth of records in flight too: one call's appends then pin at most two
  // segments, and a tier has room for four, so a call never runs out of room for its own writes
  // (records that have landed can be evicted; records in flight cannot).
  const uint64_t budget = std::min(kInflightBudget, segment_bytes_);
  return std::clamp<size_t>(budget / record, 1, options_.queue_depth);
}

bool DiskTier::uses_io_uring() const {
  return engine_ && engine_->backend() == tier_internal::IoBackend::kIoUring;
}

uint64_t DiskTier::bytes_used() const {
  std::lock_guard lock(mutex_);
  return bytes_used_;
}

uint64_t DiskTier::disk_bytes() const {
  std::lock_guard lock(mutex_);
  return disk_bytes_;
}

size_t DiskTier::chunk_count() const {
  std::lock_guard lock(mutex_);
  return index_.size();
}

size_t DiskTier::segment_count() const {
  std::lock_guard lock(mutex_);
  return segments_.size();
}

uint64_t DiskTier::evictions() const {
  std::lock_guard lock(mutex_);
  return evictions_;
}

uint64_t DiskTier::compactions() const {
  std::lock_guard lock(mutex_);
  return compactions_;
}

uint64_t DiskTier::segments_reused() const {
  std::lock_guard lock(mutex_);
  return segments_reused_;
}

size_t DiskTier::spare_count() const {
  std::lock_guard lock(mutex_);
  return spares_.size();
}

std::optional<DiskTier::RecordLocation> DiskTier::location_of(const ChunkKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return RecordLocation{it->second.segment->path, it->second.offset,
                        segment_record_bytes(it->second.payload_bytes)};
}

std::optional<DiskTier::RecordLocation> DiskTier::find_record(const fs::path& directory,
                                                              const ChunkKey& key) {
  std::optional<RecordLocation> best;
  uint64_t best_seq = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(directory, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::optional<uint64_t> id = parse_segment_name(it->path().filename().string());
    if (!id) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0) {
      const ScanResult scan =
          scan_segment(fd, static_cast<uint64_t>(st.st_size) / kIoAlign * kIoAlign, *id);
      for (const Scanned& r : scan.records) {
        if (r.header.key == key && (!best || r.header.seq > best_seq)) {
          best = RecordLocation{it->path(), r.offset, segment_record_bytes(r.header.payload_bytes)};
          best_seq = r.header.seq;
        }
      }
    }
    ::close(fd);
  }
  return best;
}

}  // namespace kvtier
