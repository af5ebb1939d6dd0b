#include "kvtier/cache/tier_mover.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace kvtier {

Result<WritePolicy> parse_write_policy(std::string_view name) {
  if (name == "on_store") return WritePolicy::kOnStore;
  if (name == "on_evict") return WritePolicy::kOnEvict;
  return make_error(ErrorCode::kInvalidArgument,
                    "write policy must be on_store or on_evict, got '" + std::string(name) + "'");
}

TierMoverOptions tier_mover_options(const TiersConfig& config) {
  Result<WritePolicy> policy = parse_write_policy(config.write_policy);
  if (!policy) throw std::invalid_argument("tiers.write_policy: " + policy.error().message);
  return TierMoverOptions{.write_queue_chunks = config.write_queue_chunks, .write_policy = *policy};
}

TierMover::TierMover(CacheManager& cache, const HostPool& pool, std::vector<MoverTier> tiers,
                     TierMoverOptions options)
    : cache_(cache), pool_(pool), tiers_(std::move(tiers)), options_(options) {
  for (const MoverTier& t : tiers_) {
    if (!t.tier) throw std::invalid_argument("TierMover: a tier is null");
  }
  if (options_.write_queue_chunks == 0 || options_.write_batch_chunks == 0) {
    throw std::invalid_argument("TierMover: write_queue_chunks and write_batch_chunks must be > 0");
  }
  if (pool_.slot_bytes() != cache_.slot_bytes()) {
    throw std::invalid_argument("TierMover: the pool's slot size differs from the cache's");
  }
  writer_ = std::thread([this] { writer_loop(); });
  prefetcher_ = std::thread([this] { prefetch_loop(); });
}

TierMover::~TierMover() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  writer_.join();
  prefetcher_.join();
  poll();
  // F3/F12: prefetches that never ran leave nothing pending behind.
  for (PrefetchJob& job : prefetch_queue_) cache_.complete_store(job.keys, Verdict::kFailed);
}

// ---- write-behind ----

bool TierMover::enqueue_write(const ChunkKey& key, SlotId slot) {
  {
    std::lock_guard lock(mutex_);
    if (write_queue_.size() >= options_.write_queue_chunks) {
      ++counters_.writes_dropped;  // back-pressure drops, never blocks
      return false;
    }
  }
  // Copied now, on the owner thread: the slot may be rewritten once the caller goes on.
  const std::byte* src = pool_.slot_ptr(slot);
  WriteEntry entry{key, std::vector<std::byte>(src, src + pool_.slot_bytes())};
  {
    std::lock_guard lock(mutex_);
    write_queue_.push_back(std::move(entry));
    ++counters_.writes_enqueued;
  }
  work_cv_.notify_all();
  return true;
}

void TierMover::on_cache_events(std::span<const CacheEvent> events) {
  for (const CacheEvent& event : events) {
    if (event.kind != CacheEventKind::kStored) continue;
    for (const ChunkKey& key : event.keys) {
      if (promoted_.erase(key) > 0) continue;  // came from a tier
      if (options_.write_policy != WritePolicy::kOnStore || tiers_.empty()) continue;
      if (std::optional<SlotId> slot = cache_.ready_slot(key)) {
        enqueue_write(key, *slot);
      } else {
        std::lock_guard lock(mutex_);
        ++counters_.writes_missed;
      }
    }
  }
}

void TierMover::demote_evicted(const StorePlan& plan) {
  if (options_.write_policy != WritePolicy::kOnEvict || tiers_.empty()) return;
  for (size_t i = 0; i < plan.evicted.size() && i < plan.evicted_slots.size(); ++i) {
    enqueue_write(plan.evicted[i], plan.evicted_slots[i]);
  }
}

void TierMover::writer_loop() {
  for (;;) {
    std::vector<WriteEntry> batch;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait_for(lock, options_.health_tick,
                        [&] { return stopping_ || !write_queue_.empty(); });
      if (stopping_) return;
      while (!write_queue_.empty() && batch.size() < options_.write_batch_chunks) {
        batch.push_back(std::move(write_queue_.front()));
        write_queue_.pop_front();
      }
      writing_ = !batch.empty();
    }
    // H7: a DOWN tier comes back by itself, even while no call is made to it.
    for (MoverTier& t : tiers_) t.tier->probe_if_due();
    if (!batch.empty()) write_batch(batch);
    {
      std::lock_guard lock(mutex_);
      writing_ = false;
    }
    idle_cv_.notify_all();
  }
}

void TierMover::write_batch(std::vector<WriteEntry>& batch) {
  std::vector<ChunkKey> keys;
  std::vector<std::span<const std::byte>> chunks;
  for (const WriteEntry& e : batch) {
    keys.push_back(e.key);
    chunks.push_back(e.bytes);
  }
  std::vector<bool> stored(batch.size(), false);
  for (MoverTier& t : tiers_) {
    Result<std::vector<ChunkStatus>> result = t.tier->put(keys, chunks, t.timeout);
    if (!result) continue;  // DOWN or failed: the health wrapper took note
    for (size_t i = 0; i < batch.size(); ++i) {
      stored[i] = stored[i] || (*result)[i] == ChunkStatus::kOk;
    }
  }
  const auto n = static_cast<uint64_t>(std::ranges::count(stored, true));
  std::lock_guard lock(mutex_);
  counters_.chunks_demoted += n;
  counters_.demote_failures += batch.size() - n;
}

