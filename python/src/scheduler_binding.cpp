// kvtier.Scheduler: the connector's scheduler side (SchedulerConnector over the index the config
// asks for: an in-process host cache, or kvtierd), and kvtier.StepMetadata, what it hands the
// workers each step. Every call releases the GIL while kvtier works (a kvtierd lookup waits on
// the network); one lock serializes callers from several Python threads.
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"

namespace kvtier::python {
namespace {

py::list jobs_list(const std::vector<TransferJob>& jobs) {
  py::list out;
  for (const TransferJob& j : jobs) {
    py::list chunks;
    for (const ChunkTransfer& c : j.chunks) {
      chunks.append(types().chunk_transfer(c.group, py::cast(c.blocks), c.slot, c.first_block));
    }
    out.append(types().transfer_job(j.job, j.request, chunks));
  }
  return out;
}

class Scheduler {
 public:
  Scheduler(const Config& config, const std::string& model, uint32_t world_size,
            std::optional<uint32_t> host_slots) {
    if (!config.connector.enabled) {
      throw KvError(ErrorCode::kFailedPrecondition,
                    "connector.enabled is false: there is no scheduler side (run the engine "
                    "without kvtier)");
    }
    layout_ = config.kv_layout();
    const ConnectorShape shape{.world_size = world_size,
                               .layout = layout_,
                               .model = model,
                               .host_slots = host_slots ? *host_slots : default_host_slots(config)};
    py::gil_scoped_release release;  // a kvtierd index connects
    side_ = ConnectorFactory(config, shape).scheduler_side();
  }

  py::object match(const std::string& id, py::handle tokens_in, size_t num_computed,
                   std::optional<size_t> num_prompt_tokens, const std::string& salt) {
    const std::vector<TokenId> tokens = to_tokens(tokens_in, "tokens");
    Match m;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mu_);
      m = connector().get_num_new_matched_tokens(
          ConnectorRequest{.id = id,
                           .tokens = tokens,
                           .num_prompt_tokens = num_prompt_tokens.value_or(tokens.size()),
                           .cache_salt = salt},
          num_computed);
    }
    return types().match(m.tokens, m.ask_later);
  }

  void after_alloc(const std::string& id, py::handle blocks_in, size_t num_external_tokens) {
    const GroupBlocks blocks = to_group_blocks(blocks_in, layout_.groups.size(), "blocks");
    py::gil_scoped_release release;
    std::lock_guard lock(mu_);
    connector().update_state_after_alloc(id, blocks, num_external_tokens);
  }

  std::shared_ptr<StepMetadata> build(uint64_t step, py::iterable requests) {
    // The token lists outlive the call: ScheduledRequest holds spans.
    std::vector<std::vector<TokenId>> tokens;
    std::vector<ScheduledRequest> scheduled;
    for (py::handle r : requests) {
      try {
        tokens.push_back(to_tokens(r.attr("tokens"), "ScheduledRequest.tokens"));
        scheduled.push_back(ScheduledRequest{
            .id = r.attr("id").cast<std::string>(),
            .num_prompt_tokens = r.attr("num_prompt_tokens").cast<size_t>(),
            .new_blocks = to_group_blocks(r.attr("new_blocks"), layout_.groups.size(),
                                          "ScheduledRequest.new_blocks"),
            .num_computed_after_step = r.attr("num_computed_after_step").cast<size_t>()});
      } catch (const py::error_already_set& e) {
        throw KvError(
            ErrorCode::kInvalidArgument,
            std::string("requests: expected kvtier.ScheduledRequest values (") + e.what() + ")");
      } catch (const py::cast_error& e) {
        throw KvError(
            ErrorCode::kInvalidArgument,
            std::string("requests: expected kvtier.ScheduledRequest values (") + e.what() + ")");
      }
    }
    for (size_t i = 0; i < scheduled.size(); ++i) scheduled[i].tokens = tokens[i];
    auto meta = std::make_shared<StepMetadata>();
    py::gil_scoped_release release;
    std::lock_guard lock(mu_);
    *meta = connector().build_step_metadata(StepInput{.step = step, .requests = scheduled});
    return meta;
  }

