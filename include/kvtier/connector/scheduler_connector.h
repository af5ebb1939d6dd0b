// SchedulerConnector: the scheduler side of the engine contract. It drives the host cache's
// index (a CacheManager in-process, or any CacheIndex, e.g. kvtierd's RemoteCacheIndex), decides
// per step which chunks every rank loads and stores, and turns the ranks' per-job verdicts into
// published stores, recomputed loads and released leases. ConnectorFactory
// (connector_factory.h) builds it over the index the config asks for.
//
// Each step the engine's scheduler calls, in order:
//   get_num_new_matched_tokens(request, num_computed)  for a request it considers scheduling
//   update_state_after_alloc(request, blocks, n)       after allocating blocks for it
//   build_step_metadata(step)                          once, with what the step computes
//   update_from_worker_output(outputs)                 with every rank's report of the step
//   request_finished(request)                          for each request that ended
// Loads are asynchronous: a request with a load waits (not computed) until its load is reported
// in StepOutcome::loads, which also says how many tokens it then has (F4).
//
// Contract (rule ids from docs/architecture.md):
// - One counter issues job ids, never reset. A job completes when all world_size ranks
//   acknowledged it; a failure on any rank is sticky, whatever step it came in (F9). Acks for a
//   job that is not in flight (retired, timed out, from before a reset) are ignored.
// - A store publishes its chunks only when every rank completed it; otherwise its slots are
//   freed and nothing is published (F3).
// - A failed load unpins its source slots, its keys leave the being-loaded set, and the request
//   resumes from the first invalid block boundary common to all groups (F4).
// - An Unprovable verdict, a rank's fail-stop, or a job not complete after job_timeout (=
//   transfer_deadline_s + completion_margin_s, F8) quarantines the job's slots and turns
//   fail_stopped() true for good (F7). A load's time counts from its creation; a store's from
//   the first update_from_worker_output after the step that built it: a worker sends a store
//   only after that step's forward pass (or at the next step's start), and the step may first
//   wait up to a deadline for its loads, so a store counted from its creation could be declared
//   late while its own transfer was still within its deadline.
// - A request has one load or some stores in flight, never both. A device block handed to the
//   engine again while a store from it is in flight puts that store in the step's flush set (F10).
//
// Not thread-safe: the engine's scheduler thread calls it.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/cache/cache_manager.h"
#include "kvtier/connector/cache_index.h"
#include "kvtier/connector/step_metadata.h"
#include "kvtier/core/chunk_key.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/config.h"
#include "kvtier/core/kv_layout.h"

