#include "kvtier/engine/engine_scheduler.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

namespace kvtier {

struct EngineScheduler::Request {
  std::string id;
  std::vector<TokenId> tokens;  // prompt, then generated
  size_t prompt = 0;
  size_t max_tokens = 0;
  size_t num_computed = 0;           // tokens whose KV the device holds
  std::vector<uint32_t> blocks;      // device block table (the same ids in every group)
  size_t blocks_given = 0;           // blocks the connector has seen
  std::vector<ChunkKey> block_keys;  // device prefix-cache key of every full block of tokens
  size_t cached_blocks = 0;          // blocks registered in the device prefix cache
  size_t cached_tokens = 0;          // of the prompt, not computed (reported once)
  size_t load_from = 0;              // num_computed when its load started
  size_t load_to = 0;                // and where the load ends
  uint64_t progress_mark = 0;        // most tokens ever computed (H8)
  // Running, but the latest step's token budget ran out on older requests before it: waiting
  // its turn, not stalled (H8's watchdog counts only running time it could have computed in).
  bool passed_over = false;
  bool reported_cache = false;
  bool counted = false;  // in requests_admitted, prompt_tokens and device_hit_tokens (once)
  bool aborted = false;  // ends once its load has ended
  // Layer-wise: computed in its load's step; the result counts once the load completed (F4).
  bool computes_with_load = false;
  std::optional<std::pair<size_t, TokenId>> held;  // tokens computed, token sampled
  State state = State::kWaiting;
};

EngineScheduler::EngineScheduler(const Config& config, const EngineShape& shape,
                                 std::string host_pool_name)
    : config_(config), shape_(shape), blocks_(shape.device_blocks) {
  ConnectorShape connector = connector_shape(shape);
  connector.host_pool_name = std::move(host_pool_name);
  const ConnectorFactory factory(config, std::move(connector));
  side_ = factory.scheduler_side();
  loads_in_step_ = factory.loads_in_step();
}

EngineScheduler::~EngineScheduler() = default;

void EngineScheduler::publish_events(KvEventPublisher* publisher) {
  blocks_.publish_events(publisher, config_.layout.block_size);
  const auto chunk_tokens = static_cast<uint32_t>(shape_.layout.groups.front().chunk_tokens());
  if (side_.cache) side_.cache->publish_events(publisher, std::string(kMediumHost), chunk_tokens);
  if (side_.mover) side_.mover->publish_events(publisher, chunk_tokens);
}

std::optional<RequestUpdate> EngineScheduler::add(std::string id, std::vector<TokenId> prompt,
                                                  size_t max_tokens) {
  auto reject = [&](std::string error) {
    return RequestUpdate{.id = id, .done = true, .error = std::move(error), .rejected = true};
  };
  const std::string lengths = "prompt (" + std::to_string(prompt.size()) +
                              " tokens) + max_tokens (" + std::to_string(max_tokens) + ")";
  if (requests_.contains(id)) return reject("duplicate request id");
  if (prompt.empty() || prompt.size() + max_tokens > shape_.model.max_context) {
    return reject(lengths + " must be within model.max_context (" +
                  std::to_string(shape_.model.max_context) + ")");
  }
  // H8: a request whose KV cannot fit the whole device would wait or thrash forever.
  if (prompt.size() + max_tokens > max_request_tokens(shape_)) {
    return reject(lengths + " exceeds " + std::to_string(max_request_tokens(shape_)) +
                  " tokens, the most one request's KV can span in engine.device_blocks (" +
                  std::to_string(shape_.device_blocks) + " blocks)");
  }
  auto r = std::make_unique<Request>();
  r->id = id;
  r->prompt = prompt.size();
  r->tokens = std::move(prompt);
  r->max_tokens = max_tokens;
  if (side_.connector) {
    // While the step in flight computes, a lower tier can bring up what the device lacks.
    extend_block_keys(*r);
    const size_t usable = (r->tokens.size() - 1) / config_.layout.block_size;
    const size_t device_tokens =
        blocks_.cached_prefix(std::span(r->block_keys).first(usable)) * config_.layout.block_size;
    side_.connector->look_ahead({.id = r->id, .tokens = r->tokens, .num_prompt_tokens = r->prompt},
                                device_tokens);
  }
  waiting_.push_back(r.get());
  requests_.emplace(std::move(id), std::move(r));
  return std::nullopt;
}

void EngineScheduler::abort(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request& r = *it->second;
  // A request with transfers in flight keeps its blocks until they end, and one in the step the
  // workers are computing keeps them (and itself: last_scheduled_ points to it) until the step's
  // results come back; finish_step ends both.
  if (r.state == State::kLoading ||
      std::ranges::find(last_scheduled_, &r) != last_scheduled_.end()) {
    r.aborted = true;
    return;
  }
  if (r.state == State::kFinishing) return;
  finish(r);
}

bool EngineScheduler::has_work() const {
  return !waiting_.empty() || !running_.empty() ||
         (side_.connector && side_.connector->counters().jobs_in_flight > 0);
}

void EngineScheduler::extend_block_keys(Request& r) {
  const size_t bs = config_.layout.block_size;
  while ((r.block_keys.size() + 1) * bs <= r.tokens.size()) {
    const ChunkKey parent =
        r.block_keys.empty() ? namespace_root(device_key_namespace(shape_)) : r.block_keys.back();
    r.block_keys.push_back(
        next_chunk_key(parent, std::span(r.tokens).subspan(r.block_keys.size() * bs, bs)));
  }
}

bool EngineScheduler::ensure_blocks(Request& r, size_t tokens) {
  const size_t bs = config_.layout.block_size;
  while (r.blocks.size() * bs < tokens) {
    std::optional<uint32_t> b = blocks_.allocate();
    if (!b) return false;
    r.blocks.push_back(*b);
  }
  return true;
}

void EngineScheduler::release_blocks(Request& r) {
  blocks_.release_table(r.blocks);
  r.blocks.clear();
  r.blocks_given = 0;
  r.cached_blocks = 0;
}

void EngineScheduler::preempt(Request& r) {
  if (side_.connector) side_.connector->request_preempted(r.id);
  release_blocks(r);
  r.num_computed = 0;
  r.state = State::kWaiting;
  running_.erase(std::ranges::find(running_, &r));
  waiting_.push_front(&r);
  ++counters_.preemptions;
}

void EngineScheduler::schedule(Request& r, size_t& budget, std::vector<Request*>& scheduled,
                               StepInput& input) {
  const size_t n = std::min(r.tokens.size() - r.num_computed, budget);
  if (n == 0) return;
  budget -= n;
  r.passed_over = false;
  GroupBlocks added(shape_.layout.groups.size(),
                    std::vector<uint32_t>(r.blocks.begin() + static_cast<ptrdiff_t>(r.blocks_given),
                                          r.blocks.end()));
  r.blocks_given = r.blocks.size();
  input.requests.push_back(ScheduledRequest{.id = r.id,
                                            .tokens = r.tokens,
                                            .num_prompt_tokens = r.prompt,
                                            .new_blocks = std::move(added),
                                            .num_computed_after_step = r.num_computed + n});
  scheduled.push_back(&r);
  last_counts_.push_back(static_cast<uint32_t>(n));
}

EngineScheduler::Admission EngineScheduler::admit(Request& r, size_t& budget,
                                                  std::vector<Request*>& scheduled,
                                                  StepInput& input) {
  extend_block_keys(r);
  const size_t bs = config_.layout.block_size;
  // The device prefix cache first; at least the last prompt token is computed.
  const size_t usable = (r.tokens.size() - 1) / bs;
  std::vector<uint32_t> hit = blocks_.acquire_cached(std::span(r.block_keys).first(usable));
  const size_t device_tokens = hit.size() * bs;
  auto give_back = [&] { blocks_.release_table(hit); };
  // No room for the whole request, whatever the connector would match (a loaded token needs a
  // block too): the connector is not asked. A lookup of kvtierd's costs a round trip, and the
  // request at the head of the queue is asked again every step until it fits.
  const size_t needed = (r.tokens.size() + bs - 1) / bs;
  if (needed > hit.size() + blocks_.available()) {
    give_back();
    return Admission::kNoRoom;
  }
  Match match;
  if (side_.connector) {
    match = side_.connector->get_num_new_matched_tokens(
        {.id = r.id, .tokens = r.tokens, .num_prompt_tokens = r.prompt}, device_tokens);
  }
  if (match.ask_later) {
    give_back();
    return Admission::kAskLater;
  }
  r.blocks = std::move(hit);
  if (!ensure_blocks(r, r.tokens.size())) {
    release_blocks(r);
    return Admission::kNoRoom;
  }
  r.num_computed = device_tokens;
  r.cached_blocks = device_tokens / bs;
  r.blocks_given = r.blocks.size();
  if (!r.reported_cache) r.cached_tokens = device_tokens + match.tokens;
  if (!r.counted) {  // a request preempted before its first token is admitted again
    r.counted = true;
    counters_.device_hit_tokens += device_tokens;
    counters_.prompt_tokens += r.prompt;
    ++counters_.requests_admitted;
  }
  if (side_.connector) {
    side_.connector->update_state_after_alloc(
        r.id, GroupBlocks(shape_.layout.groups.size(), r.blocks), match.tokens);
  }
  running_.push_back(&r);
  r.progress_mark = std::max<uint64_t>(r.progress_mark, r.num_computed);
  if (match.tokens > 0) {
    r.state = State::kLoading;
    r.load_from = device_tokens;
    r.load_to = device_tokens + match.tokens;
    if (loads_in_step_) {
      // Computed in this step from the load's end, after the load (or each layer after that
      // layer's load); kept only if the load completes (finish_step).
      r.computes_with_load = true;
      r.num_computed = device_tokens + match.tokens;  // where the step starts; see finish_step
      schedule(r, budget, scheduled, input);
    }
    return Admission::kAdmitted;
  }
  r.state = State::kRunning;
  schedule(r, budget, scheduled, input);
  return Admission::kAdmitted;
}

bool EngineScheduler::stalled_by_hook(const Request& r) const {
  return config_.faults.stall_scheduler && r.tokens.size() > r.prompt;
}

StepPlan EngineScheduler::plan_step() {
  StepPlan plan{.step = step_++};
  StepInput input{.step = plan.step};
  std::vector<Request*> scheduled;
  last_counts_.clear();
  size_t budget = config_.engine.max_batched_tokens;
  // Running requests first, oldest first. One that cannot get a block preempts the newest
  // running request not yet scheduled in this step, else itself: a request in this step's batch
  // keeps its blocks (its entry would otherwise go out with an empty block table), and the
  // oldest running request always gets the whole device if it needs it (H8).
  size_t turn = 0;  // running_[turn] is the next running request to schedule
  for (; turn < running_.size() && budget > 0;) {
    Request& r = *running_[turn];
    if (r.state != State::kRunning || stalled_by_hook(r)) {
      r.passed_over = false;  // not for want of budget (a stall hook's stall must be seen)
      ++turn;
      continue;
    }
    const size_t n = std::min(r.tokens.size() - r.num_computed, budget);
    while (!ensure_blocks(r, r.num_computed + n)) {
      auto victim =
          std::find_if(running_.rbegin(), running_.rend() - static_cast<ptrdiff_t>(turn) - 1,
                       [](const Request* v) { return v->state == State::kRunning; });
      if (victim == running_.rend() - static_cast<ptrdiff_t>(turn) - 1) break;
      preempt(**victim);
    }
    if (r.blocks.size() * config_.layout.block_size < r.num_computed + n) {
      preempt(r);  // running_[turn] is now the next request
      continue;
    }
    schedule(r, budget, scheduled, input);
    ++turn;
  }
  // The budget ran out before the rest: they wait their turn (H8's watchdog does not count it).
  for (size_t j = turn; j < running_.size(); ++j) running_[j]->passed_over = true;
  // Then waiting requests in order, while budget and room are left. A request that finds no
  // room stops admission, so later (smaller) requests cannot starve it; one that must ask again
  // later (its chunks are being moved) lets the next one go first.
  for (size_t i = 0; i < waiting_.size() && budget > 0 &&
                     running_.size() < config_.engine.max_running_requests;) {
    Request& r = *waiting_[i];
    const Admission a = admit(r, budget, scheduled, input);
    if (a == Admission::kAdmitted) {
      waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(i));
    } else if (a == Admission::kAskLater) {
      ++i;
    } else {
      break;
    }
  }
  if (side_.connector) plan.metadata = side_.connector->build_step_metadata(input);
  plan.metadata.step = plan.step;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    Request& r = *scheduled[i];
    const size_t n = last_counts_[i];
    plan.batch.push_back(BatchEntry{
        .start = static_cast<uint32_t>(r.num_computed),
        .tokens =
            std::vector<TokenId>(r.tokens.begin() + static_cast<ptrdiff_t>(r.num_computed),
                                 r.tokens.begin() + static_cast<ptrdiff_t>(r.num_computed + n)),
        .table = r.blocks});
  }
  last_scheduled_ = std::move(scheduled);
  ++counters_.steps;
  return plan;
}