  py::object update(py::iterable outputs_in) {
    std::vector<WorkerOutput> outputs;
    for (py::handle o : outputs_in) outputs.push_back(to_worker_output(o));
    StepOutcome out;
    std::string reason;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mu_);
      out = connector().update_from_worker_output(outputs);
      if (out.fail_stop || connector().fail_stopped()) reason = connector().fail_stop_reason();
    }
    if (!reason.empty() || out.fail_stop) {
      throw FailStopError(reason.empty() ? "fail-stop" : reason);
    }
    py::list loads;
    for (const LoadFinished& l : out.loads) {
      loads.append(
          types().load_finished(l.request, l.num_computed, std::string(to_string(l.outcome))));
    }
    return types().step_outcome(loads, py::cast(out.released));
  }

  bool finished(const std::string& id) {
    py::gil_scoped_release release;
    std::lock_guard lock(mu_);
    return connector().request_finished(id);
  }

  void preempted(const std::string& id) {
    py::gil_scoped_release release;
    std::lock_guard lock(mu_);
    try {
      connector().request_preempted(id);
    } catch (const std::logic_error& e) {
      throw KvError(ErrorCode::kFailedPrecondition, e.what());
    }
  }

  void reset_cache() {
    Status s;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mu_);
      s = connector().reset_cache();
    }
    check(s);
  }

  py::list take_events() {
    std::vector<CacheEvent> events;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mu_);
      events = connector().take_events();
    }
    py::list out;
    for (const CacheEvent& e : events) {
      py::list keys;
      for (const ChunkKey& k : e.keys) keys.append(k.hex());
      out.append(py::make_tuple(e.kind == CacheEventKind::kStored ? "stored" : "removed", keys));
    }
    return out;
  }

  std::optional<std::string> degraded() {
    py::gil_scoped_release release;
    std::lock_guard lock(mu_);
    return connector().degraded();
  }
  bool fail_stopped() {
    py::gil_scoped_release release;  // another thread may hold the lock across a long call
    std::lock_guard lock(mu_);
    return connector().fail_stopped();
  }
  std::string fail_stop_reason() {
    py::gil_scoped_release release;
    std::lock_guard lock(mu_);
    return connector().fail_stop_reason();
  }
  py::dict counters() {
    ConnectorCounters c;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mu_);
      c = connector().counters();
    }
    return counters_dict(c);
  }
  py::object cache_counters() {
    if (!side_.cache) return py::none();
    CacheCounters c;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mu_);
      c = side_.cache->counters();
    }
    return counters_dict(c);
  }
  void audit() {
    Status s;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mu_);
      s = connector().audit();
    }
    check(s);
  }
  const KvLayout& layout() const { return layout_; }

 private:
  SchedulerConnector& connector() { return *side_.connector; }

  std::mutex mu_;
  KvLayout layout_;
  SchedulerSide side_;
};

}  // namespace

uint32_t default_host_slots(const Config& config) {
  const size_t chunk = config.kv_layout().max_chunk_bytes();
  const uint64_t slots = chunk == 0 ? 0 : config.cache.host_bytes / chunk;
  if (slots == 0) {
    throw KvError(ErrorCode::kInvalidArgument,
                  "cache.host_bytes (" + std::to_string(config.cache.host_bytes) +
                      ") holds no chunk of the layout (" + std::to_string(chunk) + " bytes)");
  }
  return static_cast<uint32_t>(std::min<uint64_t>(slots, UINT32_MAX));
}

