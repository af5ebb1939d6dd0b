#include "kvtier/connector/scheduler_connector.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "admission_policy.h"
#include "request_state.h"

namespace kvtier {

SchedulerOptions scheduler_options(const Config& config, uint32_t world_size, KvLayout layout,
                                   std::string model) {
  return SchedulerOptions{
      .world_size = world_size,
      .layout = std::move(layout),
      .model = std::move(model),
      .store_decode = config.connector.store_decode,
      .store_threshold = config.connector.store_threshold,
      .admission_window = config.connector.admission_window,
      .max_store_chunks_in_flight = config.connector.max_store_chunks_in_flight,
      .job_timeout = seconds_to_duration(config.transfer.transfer_deadline_s +
                                         config.transfer.completion_margin_s),
  };
}

SchedulerConnector::SchedulerConnector(SchedulerOptions options, CacheManager& cache,
                                       const Clock& clock)
    : options_(std::move(options)),
      local_index_(std::make_unique<LocalCacheIndex>(cache)),
      cache_(*local_index_),
      clock_(clock) {
  init();
  if (cache.slot_bytes() < options_.layout.max_chunk_bytes()) {
    throw std::invalid_argument(
        "SchedulerConnector: host slots of " + std::to_string(cache.slot_bytes()) +
        " bytes cannot hold a chunk of " + std::to_string(options_.layout.max_chunk_bytes()));
  }
}

SchedulerConnector::SchedulerConnector(SchedulerOptions options, CacheIndex& index,
                                       const Clock& clock)
    : options_(std::move(options)), cache_(index), clock_(clock) {
  init();
}

void SchedulerConnector::init() {
  if (Status s = options_.layout.validate(); !s) throw std::invalid_argument(s.error().message);
  if (options_.world_size == 0) throw std::invalid_argument("SchedulerConnector: world_size 0");
  if (options_.store_threshold == 0) {
    throw std::invalid_argument("SchedulerConnector: store_threshold must be >= 1");
  }
  if (options_.max_store_chunks_in_flight == 0) {
    throw std::invalid_argument("SchedulerConnector: max_store_chunks_in_flight must be >= 1");
  }
  if (options_.job_timeout <= Duration::zero()) {
    throw std::invalid_argument("SchedulerConnector: job_timeout must be > 0");
  }
  admission_ =
      std::make_unique<AdmissionPolicy>(options_.store_threshold, options_.admission_window);
  store_reading_.resize(options_.layout.groups.size());
  align_tokens_ = 1;
  for (const KvGroup& g : options_.layout.groups) {
    align_tokens_ = std::lcm(align_tokens_, g.chunk_tokens());
  }
}

SchedulerConnector::~SchedulerConnector() = default;

SchedulerConnector::RequestState& SchedulerConnector::state_of(const RequestId& id,
                                                               std::span<const TokenId> tokens,
                                                               const std::string& salt) {
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    auto r = std::make_unique<RequestState>();
    r->id = id;
    const size_t groups = options_.layout.groups.size();
    for (size_t g = 0; g < groups; ++g) {
      r->roots.push_back(
          namespace_root(KeyNamespace{.model = options_.model,
                                      .layout_fingerprint = options_.layout.fingerprint(),
                                      .group = static_cast<uint32_t>(g),
                                      .cache_salt = salt}));
    }
    r->keys.resize(groups);
    r->blocks.resize(groups);
    r->stored_chunks.assign(groups, 0);
    it = requests_.emplace(id, std::move(r)).first;
  }
  extend_keys(*it->second, tokens);
  return *it->second;
}

void SchedulerConnector::extend_keys(RequestState& r, std::span<const TokenId> tokens) {
  for (size_t g = 0; g < r.keys.size(); ++g) {
    const size_t chunk = options_.layout.groups[g].chunk_tokens();
    std::vector<ChunkKey>& keys = r.keys[g];
    while ((keys.size() + 1) * chunk <= tokens.size()) {
      const ChunkKey& parent = keys.empty() ? r.roots[g] : keys.back();
      keys.push_back(next_chunk_key(parent, tokens.subspan(keys.size() * chunk, chunk)));
    }
  }
}

