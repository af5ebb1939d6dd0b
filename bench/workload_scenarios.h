// The request streams of `kvtier bench workload`, modelled on the workloads the field publishes
// for KV-cache offload. Each is a list of prompts with the order they must keep; a driver sends
// them `concurrency` at a time. Prompts are built ahead from a seed, so every cache mode gets
// the same requests, and an answer in a conversation's history is seeded text of the answer's
// length rather than what the model said (the model's output would make later prompts depend
// on the mode under test).
//
// - multi-round-qa: max(4, 2 × concurrency) users, each a document followed by rounds of a
//   question and an answer; round r's prompt is round r-1's prompt, its answer and a new
//   question (the shared history grows). Sent round by round over all users, as LMCache's
//   multi-round QA benchmark does.
// - long-doc-qa: max(4, 2 × concurrency) long documents, each asked 4 questions, in shuffled order.
//   Its documents are twice multi-round-qa's by default: long beside the engine's step budget
//   (engine.max_batched_tokens, 2048), as the field's long-document benchmarks are (10,000 to
//   20,000 tokens), yet short enough for a bench of minutes on a CPU.
// - no-reuse: 2 × concurrency (at least 16) prompts that share nothing: the cost of offloading
//   when nothing can be reused.
// - system-prompt: 2 × concurrency (at least 16) users' questions behind one long system prompt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::bench {

struct ScenarioRequest {
  std::string prompt;
  // The request that must have finished before this one is sent (the same user's last round).
  std::optional<size_t> after;
};

struct Scenario {
  std::string name;
  std::vector<ScenarioRequest> requests;  // in the order they are sent
  size_t max_tokens = 0;                  // generated per request
  size_t longest_prompt = 0;              // characters (= tokens: the model reads bytes)
};

// Sizes of the scenarios' pieces, in tokens (the reference model's tokens are bytes).
struct ScenarioSizes {
  size_t document_tokens = 2048;  // multi-round-qa's documents, the layerwise case's
  size_t long_doc_tokens = 4096;  // long-doc-qa's documents
  size_t question_tokens = 64;
  size_t answer_tokens = 16;           // also max_tokens
  uint32_t rounds = 3;                 // multi-round-qa
  size_t unique_tokens = 1024;         // no-reuse
  size_t system_prompt_tokens = 2048;  // system-prompt
};

// The four scenario names, in the order the bench runs them.
const std::vector<std::string>& scenario_names();

// The requests of `name` at `concurrency`, from `seed`. Throws std::invalid_argument for an
// unknown name.
Scenario make_scenario(std::string_view name, size_t concurrency, const ScenarioSizes& sizes,
                       uint64_t seed);

// multi-round-qa with exactly max(4, users) users, whatever the concurrency (the routing bench
// sizes its devices by users).
Scenario multi_round_qa_of_users(size_t users, const ScenarioSizes& sizes, uint64_t seed);

}  // namespace kvtier::bench
