#include "kvtier/connector/local_worker_connector.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>
#include <utility>

namespace kvtier {

void LocalWorkerConnector::register_kv_caches(Device& device, const KvLayout& layout,
                                              const KvCacheAddresses& caches,
                                              const HostSlots& slots, StreamHandle compute_stream,
                                              TransferOptions options, const Clock& clock) {
  if (engine_) throw std::logic_error("LocalWorkerConnector: KV caches registered twice");
  engine_ = std::make_unique<TransferEngine>(device, layout, caches, slots, compute_stream, options,
                                             clock);
  caches_ = caches;
  groups_ = layout.groups.size();
  invalid_.assign(groups_, {});
  layer_loads_.resize(groups_);
  for (const KvGroup& g : layout.groups) {
    layers_.push_back(g.layers);
    layer_loads_[layers_.size() - 1].resize(g.layers);
  }
}

void LocalWorkerConnector::submit(const TransferJob& job, Direction direction) {
  engine_->submit(job.job, direction, job.chunks);
}

JobId LocalWorkerConnector::submit_part(const TransferJob& job, Direction direction,
                                        KvLayer layer) {
  std::vector<ChunkTransfer> chunks;
  for (const ChunkTransfer& c : job.chunks) {
    if (c.group != layer.group) continue;
    chunks.push_back(c);
    chunks.back().layer = layer.layer;
  }
  if (chunks.empty()) return 0;
  const JobId part = next_part_++;
  part_of_.emplace(part, job.job);
  layered_.at(job.job).parts.push_back(part);
  engine_->submit(part, direction, chunks);
  return part;
}

void LocalWorkerConnector::register_layered(const TransferJob& job, Direction direction) {
  LayeredJob layered;
  for (size_t g = 0; g < groups_; ++g) {
    if (std::ranges::any_of(job.chunks, [g](const ChunkTransfer& c) { return c.group == g; })) {
      layered.parts_left += layers_[g];
    }
  }
  if (layered.parts_left == 0) {
    add_verdict(job.job, direction, Outcome::kCompleted, {});  // nothing to copy
    return;
  }
  if (!layered_.emplace(job.job, layered).second) {
    throw std::invalid_argument("LocalWorkerConnector: job " + std::to_string(job.job) +
                                " is already in flight");
  }
}

void LocalWorkerConnector::check_ids(std::span<const TransferJob> loads,
                                     std::span<const TransferJob> stores) const {
  std::unordered_set<JobId> ids;
  for (const TransferJob& job : queued_stores_) ids.insert(job.job);
  for (std::span<const TransferJob> jobs : {loads, stores}) {
    for (const TransferJob& job : jobs) {
      if (!ids.insert(job.job).second || layered_.contains(job.job) ||
          load_blocks_.contains(job.job)) {
        throw std::invalid_argument("LocalWorkerConnector: job " + std::to_string(job.job) +
                                    " is given twice or still in flight");
      }
    }
  }
}

std::vector<const TransferJob*> LocalWorkerConnector::accept(std::span<const TransferJob> jobs,
                                                             Direction direction,
                                                             std::string& refusal) {
  std::vector<const TransferJob*> accepted;
  for (const TransferJob& job : jobs) {
    try {
      engine_->check(job.chunks);
      accepted.push_back(&job);
    } catch (const std::invalid_argument& e) {
      const std::string error = std::string(to_string(direction)) + " job " +
                                std::to_string(job.job) + " refused: " + e.what();
      if (direction == Direction::kLoad) {
        GroupBlocks blocks(groups_);  // F4: the blocks it named that exist
        for (const ChunkTransfer& c : job.chunks) {
          if (c.group < groups_)
            blocks[c.group].insert(blocks[c.group].end(), c.blocks.begin(), c.blocks.end());
        }
        load_blocks_.emplace(job.job, std::move(blocks));
      }
      add_verdict(job.job, direction, Outcome::kFailed, error);
      if (refusal.empty()) refusal = "LocalWorkerConnector: " + error;
    }
  }
  return accepted;
}

void LocalWorkerConnector::start_load(const StepMetadata& metadata) {
  if (!engine_)
    throw std::logic_error("LocalWorkerConnector: start_load before register_kv_caches");
  const bool layered = granularity_ == TransferGranularity::kLayer;
  // Stores go at queue_stores, whole-request; layer-wise they are taken here.
  check_ids(metadata.loads, layered ? std::span<const TransferJob>(metadata.stores)
                                    : std::span<const TransferJob>());
  flush(metadata.flush);
  std::string refusal;
  const std::vector<const TransferJob*> loads = accept(metadata.loads, Direction::kLoad, refusal);
  const std::vector<const TransferJob*> stores =
      layered ? accept(metadata.stores, Direction::kStore, refusal)
              : std::vector<const TransferJob*>();
  start(loads, stores);
  if (!refusal.empty()) throw std::invalid_argument(refusal);
}

void LocalWorkerConnector::start(std::span<const TransferJob* const> loads,
                                 std::span<const TransferJob* const> stores) {
  for (const TransferJob* load : loads) {
    const TransferJob& job = *load;
    GroupBlocks blocks(groups_);
    for (const ChunkTransfer& c : job.chunks) {
      blocks.at(c.group).insert(blocks[c.group].end(), c.blocks.begin(), c.blocks.end());
    }
    load_blocks_.emplace(job.job, std::move(blocks));
    if (granularity_ == TransferGranularity::kRequest) submit(job, Direction::kLoad);
  }
  if (granularity_ == TransferGranularity::kRequest) {
    if (!loads_in_step_ || loads.empty()) return;
    std::vector<JobId> ids;
    ids.reserve(loads.size());
    for (const TransferJob* job : loads) ids.push_back(job->job);
    // F10: the forward pass enqueued next reads the loaded blocks only after their copies ended.
    if (!engine_->fence_compute(ids) && fail_stop_reason_.empty()) {
      fail_stop_reason_ = "a load could not be fenced before the forward pass";
    }
    return;
  }

  // Layer-wise: every load's layer 0, then every load's layer 1, …: the layers the forward
  // pass needs first land first.
  for (auto& group : layer_loads_) {
    for (auto& parts : group) parts.clear();  // waits the last step did not ask for
  }
  for (const TransferJob* job : loads) register_layered(*job, Direction::kLoad);
  const uint32_t most_layers = layers_.empty() ? 0 : std::ranges::max(layers_);
  for (uint32_t l = 0; l < most_layers; ++l) {
    for (const TransferJob* job : loads) {
      for (uint32_t g = 0; g < groups_; ++g) {
        if (l >= layers_[g]) continue;
        if (JobId part = submit_part(*job, Direction::kLoad, {g, l})) {
          layer_loads_[g][l].push_back(part);
        }
      }
    }
  }
  for (const TransferJob* job : stores) {
    register_layered(*job, Direction::kStore);
    layer_stores_.push_back(LayeredStore{.job = *job, .saved = {}});
    for (uint32_t layers : layers_) layer_stores_.back().saved.emplace_back(layers, false);
  }
}

void LocalWorkerConnector::wait_for_layer_load(KvLayer layer) {
  if (granularity_ != TransferGranularity::kLayer) return;
  std::vector<JobId>& parts = layer_loads_.at(layer.group).at(layer.layer);
  // F10: the compute enqueued from here on reads this layer only after its copies ended.
  if (!parts.empty() && !engine_->fence_compute(parts) && fail_stop_reason_.empty()) {
    fail_stop_reason_ = "a layer's load could not be fenced before its attention";
  }
  parts.clear();
}

void LocalWorkerConnector::save_layer_of(LayeredStore& store, KvLayer layer) {
  if (store.saved.at(layer.group).at(layer.layer)) return;
  store.saved[layer.group][layer.layer] = true;
  // F10: TransferEngine::submit fences the part behind the compute enqueued so far, which
  // wrote this layer.
  submit_part(store.job, Direction::kStore, layer);
}

void LocalWorkerConnector::save_layer(KvLayer layer) {
  if (granularity_ != TransferGranularity::kLayer) return;
  for (LayeredStore& store : layer_stores_) save_layer_of(store, layer);
}

void LocalWorkerConnector::queue_stores(const StepMetadata& metadata) {
  if (granularity_ == TransferGranularity::kLayer) {
    // The layers the engine did not save: after the whole forward pass was enqueued.
    for (LayeredStore& store : layer_stores_) {
      for (uint32_t g = 0; g < groups_; ++g) {
        for (uint32_t l = 0; l < layers_[g]; ++l) save_layer_of(store, {g, l});
      }
    }
    layer_stores_.clear();
    return;
  }
  if (!engine_)
    throw std::logic_error("LocalWorkerConnector: queue_stores before register_kv_caches");
  check_ids({}, metadata.stores);
  std::string refusal;
  for (const TransferJob* job : accept(metadata.stores, Direction::kStore, refusal)) {
    queued_stores_.push_back(*job);
  }
  if (!refusal.empty()) throw std::invalid_argument(refusal);
}

void LocalWorkerConnector::flush(std::span<const JobId> jobs) {
  if (!engine_) throw std::logic_error("LocalWorkerConnector: flush before register_kv_caches");
  // Stores queued last step read KV the previous forward pass wrote; the TransferEngine fences
  // them behind that compute (F10), so they go now, before this step's compute is enqueued.
  // One that raises (F2) is not submitted again: the ones after it stay queued.
  std::vector<TransferJob> stores = std::exchange(queued_stores_, {});
  for (size_t i = 0; i < stores.size(); ++i) {
    try {
      submit(stores[i], Direction::kStore);
    } catch (...) {
      queued_stores_.assign(stores.begin() + static_cast<std::ptrdiff_t>(i) + 1, stores.end());
      throw;
    }
  }
  // Layer-wise, the TransferEngine knows a job by its parts.
  std::vector<JobId> parts;
  if (granularity_ == TransferGranularity::kLayer) {
    for (JobId job : jobs) {
      if (auto it = layered_.find(job); it != layered_.end()) {
        parts.insert(parts.end(), it->second.parts.begin(), it->second.parts.end());
      }
    }
    jobs = parts;
  }
  if (!jobs.empty() && !engine_->fence_compute(jobs) && fail_stop_reason_.empty()) {
    fail_stop_reason_ = "a store reading reallocated blocks could not be fenced";
  }
}

void LocalWorkerConnector::add_verdict(JobId job, Direction direction, Outcome outcome,
                                       std::string error) {
  if (direction == Direction::kLoad) {
    auto it = load_blocks_.find(job);
    if (outcome != Outcome::kCompleted) {
      // F4: the load's destination blocks hold unknown bytes, in every group (layer-wise: a
      // failed layer leaves the blocks, which hold every layer, unusable).
      for (size_t g = 0; g < groups_; ++g) {
        invalid_[g].insert(invalid_[g].end(), it->second[g].begin(), it->second[g].end());
      }
    }
    load_blocks_.erase(it);
  }
  if (outcome == Outcome::kUnprovable && fail_stop_reason_.empty()) {
    fail_stop_reason_ = std::string(to_string(direction)) + " job " + std::to_string(job) +
                        " is unprovable: " + error;
  }
  finished_.push_back(JobVerdict{job, outcome, std::move(error)});
}

namespace {

int severity(Outcome o) {
  return o == Outcome::kCompleted ? 0 : o == Outcome::kFailed ? 1 : 2;
}

}  // namespace

void LocalWorkerConnector::collect() {
  if (!engine_) return;
  for (TransferResult& r : engine_->poll()) {
    if (granularity_ == TransferGranularity::kRequest) {
      add_verdict(r.job, r.direction, r.outcome, std::move(r.error));
      continue;
    }
    // Layer-wise: r is one layer of a job; the job's verdict waits for all of them (F5 keeps
    // the jobs' order: a job's last part is reported after every part of an earlier job).
    auto part = part_of_.find(r.job);
    const JobId job = part->second;
    part_of_.erase(part);
    LayeredJob& layered = layered_.at(job);
    if (severity(r.outcome) > severity(layered.outcome)) {
      // F4: one layer that did not complete decides the job.
      layered.outcome = r.outcome;
      layered.error = std::move(r.error);
    }
    if (r.outcome == Outcome::kUnprovable && fail_stop_reason_.empty()) {
      fail_stop_reason_ = std::string(to_string(r.direction)) + " job " + std::to_string(job) +
                          ": a layer is unprovable: " + layered.error;
    }
    if (--layered.parts_left > 0) continue;
    const Outcome outcome = layered.outcome;
    std::string error = std::move(layered.error);
    layered_.erase(job);
    add_verdict(job, r.direction, outcome, std::move(error));
  }
}

std::vector<JobVerdict> LocalWorkerConnector::get_finished() {
  collect();
  return std::exchange(finished_, {});
}

GroupBlocks LocalWorkerConnector::get_invalid_blocks() {
  collect();
  return std::exchange(invalid_, GroupBlocks(groups_));
}

WorkerOutput LocalWorkerConnector::take_output() {
  collect();
  WorkerOutput out{.rank = rank_};
  out.finished = std::exchange(finished_, {});
  out.invalid_blocks = std::exchange(invalid_, GroupBlocks(groups_));
  out.fail_stop = fail_stopped();
  out.fail_stop_reason = fail_stop_reason_;
  if (out.fail_stop && out.fail_stop_reason.empty())
    out.fail_stop_reason = "transfer engine fail-stopped";
  return out;
}

size_t LocalWorkerConnector::in_flight() const {
  if (granularity_ == TransferGranularity::kLayer) return layered_.size();
  return queued_stores_.size() + (engine_ ? engine_->in_flight() : 0);
}

Status LocalWorkerConnector::audit() const {
  if (!queued_stores_.empty()) {
    return make_error(ErrorCode::kFailedPrecondition,
                      "worker audit: " + std::to_string(queued_stores_.size()) + " stores queued");
  }
  if (!layered_.empty() || !part_of_.empty()) {
    return make_error(ErrorCode::kFailedPrecondition,
                      "worker audit: " + std::to_string(layered_.size()) + " layer-wise jobs, " +
                          std::to_string(part_of_.size()) + " layer parts in flight");
  }
  return engine_ ? engine_->audit() : Status{};
}

}  // namespace kvtier