Match SchedulerConnector::get_num_new_matched_tokens(const ConnectorRequest& request,
                                                     size_t num_computed) {
  RequestState& r = state_of(request.id, request.tokens, request.cache_salt);
  r.match_from = r.match_to = num_computed;
  // One load or some stores in flight, never both.
  if (r.load || r.stores_in_flight > 0) {
    ++counters_.deferred_lookups;
    return Match{.ask_later = true};
  }
  if (!r.counted_lookups) {
    r.counted_lookups = true;
    const size_t prompt = std::min(request.num_prompt_tokens, request.tokens.size());
    std::vector<std::span<const ChunkKey>> prompt_keys;
    for (size_t g = 0; g < r.keys.size(); ++g) {
      const size_t n =
          std::min(r.keys[g].size(), prompt / options_.layout.groups[g].chunk_tokens());
      prompt_keys.push_back(std::span(r.keys[g]).first(n));
    }
    admission_->observe(prompt_keys);
  }
  if (fail_stopped() || request.tokens.empty()) return Match{};
  // At least the last token is computed: the engine needs its logits.
  const size_t limit = request.tokens.size() - 1;
  size_t hit_tokens = limit;
  bool pending = false;
  for (size_t g = 0; g < r.keys.size(); ++g) {
    const KvGroup& group = options_.layout.groups[g];
    if (num_computed % group.block_size != 0) return Match{};  // not a device-cache boundary
    const size_t first = num_computed / group.chunk_tokens();
    const size_t last = std::min(r.keys[g].size(), limit / group.chunk_tokens());
    if (first >= last) return Match{};
    const LookupResult found = cache_.lookup(std::span(r.keys[g]).subspan(first, last - first));
    pending = pending || found.pending;
    hit_tokens = std::min(hit_tokens, (first + found.hit_chunks) * group.chunk_tokens());
  }
  hit_tokens = hit_tokens / align_tokens_ * align_tokens_;
  // A chunk it would load is being loaded for another request: once that load is done, the
  // engine's device prefix cache has it; loading it twice wastes the copy and the blocks.
  for (size_t g = 0; g < r.keys.size() && hit_tokens > num_computed; ++g) {
    const size_t chunk = options_.layout.groups[g].chunk_tokens();
    for (size_t c = num_computed / chunk; c < hit_tokens / chunk; ++c) {
      if (being_loaded_.contains(r.keys[g][c])) pending = true;
    }
  }
  if (pending) {
    ++counters_.deferred_lookups;
    return Match{.ask_later = true};
  }
  if (hit_tokens <= num_computed) return Match{};
  r.match_to = hit_tokens;
  return Match{.tokens = hit_tokens - num_computed};
}

void SchedulerConnector::look_ahead(const ConnectorRequest& request, size_t num_computed) {
  if (fail_stopped() || request.tokens.empty()) return;
  RequestState& r = state_of(request.id, request.tokens, request.cache_salt);
  const size_t limit = request.tokens.size() - 1;  // as get_num_new_matched_tokens
  for (size_t g = 0; g < r.keys.size(); ++g) {
    const size_t chunk = options_.layout.groups[g].chunk_tokens();
    const size_t first = num_computed / chunk;
    const size_t last = std::min(r.keys[g].size(), limit / chunk);
    if (first < last) cache_.lookup_ahead(std::span(r.keys[g]).subspan(first, last - first));
  }
}

void SchedulerConnector::add_blocks(RequestState& r, const GroupBlocks& blocks,
                                    std::vector<JobId>& flush) {
  if (blocks.size() > r.blocks.size()) {
    throw std::invalid_argument("request " + r.id + ": blocks for " +
                                std::to_string(blocks.size()) + " groups, the layout has " +
                                std::to_string(r.blocks.size()));
  }
  for (size_t g = 0; g < blocks.size(); ++g) {
    for (uint32_t b : blocks[g]) {
      // F10: the block has a new owner while a store still reads it.
      if (auto reading = store_reading_[g].find(b); reading != store_reading_[g].end()) {
        flush.push_back(reading->second);
        ++counters_.flushes;
      }
      r.blocks[g].push_back(b);
    }
  }
}

