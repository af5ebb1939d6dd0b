#include "kvtier/connector/remote_worker_connector.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <unordered_set>
#include <utility>

namespace kvtier {
namespace {

constexpr uint32_t kScratchChunks = 8;  // per group: loads starting inside a chunk at once

}  // namespace

RemoteWorkerConnector::RemoteWorkerConnector(uint32_t rank, const KvLayout& layout,
                                             uint32_t device_blocks, const Config& config,
                                             std::function<void()> while_waiting)
    : rank_(rank),
      layout_(layout),
      device_blocks_(device_blocks),
      request_timeout_(seconds_to_duration(config.server.request_timeout_s)),
      loads_end_in_step_(config.connector.load_in_step),
      while_waiting_(std::move(while_waiting)),
      wait_tick_(seconds_to_duration(config.engine.heartbeat_interval_s)) {
  const uint32_t blocks = device_blocks + kScratchChunks * layout.max_blocks_per_chunk();
  arena_ = std::make_unique<SharedKvArena>(layout, blocks, "rank" + std::to_string(rank));
  caches_ = arena_->addresses(device_blocks);
  all_ = arena_->addresses(blocks);
  scratch_busy_.assign(layout.groups.size(), std::vector<bool>(kScratchChunks, false));
  invalid_.resize(layout.groups.size());
  client_ = std::make_unique<server::CacheClient>(server::ClientOptions::from_config(config),
                                                  arena_->registration(rank));
}

RemoteWorkerConnector::~RemoteWorkerConnector() {
  // The client resolves what is outstanding and goes first; the server may still hold a
  // mapping of the arena (F7 retention) — unlinking the name does not unmap its copy.
  client_.reset();
}

void RemoteWorkerConnector::copy_block(uint32_t group, uint32_t from, uint32_t to) {
  const size_t bytes = layout_.tensor_block_bytes(group);
  for (DeviceAddress base : all_.groups.at(group).bases) {
    auto* p = reinterpret_cast<std::byte*>(base);
    std::memcpy(p + size_t{to} * bytes, p + size_t{from} * bytes, bytes);
  }
}

uint32_t RemoteWorkerConnector::scratch_block(uint32_t group, uint32_t scratch, uint32_t i) const {
  return device_blocks_ + scratch * layout_.groups[group].blocks_per_chunk + i;
}

std::optional<uint32_t> RemoteWorkerConnector::take_scratch(uint32_t group) {
  std::vector<bool>& busy = scratch_busy_[group];
  for (uint32_t s = 0; s < busy.size(); ++s) {
    if (!busy[s]) {
      busy[s] = true;
      return s;
    }
  }
  return std::nullopt;
}

void RemoteWorkerConnector::check_ids(std::span<const TransferJob> jobs) const {
  std::unordered_set<JobId> ids;
  for (const TransferJob& job : jobs) {
    if (!ids.insert(job.job).second || jobs_.contains(job.job)) {
      throw std::invalid_argument("RemoteWorkerConnector: job " + std::to_string(job.job) +
                                  " is given twice or still in flight");
    }
  }
}

void RemoteWorkerConnector::submit(const TransferJob& transfer, Direction direction,
                                   std::string& refusal) {
  Job job{.direction = direction};
  job.blocks.resize(layout_.groups.size());
  try {
    // Past this rank's blocks, a copy would land in the scratch chunks or another tensor (the
    // arena holds both), or past the arena in a scratch load's copy: refused, with a Failed
    // verdict (a load's blocks that exist reported invalid: F4).
    if (transfer.keys.size() != transfer.chunks.size()) {
      throw std::invalid_argument("it carries " + std::to_string(transfer.keys.size()) +
                                  " chunk keys for " + std::to_string(transfer.chunks.size()) +
                                  " chunks");
    }
    check_chunk_transfers(layout_, caches_, HostSlots{.num_slots = UINT32_MAX}, transfer.chunks);
  } catch (const std::invalid_argument& e) {
    job.failed_now = std::string(to_string(direction)) + " job " + std::to_string(transfer.job) +
                     " refused: " + e.what();
    for (const ChunkTransfer& c : transfer.chunks) {
      if (c.group < job.blocks.size()) {
        job.blocks[c.group].insert(job.blocks[c.group].end(), c.blocks.begin(), c.blocks.end());
      }
    }
    if (refusal.empty()) refusal = "RemoteWorkerConnector: " + job.failed_now;
    jobs_.emplace(transfer.job, std::move(job));
    return;
  }
  // Per group: the rank's keys and the chunks' blocks of one request.
  std::vector<std::vector<ChunkKey>> keys(layout_.groups.size());
  std::vector<std::vector<std::vector<uint32_t>>> blocks(layout_.groups.size());
  for (size_t i = 0; i < transfer.chunks.size() && job.failed_now.empty(); ++i) {
    const ChunkTransfer& c = transfer.chunks[i];
    const ChunkKey key = rank_key(transfer.keys[i], rank_);
    job.blocks[c.group].insert(job.blocks[c.group].end(), c.blocks.begin(), c.blocks.end());
    if (c.first_block == 0) {
      keys[c.group].push_back(key);
      blocks[c.group].push_back(c.blocks);
      continue;
    }
    // A load that starts inside the chunk: the whole chunk goes to scratch.
    const std::optional<uint32_t> scratch = take_scratch(c.group);
    if (!scratch) {
      job.failed_now = "no scratch chunk free for a load that starts inside a chunk";
      continue;
    }
    std::vector<uint32_t> whole;
    whole.reserve(layout_.groups[c.group].blocks_per_chunk);
    for (uint32_t b = 0; b < layout_.groups[c.group].blocks_per_chunk; ++b) {
      whole.push_back(scratch_block(c.group, *scratch, b));
    }
    job.copies.push_back(ScratchCopy{
        .group = c.group, .scratch = *scratch, .first_block = c.first_block, .to = c.blocks});
    job.parts.push_back(
        client_->retrieve(transfer.job, c.group, {key}, {std::move(whole)}, 0, load_hook_));
  }
  for (uint32_t g = 0; g < layout_.groups.size() && job.failed_now.empty(); ++g) {
    if (keys[g].empty()) continue;
    job.parts.push_back(
        direction == Direction::kStore
            ? client_->store(transfer.job, g, std::move(keys[g]), std::move(blocks[g]), store_hook_)
            : client_->retrieve(transfer.job, g, std::move(keys[g]), std::move(blocks[g]), 0,
                                load_hook_));
  }
  jobs_.emplace(transfer.job, std::move(job));
}

void RemoteWorkerConnector::start_load(const StepMetadata& metadata) {
  check_ids(metadata.loads);  // before anything is done
  // F10: the stores named read blocks that this step's forward pass may write.
  for (JobId id : metadata.flush) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.direction != Direction::kStore) continue;
    for (auto& part : it->second.parts) wait(part);
  }
  std::string refusal;
  for (const TransferJob& t : metadata.loads) submit(t, Direction::kLoad, refusal);
  if (!loads_end_in_step_) {
    if (!refusal.empty()) throw std::invalid_argument(refusal);
    return;
  }
  // The engine computes these loads' requests in this step: their blocks hold the bytes (or the
  // verdict says they do not) before the forward pass is enqueued.
  for (const TransferJob& t : metadata.loads) {
    auto it = jobs_.find(t.job);
    for (auto& part : it->second.parts) wait(part);
    finish(it->first, it->second);
    jobs_.erase(it);
  }
  if (!refusal.empty()) throw std::invalid_argument(refusal);
}

