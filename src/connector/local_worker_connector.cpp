#include "kvtier/connector/local_worker_connector.h"

#include <stdexcept>
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
}

void LocalWorkerConnector::submit(const TransferJob& job, Direction direction) {
  engine_->submit(job.job, direction, job.chunks);
}

void LocalWorkerConnector::start_load(const StepMetadata& metadata) {
  if (!engine_)
    throw std::logic_error("LocalWorkerConnector: start_load before register_kv_caches");
  flush(metadata.flush);
  for (const TransferJob& job : metadata.loads) {
    GroupBlocks blocks(groups_);
    for (const ChunkTransfer& c : job.chunks) {
      blocks.at(c.group).insert(blocks[c.group].end(), c.blocks.begin(), c.blocks.end());
    }
    load_blocks_.emplace(job.job, std::move(blocks));
    submit(job, Direction::kLoad);
  }
}

void LocalWorkerConnector::queue_stores(const StepMetadata& metadata) {
  queued_stores_.insert(queued_stores_.end(), metadata.stores.begin(), metadata.stores.end());
}

void LocalWorkerConnector::flush(std::span<const JobId> jobs) {
  if (!engine_) throw std::logic_error("LocalWorkerConnector: flush before register_kv_caches");
  // Stores queued last step read KV the previous forward pass wrote; the TransferEngine fences
  // them behind that compute (F10), so they go now, before this step's compute is enqueued.
  for (const TransferJob& job : queued_stores_) submit(job, Direction::kStore);
  queued_stores_.clear();
  if (!jobs.empty() && !engine_->fence_compute(jobs) && fail_stop_reason_.empty()) {
    fail_stop_reason_ = "a store reading reallocated blocks could not be fenced";
  }
}

void LocalWorkerConnector::collect() {
  if (!engine_) return;
  for (TransferResult& r : engine_->poll()) {
    if (r.direction == Direction::kLoad) {
      auto it = load_blocks_.find(r.job);
      if (r.outcome != Outcome::kCompleted) {
        // F4: the load's destination blocks hold unknown bytes.
        for (size_t g = 0; g < groups_; ++g) {
          invalid_[g].insert(invalid_[g].end(), it->second[g].begin(), it->second[g].end());
        }
      }
      load_blocks_.erase(it);
    }
    if (r.outcome == Outcome::kUnprovable && fail_stop_reason_.empty()) {
      fail_stop_reason_ = std::string(to_string(r.direction)) + " job " + std::to_string(r.job) +
                          " is unprovable: " + r.error;
    }
    finished_.push_back(JobVerdict{r.job, r.outcome, std::move(r.error)});
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
  return queued_stores_.size() + (engine_ ? engine_->in_flight() : 0);
}

Status LocalWorkerConnector::audit() const {
  if (!queued_stores_.empty()) {
    return make_error(ErrorCode::kFailedPrecondition,
                      "worker audit: " + std::to_string(queued_stores_.size()) + " stores queued");
  }
  return engine_ ? engine_->audit() : Status{};
}

}  // namespace kvtier