void SchedulerConnector::update_state_after_alloc(const RequestId& request,
                                                  const GroupBlocks& blocks,
                                                  size_t num_external_tokens) {
  auto it = requests_.find(request);
  if (it == requests_.end()) {
    throw std::invalid_argument("update_state_after_alloc: unknown request " + request);
  }
  RequestState& r = *it->second;
  // `blocks` is the whole table; the connector's copy is a prefix of it.
  GroupBlocks added(r.blocks.size());
  for (size_t g = 0; g < blocks.size() && g < r.blocks.size(); ++g) {
    if (blocks[g].size() < r.blocks[g].size()) {
      throw std::invalid_argument("update_state_after_alloc: request " + request +
                                  " block table shrank");
    }
    added[g].assign(blocks[g].begin() + static_cast<ptrdiff_t>(r.blocks[g].size()),
                    blocks[g].end());
  }
  add_blocks(r, added, pending_flush_);
  if (num_external_tokens == 0) return;
  if (num_external_tokens != r.match_to - r.match_from || r.load || r.stores_in_flight > 0) {
    throw std::invalid_argument("update_state_after_alloc: request " + request + " accepts " +
                                std::to_string(num_external_tokens) +
                                " external tokens, its match was " +
                                std::to_string(r.match_to - r.match_from));
  }

  auto job = std::make_unique<Job>();
  job->id = next_job_++;
  job->kind = JobKind::kLoad;
  job->request = request;
  job->from_tokens = r.match_from;
  job->to_tokens = r.match_to;
  job->epoch = epoch_;
  job->created = clock_.now();
  job->acked.assign(options_.world_size, false);
  job->blocks.resize(r.blocks.size());
  job->first_index.assign(r.blocks.size(), 0);
  job->invalid.resize(r.blocks.size());
  TransferJob transfer{.job = job->id, .request = request};
  for (size_t g = 0; g < r.blocks.size(); ++g) {
    const KvGroup& group = options_.layout.groups[g];
    const size_t first_block = r.match_from / group.block_size;
    const size_t end_block = r.match_to / group.block_size;
    if (r.blocks[g].size() < end_block) {
      throw std::invalid_argument("update_state_after_alloc: request " + request + " has " +
                                  std::to_string(r.blocks[g].size()) + " blocks in group " +
                                  std::to_string(g) + ", its load needs " +
                                  std::to_string(end_block));
    }
    job->first_index[g] = first_block;
    for (size_t c = first_block / group.blocks_per_chunk; c * group.blocks_per_chunk < end_block;
         ++c) {
      ChunkTransfer chunk{.group = static_cast<uint32_t>(g)};
      const size_t chunk_start = c * group.blocks_per_chunk;
      const size_t from = std::max(chunk_start, first_block);
      chunk.first_block = static_cast<uint32_t>(from - chunk_start);
      chunk.blocks.assign(
          r.blocks[g].begin() + static_cast<ptrdiff_t>(from),
          r.blocks[g].begin() + static_cast<ptrdiff_t>(chunk_start + group.blocks_per_chunk));
      job->blocks[g].insert(job->blocks[g].end(), chunk.blocks.begin(), chunk.blocks.end());
      job->keys.push_back(r.keys[g][c]);
      transfer.chunks.push_back(std::move(chunk));
    }
  }
  Result<std::vector<SlotId>> slots = cache_.prepare_load(job->keys);
  if (!slots) {
    // The match's chunks left the cache since the lookup (kvtierd evicted them, or cannot be
    // asked): nothing was pinned, nothing loads. Until the engine hears so, with the next
    // outputs, it may compute the request from the match's end (an in-step load): the blocks
    // before it hold no KV of this request, so the request stores nothing meanwhile (F4).
    r.load = job->id;
    resumed_.push_back(LoadFinished{request, r.match_from, Outcome::kFailed});
    ++counters_.loads_failed;  // a failed load from the start (F4)
    return;
  }
  for (size_t i = 0; i < transfer.chunks.size(); ++i) transfer.chunks[i].slot = (*slots)[i];
  transfer.keys = job->keys;
  for (const ChunkKey& k : job->keys) ++being_loaded_[k];
  r.load = job->id;
  ++counters_.jobs_issued;
  pending_loads_.push_back(std::move(transfer));
  jobs_.emplace(job->id, std::move(job));
}

