// The step and done messages between an engine core and its workers (step_messages.h) and the
// frames that carry them (wire.h): a value the message cannot carry exactly (a negative or
// fractional number, one out of its type's range, a tuple of the wrong length, a map where a
// list belongs) is a bad message, never a different value. The fuzz target
// fuzz/engine_messages_fuzz.cpp checks the same on arbitrary frames.
#include "kvtier/engine/step_messages.h"

#include <gtest/gtest.h>

#include "kvtier/engine/wire.h"

namespace kvtier {
namespace {

using nlohmann::json;

StepMetadata sample_step() {
  return StepMetadata{
      .step = 7,
      .loads = {TransferJob{
          .job = 1,
          .request = "r1",
          .chunks = {ChunkTransfer{.group = 0, .blocks = {1, 2, 3}, .slot = 3, .first_block = 16}},
          .keys = {ChunkKey{5, 6}}}},
      .stores = {},
      .flush = {2}};
}

WorkerOutput sample_output() {
  return WorkerOutput{.rank = 1,
                      .finished = {JobVerdict{1, Outcome::kCompleted, ""},
                                   JobVerdict{2, Outcome::kFailed, "device fault"}},
                      .invalid_blocks = {{3, 4}},
                      .fail_stop = false,
                      .fail_stop_reason = ""};
}

// The frame of `body`, decoded: what a receiving process sees.
json through_wire(const json& body) {
  Result<json> decoded = decode_message(encode_message(body));
  EXPECT_TRUE(decoded.has_value());
  return decoded.value_or(json());
}

TEST(StepMessages, RoundTripThroughTheWire) {
  const json step = through_wire({{"t", "step"}, {"meta", to_json(sample_step())}});
  EXPECT_EQ(to_json(step_metadata_from_json(step.at("meta"))), to_json(sample_step()));
  const json done = through_wire({{"t", "done"}, {"output", to_json(sample_output())}});
  EXPECT_EQ(to_json(worker_output_from_json(done.at("output"))), to_json(sample_output()));
}

TEST(StepMessages, NumbersThatAreNotExactlyTheFieldAreBadMessages) {
  // Each edit puts a value into a field that the field's type cannot hold as it is.
  const std::vector<std::pair<json::json_pointer, json>> edits = {
      {json::json_pointer("/loads/0/chunks/0/0"), -1},          // group: negative
      {json::json_pointer("/loads/0/chunks/0/1"), 4294967296},  // slot: past uint32
      {json::json_pointer("/loads/0/chunks/0/3/0"), -2},        // a block: negative
      {json::json_pointer("/loads/0/job"), 1.5},                // job: fractional
      {json::json_pointer("/step"), 1e300},                     // step: past uint64 (UB to cast)
      {json::json_pointer("/step"), -7},                        // step: negative
      {json::json_pointer("/flush/0"), -1},                     // flush: negative
      {json::json_pointer("/loads/0/keys/0/0"), -5},            // key.lo: negative
  };
  for (const auto& [where, value] : edits) {
    json meta = to_json(sample_step());
    meta[where] = value;
    EXPECT_THROW(step_metadata_from_json(through_wire({{"t", "step"}, {"meta", meta}}).at("meta")),
                 json::exception)
        << where.to_string() << " = " << value.dump();
  }
  const std::vector<std::pair<json::json_pointer, json>> output_edits = {
      {json::json_pointer("/rank"), -1},             // rank: negative
      {json::json_pointer("/finished/0/0"), -3},     // job: negative
      {json::json_pointer("/finished/0/1"), 1.9},    // outcome: fractional
      {json::json_pointer("/finished/0/1"), 1e300},  // outcome: past int (UB to cast)
      {json::json_pointer("/invalid/0/0"), -4},      // a block: negative
      {json::json_pointer("/invalid/0/1"), 1e10},    // a block: past uint32
  };
  for (const auto& [where, value] : output_edits) {
    json output = to_json(sample_output());
    output[where] = value;
    EXPECT_THROW(
        worker_output_from_json(through_wire({{"t", "done"}, {"output", output}}).at("output")),
        json::exception)
        << where.to_string() << " = " << value.dump();
  }
}

TEST(StepMessages, ShapesThatAreNotTheMessageAreBadMessages) {
  json meta = to_json(sample_step());
  meta["loads"][0]["chunks"][0].push_back(9);  // a chunk is [group, slot, first_block, blocks]
  EXPECT_THROW(step_metadata_from_json(meta), json::exception);
  meta = to_json(sample_step());
  meta["loads"] = {{"a", meta["loads"][0]}};  // a map of jobs, not a list
  EXPECT_THROW(step_metadata_from_json(meta), json::exception);
  meta = to_json(sample_step());
  meta["loads"][0]["keys"][0] = {5, 6, 7};  // a key is [lo, hi]
  EXPECT_THROW(step_metadata_from_json(meta), json::exception);
  json output = to_json(sample_output());
  output["finished"][0].push_back("extra");  // a verdict is [job, outcome, error]
  EXPECT_THROW(worker_output_from_json(output), json::exception);
}

}  // namespace
}  // namespace kvtier
