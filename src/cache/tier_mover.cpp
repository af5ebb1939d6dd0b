#include "kvtier/cache/tier_mover.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kvtier/tier/tier_factory.h"
#include "staging_buffers.h"

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

Result<std::vector<MoverTier>> make_mover_tiers(const TiersConfig& config, const KeyNamespace& ns) {
  auto made = make_tiers(config, ns);
  if (!made) return std::unexpected(made.error());
  std::vector<MoverTier> tiers;
  for (auto& tier : *made) {
    const Duration timeout = tier_timeout(config, tier->name());
    tiers.push_back(MoverTier{.tier = std::move(tier), .timeout = timeout});
  }
  return tiers;
}

TierMover::TierMover(CacheManager& cache, const HostPool& pool, std::vector<MoverTier> tiers,
                     TierMoverOptions options)
    : TierMover(cache, std::vector<const HostPool*>{&pool}, std::move(tiers), options) {}

TierMover::TierMover(CacheManager& cache, std::vector<const HostPool*> pools,
                     std::vector<MoverTier> tiers, TierMoverOptions options)
    : cache_(cache), pools_(std::move(pools)), tiers_(std::move(tiers)), options_(options) {
  if (pools_.empty()) throw std::invalid_argument("TierMover: no host pool");
  for (const HostPool* pool : pools_) {
    if (pool == nullptr) throw std::invalid_argument("TierMover: a host pool is null");
    if (pool->slot_bytes() != cache_.slot_bytes() || pool->num_slots() < cache_.num_slots()) {
      throw std::invalid_argument("TierMover: a pool's slots differ from the cache's");
    }
  }
  for (const MoverTier& t : tiers_) {
    if (!t.tier) throw std::invalid_argument("TierMover: a tier is null");
    if (Status s = t.tier->can_hold(chunk_bytes()); !s)
      throw std::invalid_argument(s.error().message);
  }
  if (options_.write_queue_chunks == 0 || options_.write_batch_chunks == 0) {
    throw std::invalid_argument("TierMover: write_queue_chunks and write_batch_chunks must be > 0");
  }
  if (!tiers_.empty()) {
    staging_ = std::make_unique<cache_internal::StagingBuffers>(
        chunk_bytes(), options_.write_queue_chunks + options_.write_batch_chunks);
  }
  writer_ = std::thread([this] { writer_loop(); });
  prefetcher_ = std::thread([this] { prefetch_loop(); });
  // Last: nothing above may throw once the cache calls this mover.
  cache_.set_event_listener([this](const CacheEvent& event) { on_cache_event(event); });
}

TierMover::~TierMover() {
  cache_.set_event_listener({});
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

void TierMover::publish_events(KvEventPublisher* publisher, uint32_t block_size) {
  for (MoverTier& t : tiers_) t.tier->publish_events(publisher, block_size);
}

// ---- write-behind ----

bool TierMover::enqueue_write(const ChunkKey& key, SlotId slot) {
  std::optional<uint32_t> staging;
  {
    std::lock_guard lock(mutex_);
    if (write_queue_.size() < options_.write_queue_chunks) staging = staging_->take();
    if (!staging) {
      ++counters_.writes_dropped;  // back-pressure drops, never blocks
      return false;
    }
  }
  // Copied now, on the owner thread: the slot may be rewritten once the caller goes on. The
  // buffer is the writer's alone until write_batch gives it back.
  const std::span<std::byte> bytes = staging_->bytes(*staging);
  for (size_t p = 0; p < pools_.size(); ++p) {
    std::memcpy(bytes.data() + p * cache_.slot_bytes(), pools_[p]->slot_ptr(slot),
                cache_.slot_bytes());
  }
  {
    std::lock_guard lock(mutex_);
    write_queue_.push_back(WriteEntry{key, *staging});
    ++counters_.writes_enqueued;
  }
  work_cv_.notify_all();
  return true;
}

void TierMover::on_cache_event(const CacheEvent& event) {
  if (event.kind != CacheEventKind::kStored) return;
  for (const ChunkKey& key : event.keys) {
    prefetch_tried_.erase(key);              // ready again: may be fetched after a later eviction
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
        batch.push_back(write_queue_.front());
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
    chunks.push_back(staging_->bytes(e.staging));  // bytes() reads only what never changes
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
  for (const WriteEntry& e : batch) staging_->give(e.staging);  // the tiers are done with them
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

bool TierMover::read_through(std::span<const ChunkKey> keys, size_t host_hits, OwnerId owner) {
  return read_through_start(keys, host_hits, read_through_lower(keys, host_hits), owner);
}

size_t TierMover::read_through_lower(std::span<const ChunkKey> keys, size_t host_hits) {
  if (tiers_.empty() || host_hits >= keys.size()) return 0;
  if (prefetch_tried_.contains(keys[host_hits])) return 0;
  return lower_hits(keys, host_hits);
}

bool TierMover::read_through_start(std::span<const ChunkKey> keys, size_t host_hits, size_t lower,
                                   OwnerId owner) {
  if (lower == 0) return false;
  // prepare_store evicts ready keys not among those it stores: make the host hits the most
  // recently used first.
  cache_.touch(keys.first(host_hits));
  // Only the keys now being fetched are tried: one the host cache held already was not.
  const std::vector<ChunkKey> fetched = start_prefetch(keys.subspan(host_hits, lower), owner);
  if (fetched.empty()) return false;
  if (prefetch_tried_.size() + fetched.size() > cache_.num_slots() * 4) prefetch_tried_.clear();
  prefetch_tried_.insert(fetched.begin(), fetched.end());
  return true;
}

size_t TierMover::prefetch(std::span<const ChunkKey> keys, OwnerId owner) {
  return start_prefetch(keys, owner).size();
}

std::vector<ChunkKey> TierMover::start_prefetch(std::span<const ChunkKey> keys, OwnerId owner) {
  if (tiers_.empty() || keys.empty()) return {};
  std::expected<StorePlan, StoreRefusal> plan = cache_.prepare_store_for(owner, keys);
  if (!plan) {
    std::lock_guard lock(mutex_);
    ++counters_.prefetch_rejected;
    return {};
  }
  demote_evicted(*plan);  // before the slots are filled
  if (plan->keys.empty()) return {};
  PrefetchJob job{.keys = plan->keys,
                  .slots = plan->slots,
                  .filled = std::vector<bool>(plan->keys.size(), false)};
  {
    std::lock_guard lock(mutex_);
    counters_.prefetch_keys += job.keys.size();
    prefetch_queue_.push_back(std::move(job));
  }
  work_cv_.notify_all();
  return std::move(plan->keys);
}

void TierMover::prefetch_loop() {
  for (;;) {
    std::vector<PrefetchJob> jobs;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return stopping_ || !prefetch_queue_.empty(); });
      if (stopping_) return;
      // The queued jobs at once, up to prefetch_batch_bytes (at least one): their reads are in
      // flight together (requests that arrived in one step each queued one), not one job's
      // after another's.
      size_t bytes = 0;
      while (!prefetch_queue_.empty() &&
             (jobs.empty() || bytes + prefetch_queue_.front().keys.size() * chunk_bytes() <=
                                  options_.prefetch_batch_bytes)) {
        bytes += prefetch_queue_.front().keys.size() * chunk_bytes();
        jobs.push_back(std::move(prefetch_queue_.front()));
        prefetch_queue_.pop_front();
      }
      prefetching_ = true;
    }
    try {
      fill(jobs);
    } catch (const std::bad_alloc&) {
      // No memory for the staging copy (up to prefetch_batch_bytes), and the thread goes on.
      // Every chunk fails (F3): with several pools, one marked filled may not have reached its
      // slots yet. (A tier's own bad_alloc is a failed call: H7.)
      for (PrefetchJob& job : jobs) job.filled.assign(job.filled.size(), false);
    }
    {
      std::lock_guard lock(mutex_);
      for (PrefetchJob& job : jobs) prefetched_.push_back(std::move(job));
      prefetching_ = false;
    }
    idle_cv_.notify_all();
  }
}