StepMetadata SchedulerConnector::build_step_metadata(const StepInput& step) {
  StepMetadata meta{.step = step.step};
  meta.loads = std::move(pending_loads_);
  pending_loads_.clear();
  meta.flush = std::move(pending_flush_);
  pending_flush_.clear();
  for (const ScheduledRequest& s : step.requests) {
    auto it = requests_.find(s.id);
    const bool adds_blocks =
        std::ranges::any_of(s.new_blocks, [](const auto& b) { return !b.empty(); });
    if (it != requests_.end() && !adds_blocks &&
        s.num_computed_after_step < it->second->next_store_tokens) {
      continue;  // a decode step inside a chunk: nothing to store, no block to fence
    }
    RequestState& r = state_of(s.id, s.tokens, "");
    add_blocks(r, s.new_blocks, meta.flush);
    build_stores(r, s, meta);
  }
  std::ranges::sort(meta.flush);
  meta.flush.erase(std::unique(meta.flush.begin(), meta.flush.end()), meta.flush.end());
  return meta;
}

void SchedulerConnector::build_stores(RequestState& r, const ScheduledRequest& s,
                                      StepMetadata& meta) {
  if (r.load || r.finished || fail_stopped()) return;
  const size_t limit = options_.store_decode
                           ? s.num_computed_after_step
                           : std::min(s.num_computed_after_step, s.num_prompt_tokens);
  struct Candidate {
    ChunkKey key;
    uint32_t group;
    size_t chunk;
  };
  std::vector<Candidate> candidates;
  std::vector<size_t> ends(r.keys.size());
  uint64_t not_admitted = 0;  // counted once the chunks are considered (not when deferred)
  for (size_t g = 0; g < r.keys.size(); ++g) {
    const KvGroup& group = options_.layout.groups[g];
    ends[g] = std::min({limit / group.chunk_tokens(), r.keys[g].size(),
                        r.blocks[g].size() / group.blocks_per_chunk});
    for (size_t c = r.stored_chunks[g]; c < ends[g]; ++c) {
      const ChunkKey& key = r.keys[g][c];
      if (!admission_->admits(key)) {
        ++not_admitted;
        continue;
      }
      candidates.push_back(Candidate{key, static_cast<uint32_t>(g), c});
    }
  }
  if (!candidates.empty() && store_chunks_in_flight_ >= options_.max_store_chunks_in_flight) {
    // The store direction is behind: the chunks stay unconsidered, and every later step of the
    // request tries again (they stay in its blocks while it runs). The step never waits.
    counters_.stores_deferred += candidates.size();
    r.next_store_tokens = 0;
    return;
  }
  counters_.stores_not_admitted += not_admitted;
  for (size_t g = 0; g < r.keys.size(); ++g) {
    r.stored_chunks[g] = std::max(r.stored_chunks[g], ends[g]);
  }
  // The next step that can complete a chunk not considered yet (none past the prompt unless
  // decode chunks are stored).
  r.next_store_tokens = std::numeric_limits<size_t>::max();
  if (!r.load && !r.finished) {
    for (size_t g = 0; g < r.keys.size(); ++g) {
      const size_t next = (r.stored_chunks[g] + 1) * options_.layout.groups[g].chunk_tokens();
      if (options_.store_decode || next <= s.num_prompt_tokens) {
        r.next_store_tokens = std::min(r.next_store_tokens, next);
      }
    }
  }
  if (candidates.empty()) return;
  std::vector<ChunkKey> keys;
  keys.reserve(candidates.size());
  for (const Candidate& c : candidates) keys.push_back(c.key);
  std::optional<StorePlan> plan = cache_.prepare_store(keys);
  if (!plan) {
    counters_.stores_skipped += keys.size();
    return;
  }
  if (plan->keys.empty()) return;  // every chunk is cached or being stored already

  auto job = std::make_unique<Job>();
  job->id = next_job_++;
  job->kind = JobKind::kStore;
  job->request = r.id;
  job->epoch = epoch_;
  job->created = clock_.now();
  job->acked.assign(options_.world_size, false);
  job->blocks.resize(r.blocks.size());
  job->keys = plan->keys;
  TransferJob transfer{.job = job->id, .request = r.id};
  size_t next = 0;  // plan->keys keep the order of `keys`
  for (size_t i = 0; i < plan->keys.size(); ++i) {
    while (candidates[next].key != plan->keys[i]) ++next;
    const Candidate& c = candidates[next];
    const KvGroup& group = options_.layout.groups[c.group];
    ChunkTransfer chunk{.group = c.group, .slot = plan->slots[i]};
    const auto first =
        r.blocks[c.group].begin() + static_cast<ptrdiff_t>(c.chunk * group.blocks_per_chunk);
    chunk.blocks.assign(first, first + group.blocks_per_chunk);
    for (uint32_t b : chunk.blocks) {
      job->blocks[c.group].push_back(b);
      store_reading_[c.group][b] = job->id;
    }
    transfer.chunks.push_back(std::move(chunk));
  }
  transfer.keys = job->keys;
  ++r.stores_in_flight;
  store_chunks_in_flight_ += job->keys.size();
  ++counters_.jobs_issued;
  meta.stores.push_back(std::move(transfer));
  stores_unsent_.push_back(job->id);
  jobs_.emplace(job->id, std::move(job));
}