void EngineScheduler::cache_computed_blocks(Request& r) {
  extend_block_keys(r);
  const size_t full = std::min(r.num_computed / config_.layout.block_size, r.block_keys.size());
  const size_t bs = config_.layout.block_size;
  for (; r.cached_blocks < full; ++r.cached_blocks) {
    const size_t i = r.cached_blocks;
    blocks_.cache(r.blocks[i], r.block_keys[i],
                  i == 0 ? std::nullopt : std::optional<ChunkKey>(r.block_keys[i - 1]),
                  std::span(r.tokens).subspan(i * bs, bs));
  }
}

void EngineScheduler::computed(Request& r, size_t count, TokenId sampled,
                               std::vector<RequestUpdate>& updates, std::vector<Request*>& done) {
  r.num_computed += count;
  r.progress_mark = std::max<uint64_t>(r.progress_mark, r.num_computed);
  cache_computed_blocks(r);
  if (r.num_computed < r.tokens.size()) return;  // prefill continues next step
  RequestUpdate u{.id = r.id, .prompt_tokens = r.prompt, .cached_tokens = r.cached_tokens};
  r.reported_cache = true;
  r.tokens.push_back(sampled);
  u.new_tokens.push_back(sampled);
  ++counters_.generated_tokens;
  if (r.tokens.size() - r.prompt >= r.max_tokens) {
    u.done = true;
    u.finish_reason = "length";
    done.push_back(&r);
  }
  updates.push_back(std::move(u));
}