namespace kvtier {

struct SchedulerOptions {
  uint32_t world_size = 1;
  KvLayout layout;            // what one rank holds; every rank holds the same shape
  std::string model;          // part of every key's namespace
  bool store_decode = false;  // store chunks of generated tokens too, not only the prompt
  // A chunk is stored only once this many lookups (by any request) asked for it; 1 stores
  // everything a request computes.
  uint32_t store_threshold = 1;
  // Adaptive admission: once this many requests in a row began with no prefix an earlier
  // request had asked for, a chunk is stored only when at least 2 lookups asked for it, until a
  // request reuses a prefix again. 0: store_threshold alone decides.
  uint32_t admission_window = 64;
  // Never block the step on stores: while this many chunks of store jobs are in flight (the
  // store direction is behind), a step's new stores are put off to a later step of their
  // request, and counted. The bound also bounds what a flush (F10) can make compute wait for.
  size_t max_store_chunks_in_flight = 64;
  Duration job_timeout = std::chrono::seconds(40);  // F8: deadline + completion margin
};

// The connector's settings from the config: transfer deadline + completion margin, store policy.
SchedulerOptions scheduler_options(const Config& config, uint32_t world_size, KvLayout layout,
                                   std::string model);

struct ConnectorRequest {
  RequestId id;
  std::span<const TokenId> tokens;  // every token known so far (prompt, then generated)
  size_t num_prompt_tokens = 0;
  std::string cache_salt;  // per-tenant isolation; part of the key namespace
};

struct Match {
  bool ask_later = false;  // a chunk it needs is being stored or loaded: try again next step
  size_t tokens = 0;       // tokens beyond num_computed that a load would provide
};

struct ScheduledRequest {
  RequestId id;
  std::span<const TokenId> tokens;  // every token known so far
  size_t num_prompt_tokens = 0;
  // Blocks appended to the request's block table since the connector last saw it (by
  // update_state_after_alloc or an earlier step), per group.
  GroupBlocks new_blocks;
  size_t num_computed_after_step = 0;  // tokens whose KV is on the device once this step ran
};

struct StepInput {
  uint64_t step = 0;
  std::vector<ScheduledRequest> requests;
};

struct LoadFinished {
  RequestId request;
  size_t num_computed = 0;  // tokens whose KV the request now has; recompute from here
  Outcome outcome = Outcome::kCompleted;
};

struct StepOutcome {
  std::vector<LoadFinished> loads;  // requests whose load ended this step
  // Finished requests whose last transfer ended: the engine may free their blocks now. Never
  // a request an Unprovable store read from (F7).
  std::vector<RequestId> released;
  bool fail_stop = false;  // F7: the engine must turn FAILED
};

struct ConnectorCounters {
  uint64_t jobs_issued = 0;
  uint64_t loads_completed = 0;
  uint64_t loads_failed = 0;
  uint64_t stores_completed = 0;
  uint64_t stores_failed = 0;
  uint64_t jobs_unprovable = 0;
  uint64_t jobs_timed_out = 0;
  uint64_t stale_acks = 0;           // acks for jobs not in flight, ignored (F9)
  uint64_t stores_skipped = 0;       // no room in the host pool
  uint64_t stores_deferred = 0;      // chunk stores put off a step: the store direction was behind
  uint64_t stores_not_admitted = 0;  // chunks not stored: too few lookups asked for them
  uint64_t flushes = 0;              // blocks handed out again while a store read them (F10)
  uint64_t loaded_tokens = 0;
  uint64_t deferred_lookups = 0;  // ask_later answers
  size_t jobs_in_flight = 0;
  uint32_t admission_threshold = 1;  // lookups a chunk needs before it is stored, now
};

class AdmissionPolicy;

class SchedulerConnector {
 public:
  // The in-process host cache; its slots must hold a chunk (std::invalid_argument).
  SchedulerConnector(SchedulerOptions options, CacheManager& cache,
                     const Clock& clock = SteadyClock::instance());
  // Any index; `index` outlives the connector.
  SchedulerConnector(SchedulerOptions options, CacheIndex& index,
                     const Clock& clock = SteadyClock::instance());
  ~SchedulerConnector();
  SchedulerConnector(const SchedulerConnector&) = delete;
  SchedulerConnector& operator=(const SchedulerConnector&) = delete;

  // Tokens beyond `num_computed` (a multiple of every group's block size: the device prefix
  // cache's hit) that the host cache holds for every group, leaving at least the last prompt
  // token to compute. ask_later while a chunk it would need is pending or being loaded.
  Match get_num_new_matched_tokens(const ConnectorRequest& request, size_t num_computed);
  // A hint: the engine will ask get_num_new_matched_tokens(request, num_computed) in a coming
  // step (e.g. the request just arrived and waits for room). An index whose lower tiers hold
  // the chunks starts bringing them up now (CacheIndex::lookup_ahead), so that lookup finds
  // them ready instead of answering ask_later and costing the request a step; kvtierd's index
  // sends the LOOKUP now, while the step in flight computes, so the lookup costs the planning
  // of the step no round trip.
  void look_ahead(const ConnectorRequest& request, size_t num_computed);

  // The engine allocated `blocks` (the request's whole block table so far, per group) and
  // accepts `num_external_tokens` of the last match (0: no load). Creates the load job; one whose
  // chunks left the cache since the match cannot start, and is reported Failed in the next
  // StepOutcome, the request storing nothing until then (F4).
  void update_state_after_alloc(const RequestId& request, const GroupBlocks& blocks,
                                size_t num_external_tokens);

  // The jobs of this step: loads created since the last step, stores of chunks the step
  // completes, and the flush set (F10).
  StepMetadata build_step_metadata(const StepInput& step);