bool SchedulerConnector::request_finished(const RequestId& request) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return false;
  RequestState& r = *it->second;
  r.finished = true;
  if (r.load || r.stores_in_flight > 0 || r.blocks_quarantined) return true;
  requests_.erase(it);
  return false;
}

void SchedulerConnector::request_preempted(const RequestId& request) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  RequestState& r = *it->second;
  if (r.load) throw std::logic_error("request_preempted: request " + request + " is loading");
  for (auto& blocks : r.blocks) blocks.clear();
  std::ranges::fill(r.stored_chunks, 0);
  r.next_store_tokens = 0;
}

Status SchedulerConnector::reset_cache() {
  if (Status s = cache_.reset(); !s) return s;
  ++epoch_;
  admission_->clear();
  return {};
}

void SchedulerConnector::fail_stop(std::string reason, StepOutcome& out) {
  if (fail_stop_reason_.empty()) fail_stop_reason_ = std::move(reason);
  out.fail_stop = true;
}

ConnectorCounters SchedulerConnector::counters() const {
  ConnectorCounters c = counters_;
  c.jobs_in_flight = jobs_.size();
  c.admission_threshold = admission_->threshold();
  return c;
}

Status SchedulerConnector::audit() const {
  if (!jobs_.empty() || !pending_loads_.empty()) {
    return make_error(ErrorCode::kFailedPrecondition,
                      "connector audit: " + std::to_string(jobs_.size()) + " jobs in flight");
  }
  size_t reading = 0;
  for (const auto& blocks : store_reading_) reading += blocks.size();
  if (!being_loaded_.empty() || reading != 0) {
    return make_error(ErrorCode::kInternal, "connector audit: leases outlive their jobs (" +
                                                std::to_string(being_loaded_.size()) +
                                                " keys being loaded, " + std::to_string(reading) +
                                                " blocks read by stores)");
  }
  return cache_.audit();
}

}  // namespace kvtier