void EngineScheduler::finish(Request& r) {
  ++finished_;
  if (auto it = std::ranges::find(running_, &r); it != running_.end()) running_.erase(it);
  if (auto it = std::ranges::find(waiting_, &r); it != waiting_.end()) waiting_.erase(it);
  if (side_.connector && side_.connector->request_finished(r.id)) {
    r.state = State::kFinishing;  // its blocks stay until the connector releases them
    return;
  }
  release_blocks(r);
  requests_.erase(r.id);
}

std::vector<RequestUpdate> EngineScheduler::finish_step(const std::vector<TokenId>& sampled,
                                                        const std::vector<WorkerOutput>& outputs) {
  std::vector<RequestUpdate> updates;
  if (sampled.size() != last_scheduled_.size()) {
    throw std::invalid_argument("finish_step: " + std::to_string(sampled.size()) +
                                " sampled tokens for " + std::to_string(last_scheduled_.size()) +
                                " sequences");
  }
  std::vector<Request*> done;
  std::vector<Request*> aborted;  // during this step: its results are dropped
  for (size_t i = 0; i < last_scheduled_.size(); ++i) {
    Request& r = *last_scheduled_[i];
    if (r.state == State::kLoading && r.computes_with_load) {
      r.held = std::pair{size_t{last_counts_[i]}, sampled[i]};  // until its load's verdict
      continue;
    }
    if (r.state != State::kRunning) continue;  // preempted meanwhile
    if (r.aborted) {
      aborted.push_back(&r);
      continue;
    }
    computed(r, last_counts_[i], sampled[i], updates, done);
  }
  for (Request* r : done) finish(*r);
  done.clear();
  last_scheduled_.clear();
  for (Request* r : aborted) finish(*r);
  if (!side_.connector) return updates;

  const StepOutcome outcome = side_.connector->update_from_worker_output(outputs);
  // Nobody mirrors the cache's contents here: the events are dropped, not left to pile up.
  counters_.cache_events += side_.connector->take_events().size();
  for (const LoadFinished& l : outcome.loads) {
    auto it = requests_.find(l.request);
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    if (l.outcome == Outcome::kUnprovable) continue;  // the engine is failing (F7)
    r.num_computed = l.num_computed;
    r.progress_mark = std::max<uint64_t>(r.progress_mark, r.num_computed);
    counters_.kvtier_hit_tokens += l.num_computed - r.load_from;
    if (l.outcome == Outcome::kFailed) {
      counters_.recomputed_tokens += r.load_to - l.num_computed;
      // F4: the rest is recomputed. A request admitted again after a preemption reported its
      // cached tokens with its first token already: that figure stays.
      if (!r.reported_cache) r.cached_tokens = l.num_computed;
    }
    const auto held = std::exchange(r.held, std::nullopt);
    r.computes_with_load = false;
    if (r.state == State::kLoading) {
      r.state = State::kRunning;
      cache_computed_blocks(r);
      if (r.aborted) {
        finish(r);
        continue;
      }
      // Layer-wise: what the load's step computed from the load's end is kept only when the
      // load completed; otherwise it read unknown KV and is computed again (F4).
      if (held && l.outcome == Outcome::kCompleted && r.num_computed == r.load_to) {
        computed(r, held->first, held->second, updates, done);
      }
    }
  }
  for (Request* r : done) finish(*r);
  for (const RequestId& id : outcome.released) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    release_blocks(*it->second);
    requests_.erase(it);
  }
  return updates;
}