// ---- lookup ----

size_t TierMover::lower_hits(std::span<const ChunkKey> keys, size_t from) {
  if (from >= keys.size()) return 0;
  const std::span<const ChunkKey> wanted = keys.subspan(from);
  std::vector<bool> present(wanted.size(), false);
  size_t lead = 0;  // wanted[0, lead) are held by some tier
  for (MoverTier& t : tiers_) {
    if (lead == wanted.size()) break;
    Result<std::vector<bool>> held = t.tier->contains(wanted.subspan(lead), t.timeout);
    if (!held) continue;  // DOWN (H7): as if it held nothing
    for (size_t j = 0; j < held->size(); ++j) {
      if ((*held)[j]) present[lead + j] = true;
    }
    while (lead < wanted.size() && present[lead]) ++lead;
  }
  return lead;
}

// ---- read-through ----

size_t TierMover::prefetch(std::span<const ChunkKey> keys) {
  if (tiers_.empty() || keys.empty()) return 0;
  std::optional<StorePlan> plan = cache_.prepare_store(keys);
  if (!plan) {
    std::lock_guard lock(mutex_);
    ++counters_.prefetch_rejected;
    return 0;
  }
  demote_evicted(*plan);  // before the slots are filled
  if (plan->keys.empty()) return 0;
  PrefetchJob job{.keys = plan->keys, .filled = std::vector<bool>(plan->keys.size(), false)};
  for (SlotId slot : plan->slots) job.slots.emplace_back(pool_.slot_ptr(slot), pool_.slot_bytes());
  const size_t n = job.keys.size();
  {
    std::lock_guard lock(mutex_);
    counters_.prefetch_keys += n;
    prefetch_queue_.push_back(std::move(job));
  }
  work_cv_.notify_all();
  return n;
}

void TierMover::prefetch_loop() {
  for (;;) {
    PrefetchJob job;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return stopping_ || !prefetch_queue_.empty(); });
      if (stopping_) return;
      job = std::move(prefetch_queue_.front());
      prefetch_queue_.pop_front();
      prefetching_ = true;
    }
    fill(job);
    {
      std::lock_guard lock(mutex_);
      prefetched_.push_back(std::move(job));
      prefetching_ = false;
    }
    idle_cv_.notify_all();
  }
}

void TierMover::fill(PrefetchJob& job) {
  for (MoverTier& t : tiers_) {
    std::vector<size_t> missing;
    for (size_t i = 0; i < job.keys.size(); ++i) {
      if (!job.filled[i]) missing.push_back(i);
    }
    if (missing.empty()) return;
    std::vector<ChunkKey> keys;
    std::vector<std::span<std::byte>> dst;
    for (size_t i : missing) {
      keys.push_back(job.keys[i]);
      dst.push_back(job.slots[i]);
    }
    Result<std::vector<ChunkStatus>> result = t.tier->get(keys, dst, t.timeout);
    if (!result) continue;  // DOWN or failed: try the next tier
    // Only a verified chunk counts; a corrupt one left unspecified bytes that the next tier
    // overwrites, or that stay unpublished (F3).
    for (size_t j = 0; j < missing.size(); ++j) {
      if ((*result)[j] == ChunkStatus::kOk) job.filled[missing[j]] = true;
    }
  }
}

size_t TierMover::poll() {
  std::vector<PrefetchJob> done;
  {
    std::lock_guard lock(mutex_);
    done.swap(prefetched_);
  }
  size_t completed = 0;
  for (PrefetchJob& job : done) {
    std::vector<ChunkKey> ok;
    std::vector<ChunkKey> failed;
    for (size_t i = 0; i < job.keys.size(); ++i) {
      (job.filled[i] ? ok : failed).push_back(job.keys[i]);
    }
    if (promoted_.size() + ok.size() > cache_.num_slots()) promoted_.clear();  // bounded
    promoted_.insert(ok.begin(), ok.end());
    cache_.complete_store(ok, Verdict::kSucceeded);
    cache_.complete_store(failed, Verdict::kFailed);  // F3: never published
    completed += job.keys.size();
    std::lock_guard lock(mutex_);
    counters_.prefetch_succeeded += ok.size();
    counters_.prefetch_failed += failed.size();
  }
  return completed;
}

// ---- health and counters ----

std::vector<std::string> TierMover::degraded_tiers() const {
  std::vector<std::string> names;
  for (const MoverTier& t : tiers_) {
    for (std::string& name : degraded_names(t.tier->metrics())) names.push_back(std::move(name));
  }
  return names;
}

std::vector<TierMetrics> TierMover::tier_metrics() const {
  std::vector<TierMetrics> metrics;
  metrics.reserve(tiers_.size());
  for (const MoverTier& t : tiers_) metrics.push_back(t.tier->metrics());
  return metrics;
}

TierMoverCounters TierMover::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

bool TierMover::idle_locked() const {
  return write_queue_.empty() && !writing_ && prefetch_queue_.empty() && !prefetching_;
}

bool TierMover::wait_idle(Duration timeout) {
  std::unique_lock lock(mutex_);
  return idle_cv_.wait_for(lock, timeout, [&] { return idle_locked(); });
}

}  // namespace kvtier