void bind_scheduler(py::module_& m) {
  py::class_<StepMetadata, std::shared_ptr<StepMetadata>>(
      m, "StepMetadata",
      "What the scheduler side tells every rank's worker side for one step. Opaque to the "
      "engine: pass it to each Worker's start_load and queue_stores. Picklable (to_bytes / "
      "from_bytes) for worker processes.")
      .def_property_readonly("step", [](const StepMetadata& s) { return s.step; })
      .def_property_readonly(
          "loads", [](const StepMetadata& s) { return jobs_list(s.loads); },
          "Loads that start this step (kvtier.TransferJob).")
      .def_property_readonly(
          "stores", [](const StepMetadata& s) { return jobs_list(s.stores); },
          "Stores of the KV this step's forward pass writes (kvtier.TransferJob).")
      .def_property_readonly(
          "flush", [](const StepMetadata& s) { return s.flush; },
          "F10: store jobs still reading blocks this step hands to new owners.")
      .def_property_readonly(
          "empty",
          [](const StepMetadata& s) {
            return s.loads.empty() && s.stores.empty() && s.flush.empty();
          },
          "No load, store or flush this step.")
      .def(
          "to_bytes", [](const StepMetadata& s) { return py::bytes(encode_step_metadata(s)); },
          "The metadata as bytes that from_bytes() reads back.")
      .def_static(
          "from_bytes",
          [](const py::bytes& b) {
            return std::make_shared<StepMetadata>(decode_step_metadata(std::string_view(b)));
          },
          py::arg("data"))
      .def(py::pickle([](const StepMetadata& s) { return py::bytes(encode_step_metadata(s)); },
                      [](const py::bytes& b) {
                        return std::make_shared<StepMetadata>(
                            decode_step_metadata(std::string_view(b)));
                      }))
      .def("__repr__", [](const StepMetadata& s) {
        return "kvtier.StepMetadata(step=" + std::to_string(s.step) +
               ", loads=" + std::to_string(s.loads.size()) +
               ", stores=" + std::to_string(s.stores.size()) +
               ", flush=" + std::to_string(s.flush.size()) + ")";
      });

  py::class_<Scheduler>(
      m, "Scheduler",
      "The connector's scheduler side, in the engine's scheduling process: one per engine.\n\n"
      "Each step the engine's scheduler calls, in order: get_num_new_matched_tokens (a "
      "request it considers), update_state_after_alloc (after allocating its blocks), "
      "build_step_metadata (once), update_from_worker_output (every rank's WorkerOutput), "
      "request_finished. Thread-safe (calls are serialized); the GIL is released while "
      "kvtier works.")
      .def(py::init<const Config&, const std::string&, uint32_t, std::optional<uint32_t>>(),
           py::arg("config"), py::kw_only(), py::arg("model"), py::arg("world_size") = 1,
           py::arg("host_slots") = py::none(),
           "`model` is part of every cache key. `host_slots`: slots of the local host cache "
           "(default: cache.host_bytes / chunk_bytes); every Worker must use the same. "
           "Raises kvtier.Error(failed_precondition) when connector.enabled is false.")
      .def("get_num_new_matched_tokens", &Scheduler::match, py::arg("request_id"),
           py::arg("tokens"), py::arg("num_computed"), py::arg("num_prompt_tokens") = py::none(),
           py::arg("cache_salt") = "",
           "Tokens beyond `num_computed` (the device prefix cache's hit, a multiple of the "
           "block size) the host cache holds, leaving the last prompt token to compute. "
           "Returns kvtier.Match(tokens, ask_later).")
      .def("update_state_after_alloc", &Scheduler::after_alloc, py::arg("request_id"),
           py::arg("blocks"), py::arg("num_external_tokens"),
           "The engine allocated `blocks` (the request's whole block table so far) and "
           "accepts `num_external_tokens` of the last match (0: no load). Creates the load.")
      .def("build_step_metadata", &Scheduler::build, py::arg("step"), py::arg("requests"),
           "This step's jobs, given what it computes (kvtier.ScheduledRequest values).")
      .def("update_from_worker_output", &Scheduler::update, py::arg("outputs"),
           "Aggregates every rank's WorkerOutput (F9) and checks deadlines (F8). Returns "
           "kvtier.StepOutcome(loads, released). Raises kvtier.FailStop (F7) when the engine "
           "must stop, then at every later call.")
      .def("request_finished", &Scheduler::finished, py::arg("request_id"),
           "The request ended. True when a transfer of it is in flight: keep its blocks "
           "until a StepOutcome's `released` names it.")
      .def("request_preempted", &Scheduler::preempted, py::arg("request_id"),
           "The engine freed the request's blocks and will compute it again later. "
           "kvtier.Error(failed_precondition) for a request whose load is in flight.")
      .def("reset_cache", &Scheduler::reset_cache,
           "Drops every readable unpinned chunk (kvtier.Error where the index cannot).")
      .def("take_events", &Scheduler::take_events,
           "Cache events since the last call: (kind, [key hex]) tuples.")
      .def_property_readonly("degraded", &Scheduler::degraded,
                             "Why the cache is degraded (H7), or None.")
      .def_property_readonly("fail_stopped", &Scheduler::fail_stopped)
      .def_property_readonly("fail_stop_reason", &Scheduler::fail_stop_reason)
      .def_property_readonly("layout", &Scheduler::layout)
      .def("counters", &Scheduler::counters, "The connector's counters, name -> int.")
      .def("cache_counters", &Scheduler::cache_counters,
           "The local host cache's counters (slots by state, hits, evictions, ...), or None "
           "for kvtierd.")
      .def("audit", &Scheduler::audit,
           "F12 at quiescence: raises kvtier.Error naming the first leak found.");
}

}  // namespace kvtier::python
