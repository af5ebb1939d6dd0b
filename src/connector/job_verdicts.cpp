// SchedulerConnector, second half: the ranks' verdicts. Aggregation across ranks (F9), job
// deadlines (F8), and what a finished job does to the cache and its request (F3, F4, F7).
#include <algorithm>

#include "kvtier/connector/scheduler_connector.h"
#include "request_state.h"

namespace kvtier {

StepOutcome SchedulerConnector::update_from_worker_output(std::span<const WorkerOutput> outputs) {
  // Bad arguments before anything changes (F2): verdicts applied and then lost with a throw
  // would leave their requests waiting for good.
  for (const WorkerOutput& o : outputs) {
    if (o.rank >= options_.world_size) {
      throw std::invalid_argument("worker output from rank " + std::to_string(o.rank) +
                                  ", world_size is " + std::to_string(options_.world_size));
    }
  }
  // F8: the stores built for the step these outputs end were sent (or go at the next step's
  // start): their time counts from now.
  const TimePoint now = clock_.now();
  for (JobId id : stores_unsent_) {
    if (auto it = jobs_.find(id); it != jobs_.end()) it->second->created = now;
  }
  stores_unsent_.clear();
  StepOutcome out;
  // Loads that never started (update_state_after_alloc) end here.
  out.loads = std::move(resumed_);
  resumed_.clear();
  for (const LoadFinished& l : out.loads) {
    if (auto it = requests_.find(l.request); it != requests_.end()) {
      it->second->load.reset();
      maybe_release(*it->second, out);
    }
  }
  for (const WorkerOutput& o : outputs) {
    if (o.fail_stop) {
      fail_stop("rank " + std::to_string(o.rank) + ": " + o.fail_stop_reason, out);
    }
    // F4: invalid blocks first, so that a load retired below sees all of them. A failure
    // path: the loads in flight are searched.
    for (size_t g = 0; g < o.invalid_blocks.size() && g < store_reading_.size(); ++g) {
      for (uint32_t b : o.invalid_blocks[g]) {
        for (auto& [id, job] : jobs_) {
          if (job->kind == JobKind::kLoad &&
              std::ranges::find(job->blocks[g], b) != job->blocks[g].end()) {
            job->invalid[g].push_back(b);
            break;
          }
        }
      }
    }
    for (const JobVerdict& v : o.finished) ack(v.job, o.rank, v.outcome, out);
  }
  // F8: a job not complete by its deadline plus the completion margin is Unprovable.
  while (const std::optional<std::string> late = overdue_job()) {
    Job& job = *jobs_.begin()->second;
    job.unprovable = true;
    ++counters_.jobs_timed_out;
    fail_stop(*late, out);
    retire(job, out);
  }
  out.fail_stop = fail_stopped();
  return out;
}

std::optional<std::string> SchedulerConnector::overdue_job() const {
  if (jobs_.empty()) return std::nullopt;
  const Job& job = *jobs_.begin()->second;
  if (job.created + options_.job_timeout > clock_.now()) return std::nullopt;
  return "job " + std::to_string(job.id) + " of request " + job.request +
         " not complete after transfer_deadline_s + completion_margin_s";
}

void SchedulerConnector::ack(JobId id, uint32_t rank, Outcome outcome, StepOutcome& out) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second->acked[rank]) {
    ++counters_.stale_acks;  // F9: retired, timed out, or a repeat
    return;
  }
  Job& job = *it->second;
  job.acked[rank] = true;
  ++job.acks;
  job.failed = job.failed || outcome != Outcome::kCompleted;
  job.unprovable = job.unprovable || outcome == Outcome::kUnprovable;
  if (job.acks == options_.world_size) retire(job, out);
}

size_t SchedulerConnector::truncate_load(const Job& job) const {
  size_t tokens = job.to_tokens;
  bool any_invalid = false;
  for (size_t g = 0; g < job.invalid.size(); ++g) {
    for (uint32_t b : job.invalid[g]) {
      const auto pos = std::ranges::find(job.blocks[g], b) - job.blocks[g].begin();
      const size_t index = job.first_index[g] + static_cast<size_t>(pos);
      tokens = std::min(tokens, index * options_.layout.groups[g].block_size);
      any_invalid = true;
    }
  }
  // A failed load that no rank described: none of its blocks can be trusted.
  if (!any_invalid) tokens = job.from_tokens;
  return std::max(tokens, job.from_tokens);
}

void SchedulerConnector::retire(Job& job, StepOutcome& out) {
  auto rit = requests_.find(job.request);
  RequestState* r = rit == requests_.end() ? nullptr : rit->second.get();
  if (job.unprovable) {
    ++counters_.jobs_unprovable;
    fail_stop("job " + std::to_string(job.id) + " of request " + job.request + " is unprovable",
              out);
  }
  if (job.kind == JobKind::kStore) {
    if (job.unprovable) {
      cache_.quarantine_store(job.keys);  // F7
      if (r) r->blocks_quarantined = true;
    } else if (job.failed || job.epoch != epoch_) {
      cache_.complete_store(job.keys, Verdict::kFailed);  // F3 (or dropped by a reset)
      if (job.failed) ++counters_.stores_failed;
    } else {
      cache_.complete_store(job.keys, Verdict::kSucceeded);
      ++counters_.stores_completed;
    }
    for (size_t g = 0; g < job.blocks.size(); ++g) {
      for (uint32_t b : job.blocks[g]) {
        auto reading = store_reading_[g].find(b);
        if (reading != store_reading_[g].end() && reading->second == job.id) {
          store_reading_[g].erase(reading);
        }
      }
    }
    if (r) --r->stores_in_flight;
    store_chunks_in_flight_ -= job.keys.size();
  } else {
    LoadFinished done{.request = job.request, .num_computed = job.to_tokens};
    if (job.unprovable) {
      cache_.quarantine_load(job.keys);     // F7: never recompute into these blocks
      if (r) r->blocks_quarantined = true;  // nor hand them back: the copies may still write
      done.outcome = Outcome::kUnprovable;
      done.num_computed = job.from_tokens;
    } else {
      cache_.complete_load(job.keys);
      if (job.failed) {
        done.outcome = Outcome::kFailed;
        done.num_computed = truncate_load(job);  // F4
        ++counters_.loads_failed;
      } else {
        ++counters_.loads_completed;
      }
      counters_.loaded_tokens += done.num_computed - job.from_tokens;
    }
    for (const ChunkKey& k : job.keys) {
      auto it = being_loaded_.find(k);
      if (--it->second == 0) being_loaded_.erase(it);
    }
    if (r) r->load.reset();
    out.loads.push_back(std::move(done));
  }
  jobs_.erase(job.id);
  if (r) maybe_release(*r, out);
}

void SchedulerConnector::maybe_release(RequestState& r, StepOutcome& out) {
  if (!r.finished || r.load || r.stores_in_flight > 0 || r.blocks_quarantined) return;
  out.released.push_back(r.id);
  requests_.erase(r.id);
}

}  // namespace kvtier
