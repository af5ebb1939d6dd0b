// The request set of `kvtier bench chaos`: seeded multi-turn conversations whose prompts share
// prefixes (several conversations start from the same document, and each turn's prompt extends
// the previous turn's prompt and its answer), and their fault-free reference answers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "serve_instance.h"

namespace kvtier::bench {

struct ChaosRequest {
  std::string prompt;
  std::string reference;  // the answer of the fault-free reference run
};

struct ChaosRequestShape {
  uint32_t documents = 3;
  uint32_t conversations = 6;  // conversation c starts from document c % documents
  uint32_t turns = 3;
  size_t document_chars = 600;  // tokens: the tiny model's vocabulary is bytes
  size_t message_chars = 40;
  size_t max_tokens = 12;
};

// Builds the set from `seed`, asking `reference` (a fault-free instance) turn by turn: a turn's
// prompt holds the previous turns' reference answers. Throws std::runtime_error when a reference
// request fails.
std::vector<ChaosRequest> build_chaos_requests(const ServeInstance& reference, uint64_t seed,
                                               const ChaosRequestShape& shape);

}  // namespace kvtier::bench