void TierMover::fill(std::vector<PrefetchJob>& jobs) {
  std::vector<PrefetchChunk> chunks;
  for (PrefetchJob& job : jobs) {
    for (size_t i = 0; i < job.keys.size(); ++i) chunks.push_back({&job, i});
  }
  // In batches of prefetch_batch_bytes: however long the read-through (a job is as long as a
  // request's missing prefix), one tier call stays well inside its timeout, and staging memory
  // (several pools) stays one batch.
  const size_t batch = std::max<size_t>(1, options_.prefetch_batch_bytes / chunk_bytes());
  std::vector<std::byte> staging(pools_.size() > 1 ? std::min(batch, chunks.size()) * chunk_bytes()
                                                   : 0);
  for (size_t begin = 0; begin < chunks.size(); begin += batch) {
    fill_batch(std::span(chunks).subspan(begin, std::min(batch, chunks.size() - begin)), staging);
  }
}

void TierMover::fill_batch(std::span<const PrefetchChunk> chunks, std::span<std::byte> staging) {
  // One pool: the tiers read straight into the slots. Several: into staging memory, and a
  // verified chunk is split into its pools' slots.
  const size_t slot_bytes = cache_.slot_bytes();
  auto chunk_of = [&](size_t c) -> std::span<std::byte> {
    if (pools_.size() == 1) {
      return {pools_[0]->slot_ptr(chunks[c].job->slots[chunks[c].index]), slot_bytes};
    }
    return staging.subspan(c * chunk_bytes(), chunk_bytes());
  };
  auto filled = [&](size_t c) { return chunks[c].job->filled[chunks[c].index]; };
  for (MoverTier& t : tiers_) {
    std::vector<size_t> missing;
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (!filled(c)) missing.push_back(c);
    }
    if (missing.empty()) break;
    std::vector<ChunkKey> keys;
    std::vector<std::span<std::byte>> dst;
    for (size_t c : missing) {
      keys.push_back(chunks[c].job->keys[chunks[c].index]);
      dst.push_back(chunk_of(c));
    }
    Result<std::vector<ChunkStatus>> result = t.tier->get(keys, dst, t.timeout);
    if (!result) continue;  // DOWN or failed: try the next tier
    // Only a verified chunk counts; a corrupt one left unspecified bytes that the next tier
    // overwrites, or that stay unpublished (F3).
    for (size_t j = 0; j < missing.size(); ++j) {
      if ((*result)[j] == ChunkStatus::kOk) {
        chunks[missing[j]].job->filled[chunks[missing[j]].index] = true;
      }
    }
  }
  if (pools_.size() == 1) return;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (!filled(c)) continue;
    const SlotId slot = chunks[c].job->slots[chunks[c].index];
    for (size_t p = 0; p < pools_.size(); ++p) {
      std::memcpy(pools_[p]->slot_ptr(slot), staging.data() + c * chunk_bytes() + p * slot_bytes,
                  slot_bytes);
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