  // Aggregates the ranks' reports (F9) and checks job deadlines (F8).
  StepOutcome update_from_worker_output(std::span<const WorkerOutput> outputs);

  // The request ended. Returns true when a transfer of it is still in flight: the engine keeps
  // its blocks until StepOutcome::released names it. A request an Unprovable store read from,
  // or an Unprovable load wrote to, is never released: its copies may still touch the blocks
  // (F7).
  bool request_finished(const RequestId& request);

  // The engine freed the request's blocks to make room and will compute it again later (from
  // get_num_new_matched_tokens on). Stores in flight keep reading their blocks: a block handed
  // out again before they finished is fenced (F10). A request with a load in flight is waiting,
  // not running, and cannot be preempted: std::logic_error.
  void request_preempted(const RequestId& request);

  // Drops every readable unpinned chunk. Stores in flight are not published when they end.
  // An index that cannot drop its chunks (kvtierd's) returns its error and nothing changes.
  Status reset_cache();

  std::vector<CacheEvent> take_events() { return cache_.take_events(); }
  // H7: the index's reason it is degraded (kvtierd unreachable, a tier down), or nullopt.
  std::optional<std::string> degraded() const { return cache_.degraded(); }
  // F8 between steps: the oldest job in flight, when it is past job_timeout ("job N of request
  // R not complete after ..."), else nullopt. update_from_worker_output fail-stops on such a
  // job; an engine whose step cannot end (its compute fenced behind a load that never
  // completes, F10) must not wait for that step to hear of it.
  std::optional<std::string> overdue_job() const;
  bool fail_stopped() const { return !fail_stop_reason_.empty(); }
  const std::string& fail_stop_reason() const { return fail_stop_reason_; }
  ConnectorCounters counters() const;
  // F12 at quiescence: no job in flight, no key being loaded, and the index's audit.
  Status audit() const;

 private:
  struct RequestState;
  struct Job;

  RequestState& state_of(const RequestId& id, std::span<const TokenId> tokens,
                         const std::string& salt);
  void extend_keys(RequestState& r, std::span<const TokenId> tokens);
  void add_blocks(RequestState& r, const GroupBlocks& blocks, std::vector<JobId>& flush);
  void build_stores(RequestState& r, const ScheduledRequest& s, StepMetadata& meta);
  void ack(JobId id, uint32_t rank, Outcome outcome, StepOutcome& out);
  void retire(Job& job, StepOutcome& out);
  void fail_stop(std::string reason, StepOutcome& out);
  void init();  // validates the options, sizes the per-group state
  void maybe_release(RequestState& r, StepOutcome& out);
  size_t truncate_load(const Job& job) const;

  SchedulerOptions options_;
  std::unique_ptr<LocalCacheIndex> local_index_;  // set by the CacheManager constructor
  CacheIndex& cache_;
  const Clock& clock_;
  size_t align_tokens_ = 0;  // least common multiple of every group's chunk tokens
  JobId next_job_ = 1;
  uint64_t epoch_ = 0;  // reset_cache() count
  std::unordered_map<RequestId, std::unique_ptr<RequestState>> requests_;
  std::map<JobId, std::unique_ptr<Job>> jobs_;  // in flight, oldest first
  std::vector<TransferJob> pending_loads_;      // created since the last step
  std::vector<JobId> stores_unsent_;            // built since the last worker output (F8)
  std::unordered_map<ChunkKey, uint32_t, ChunkKeyHash> being_loaded_;
  std::unique_ptr<AdmissionPolicy> admission_;
  std::vector<JobId> pending_flush_;   // F10, found by update_state_after_alloc
  size_t store_chunks_in_flight_ = 0;  // chunks of the store jobs in jobs_
  std::vector<LoadFinished> resumed_;  // loads that could not start
  // Per group: the device blocks a store job in flight reads, each with the newest such job
  // (F10). A map, not a vector indexed by block: the engine's block ids are not checked here
  // (the scheduler side does not know how many blocks the workers hold).
  std::vector<std::unordered_map<uint32_t, JobId>> store_reading_;
  std::string fail_stop_reason_;
  ConnectorCounters counters_;
};

}  // namespace kvtier
