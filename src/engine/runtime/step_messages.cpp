#include "kvtier/engine/step_messages.h"

namespace kvtier {
namespace {

nlohmann::json jobs_to_json(const std::vector<TransferJob>& jobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const TransferJob& job : jobs) {
    nlohmann::json chunks = nlohmann::json::array();
    for (const ChunkTransfer& c : job.chunks) {
      chunks.push_back({c.group, c.slot, c.first_block, c.blocks});
    }
    nlohmann::json keys = nlohmann::json::array();
    for (const ChunkKey& k : job.keys) keys.push_back({k.lo, k.hi});
    out.push_back({{"job", job.job},
                   {"request", job.request},
                   {"chunks", std::move(chunks)},
                   {"keys", std::move(keys)}});
  }
  return out;
}

std::vector<TransferJob> jobs_from_json(const nlohmann::json& j) {
  std::vector<TransferJob> jobs;
  for (const auto& item : j) {
    TransferJob job{.job = item.at("job").get<JobId>(),
                    .request = item.at("request").get<std::string>()};
    for (const auto& c : item.at("chunks")) {
      job.chunks.push_back(ChunkTransfer{.group = c.at(0).get<uint32_t>(),
                                         .blocks = c.at(3).get<std::vector<uint32_t>>(),
                                         .slot = c.at(1).get<uint32_t>(),
                                         .first_block = c.at(2).get<uint32_t>()});
    }
    for (const auto& k : item.value("keys", nlohmann::json::array())) {
      job.keys.push_back(ChunkKey{.lo = k.at(0).get<uint64_t>(), .hi = k.at(1).get<uint64_t>()});
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
  return StepMetadata{.step = j.at("step").get<uint64_t>(),
                      .loads = jobs_from_json(j.at("loads")),
                      .stores = jobs_from_json(j.at("stores")),
                      .flush = j.at("flush").get<std::vector<JobId>>()};
}

nlohmann::json to_json(const WorkerOutput& o) {
  nlohmann::json finished = nlohmann::json::array();
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
  WorkerOutput o{.rank = j.at("rank").get<uint32_t>()};
  for (const auto& v : j.at("finished")) {
    const int outcome = v.at(1).get<int>();
    if (outcome < 0 || outcome > static_cast<int>(Outcome::kUnprovable)) {
      throw nlohmann::json::other_error::create(501, "bad outcome", nullptr);
    }
    o.finished.push_back(JobVerdict{v.at(0).get<JobId>(), static_cast<Outcome>(outcome),
                                    v.at(2).get<std::string>()});
  }
  o.invalid_blocks = j.at("invalid").get<GroupBlocks>();
  o.fail_stop = j.at("fail_stop").get<bool>();
  o.fail_stop_reason = j.at("reason").get<std::string>();
  return o;
}

}  // namespace kvtier
