#include "kvtier/engine/step_messages.h"

#include <concepts>
#include <limits>

namespace kvtier {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what, const json& j) {
  throw json::other_error::create(501, "bad message field: " + what, &j);
}

// The integer `j` holds exactly, if T holds it: a negative, fractional or out-of-range number is
// a bad message (nlohmann's get<T>() would wrap, truncate or, from a huge double, be undefined).
template <std::integral T>
T integer(const json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(v);
  } else if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v >= 0 &&
        static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return static_cast<T>(v);
    }
  }
  bad("expected an integer in [0, " + std::to_string(std::numeric_limits<T>::max()) + "]", j);
}

// `j` as a list: a message's list is an array (never a map, whose values would read as one).
const json& array(const json& j, size_t size = SIZE_MAX) {
  if (!j.is_array()) bad("expected a list", j);
  if (size != SIZE_MAX && j.size() != size) bad("expected " + std::to_string(size) + " items", j);
  return j;
}

template <std::integral T>
std::vector<T> integers(const json& j) {
  std::vector<T> out;
  for (const json& item : array(j)) out.push_back(integer<T>(item));
  return out;
}

nlohmann::json jobs_to_json(const std::vector<TransferJob>& jobs) {
  json out = json::array();
  for (const TransferJob& job : jobs) {
    json chunks = json::array();
    for (const ChunkTransfer& c : job.chunks) {
      chunks.push_back({c.group, c.slot, c.first_block, c.blocks});
    }
    json keys = json::array();
    for (const ChunkKey& k : job.keys) keys.push_back({k.lo, k.hi});
    out.push_back({{"job", job.job},
                   {"request", job.request},
                   {"chunks", std::move(chunks)},
                   {"keys", std::move(keys)}});
  }
  return out;
}

std::vector<TransferJob> jobs_from_json(const json& j) {
  std::vector<TransferJob> jobs;
  for (const json& item : array(j)) {
    TransferJob job{.job = integer<JobId>(item.at("job")),
                    .request = item.at("request").get<std::string>()};
    for (const json& c : array(item.at("chunks"))) {
      array(c, 4);
      job.chunks.push_back(ChunkTransfer{.group = integer<uint32_t>(c[0]),
                                         .blocks = integers<uint32_t>(c[3]),
                                         .slot = integer<uint32_t>(c[1]),
                                         .first_block = integer<uint32_t>(c[2])});
    }
    const json keys = item.value("keys", json::array());  // absent: a store without keys
    for (const json& k : array(keys)) {
      array(k, 2);
      job.keys.push_back(ChunkKey{.lo = integer<uint64_t>(k[0]), .hi = integer<uint64_t>(k[1])});
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

}  // namespace

nlohmann::json to_json(const StepMetadata& m) {
  return {{"step", m.step},
          {"loads", jobs_to_json(m.loads)},
          {"stores", jobs_to_json(m.stores)},
          {"flush", m.flush}};
}

StepMetadata step_metadata_from_json(const nlohmann::json& j) {
  return StepMetadata{.step = integer<uint64_t>(j.at("step")),
                      .loads = jobs_from_json(j.at("loads")),
                      .stores = jobs_from_json(j.at("stores")),
                      .flush = integers<JobId>(j.at("flush"))};
}

nlohmann::json to_json(const WorkerOutput& o) {
  json finished = json::array();
  for (const JobVerdict& v : o.finished) {
    finished.push_back({v.job, static_cast<int>(v.outcome), v.error});
  }
  return {{"rank", o.rank},
          {"finished", std::move(finished)},
          {"invalid", o.invalid_blocks},
          {"fail_stop", o.fail_stop},
          {"reason", o.fail_stop_reason}};
}

WorkerOutput worker_output_from_json(const nlohmann::json& j) {
  WorkerOutput o{.rank = integer<uint32_t>(j.at("rank"))};
  for (const json& v : array(j.at("finished"))) {
    array(v, 3);
    const int outcome = integer<int>(v[1]);
    if (outcome > static_cast<int>(Outcome::kUnprovable)) bad("no such outcome", v[1]);
    o.finished.push_back(
        JobVerdict{integer<JobId>(v[0]), static_cast<Outcome>(outcome), v[2].get<std::string>()});
  }
  for (const json& group : array(j.at("invalid"))) {
    o.invalid_blocks.push_back(integers<uint32_t>(group));
  }
  o.fail_stop = j.at("fail_stop").get<bool>();
  o.fail_stop_reason = j.at("reason").get<std::string>();
  return o;
}

json to_json(const InjectedFaultCounts& counts) {
  json j = json::object();
  visit_counters(counts, [&](std::string_view name, uint64_t value, CounterKind) {
    j[std::string(name)] = value;
  });
  return j;
}

InjectedFaultCounts injected_fault_counts_from_json(const json& j) {
  InjectedFaultCounts counts;
  visit_counters(counts, [&](std::string_view name, uint64_t& value, CounterKind) {
    value = integer<uint64_t>(j.at(std::string(name)));
  });
  return counts;
}

}  // namespace kvtier