void RemoteWorkerConnector::queue_stores(const StepMetadata& metadata) {
  check_ids(metadata.stores);
  std::string refusal;
  for (const TransferJob& t : metadata.stores) submit(t, Direction::kStore, refusal);
  if (!refusal.empty()) throw std::invalid_argument(refusal);
}

void RemoteWorkerConnector::finish(JobId id, Job& job) {
  Outcome outcome = Outcome::kCompleted;
  std::string error = job.failed_now;
  if (!error.empty()) outcome = Outcome::kFailed;
  for (auto& part : job.parts) {
    const TransferResult r = part.get();
    if (r.outcome == Outcome::kUnprovable) {
      outcome = Outcome::kUnprovable;
    } else if (r.outcome != Outcome::kCompleted && outcome == Outcome::kCompleted) {
      outcome = Outcome::kFailed;
    }
    if (r.outcome != Outcome::kCompleted && error.empty()) error = r.error;
  }
  for (const ScratchCopy& c : job.copies) {
    if (outcome == Outcome::kCompleted) {
      for (size_t i = 0; i < c.to.size(); ++i) {
        copy_block(c.group,
                   scratch_block(c.group, c.scratch, c.first_block + static_cast<uint32_t>(i)),
                   c.to[i]);
      }
    }
    // F7: a server copy may still write an Unprovable load's scratch: never reuse it.
    if (outcome != Outcome::kUnprovable) {
      scratch_busy_[c.group][c.scratch] = false;
    } else {
      ++scratch_retained_;
    }
  }
  if (outcome == Outcome::kUnprovable && fail_stop_reason_.empty()) {
    fail_stop_reason_ = "job " + std::to_string(id) + " is unprovable: " + error;
  }
  if (job.direction == Direction::kLoad && outcome != Outcome::kCompleted) {
    for (size_t g = 0; g < job.blocks.size(); ++g) {
      invalid_[g].insert(invalid_[g].end(), job.blocks[g].begin(), job.blocks[g].end());  // F4
    }
  }
  finished_.push_back(JobVerdict{
      .job = id, .outcome = outcome, .error = outcome == Outcome::kCompleted ? "" : error});
}