std::vector<RequestUpdate> EngineScheduler::fail_all(const std::string& error) {
  std::vector<RequestUpdate> updates;
  for (auto& [id, r] : requests_) {
    if (r->state != State::kFinishing) updates.push_back({.id = id, .done = true, .error = error});
  }
  waiting_.clear();
  running_.clear();
  return updates;
}

ProgressSnapshot EngineScheduler::progress() const {
  ProgressSnapshot s{
      .finished = finished_,
      .transfers_in_flight = side_.connector && side_.connector->counters().jobs_in_flight > 0};
  for (const auto& [id, r] : requests_) {
    if (r->state == State::kFinishing) continue;
    s.requests.push_back({.id = id,
                          .mark = r->progress_mark,
                          .running = r->state == State::kRunning && !r->passed_over});
  }
  return s;
}

EngineCounters EngineScheduler::counters() const {
  EngineCounters c = counters_;
  c.waiting = waiting_.size();
  c.running = running_.size();
  return c;
}

std::optional<ConnectorCounters> EngineScheduler::connector_counters() const {
  if (!side_.connector) return std::nullopt;
  return side_.connector->counters();
}

std::vector<std::string> EngineScheduler::degraded() const {
  std::vector<std::string> out;
  if (side_.connector) {
    if (auto reason = side_.connector->degraded()) out.push_back(std::move(*reason));
  }
  return out;
}

std::optional<CacheCounters> EngineScheduler::cache_counters() const {
  if (!side_.cache) return std::nullopt;
  return side_.cache->counters();
}

std::optional<TierReport> EngineScheduler::tier_counters() const {
  if (!side_.mover) return std::nullopt;
  return TierReport{.mover = side_.mover->counters(), .tiers = side_.mover->tier_metrics()};
}

}  // namespace kvtier