// A part resolves by its deadline (F8); until then the worker hears from us.
void RemoteWorkerConnector::wait(std::future<TransferResult>& part) {
  while (part.wait_for(wait_tick_) != std::future_status::ready) {
    if (while_waiting_) while_waiting_();
  }
}

void RemoteWorkerConnector::collect() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const bool ready = std::ranges::all_of(it->second.parts, [](auto& f) {
      return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
    if (!ready) {
      ++it;
      continue;
    }
    finish(it->first, it->second);
    it = jobs_.erase(it);
  }
}

WorkerOutput RemoteWorkerConnector::take_output() {
  collect();
  WorkerOutput out{.rank = rank_};
  out.finished = std::move(finished_);
  finished_.clear();
  out.invalid_blocks = std::move(invalid_);
  invalid_.assign(layout_.groups.size(), {});
  out.fail_stop = fail_stopped();
  out.fail_stop_reason = !fail_stop_reason_.empty() ? fail_stop_reason_
                         : out.fail_stop            ? "cache server client fail-stopped"
                                                    : "";
  return out;
}

bool RemoteWorkerConnector::fail_stopped() const {
  return client_->fail_stopped() || !fail_stop_reason_.empty();
}

Status RemoteWorkerConnector::audit() const {
  if (!jobs_.empty()) {
    return make_error(ErrorCode::kFailedPrecondition,
                      "remote worker audit: " + std::to_string(jobs_.size()) + " jobs in flight");
  }
  size_t busy = 0;
  for (const auto& group : scratch_busy_)
    busy += static_cast<size_t>(std::ranges::count(group, true));
  if (busy != scratch_retained_) {
    return make_error(ErrorCode::kInternal,
                      "remote worker audit: " + std::to_string(busy) + " scratch chunks busy, " +
                          std::to_string(scratch_retained_) + " retained by Unprovable loads");
  }
  // kvtierd's side: its cache is consistent, and every request of this rank was answered
  // (an Unprovable one may still copy there, F7).
  std::future<Result<server::Reply>> reply = client_->stats();
  if (reply.wait_for(request_timeout_) != std::future_status::ready) {
    return make_error(ErrorCode::kUnavailable, "remote worker audit: kvtierd sent no STATS");
  }
  const Result<server::Reply> stats = reply.get();
  if (!stats) {
    return make_error(ErrorCode::kUnavailable,
                      "remote worker audit: kvtierd STATS: " + stats.error().message);
  }
  if (stats->field("cache_audit_ok") != 1) {
    return make_error(ErrorCode::kInternal, "remote worker audit: kvtierd's cache audit failed");
  }
  const uint64_t in_flight = stats->field("client_transfers_in_flight");
  if (in_flight != 0 && !fail_stopped()) {
    return make_error(ErrorCode::kInternal,
                      "remote worker audit: no job in flight, but kvtierd has " +
                          std::to_string(in_flight) + " transfers of this rank in flight");
  }
  return {};
}

}  // namespace kvtier
