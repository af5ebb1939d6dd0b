#include "chaos_requests.h"

#include <random>

#include "filler_text.h"

namespace kvtier::bench {

std::vector<ChaosRequest> build_chaos_requests(const ServeInstance& reference, uint64_t seed,
                                               const ChaosRequestShape& shape) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> documents;
  for (uint32_t d = 0; d < shape.documents; ++d)
    documents.push_back(filler_text(rng, shape.document_chars));
  std::vector<std::string> history;
  for (uint32_t c = 0; c < shape.conversations; ++c)
    history.push_back(documents[c % shape.documents]);
  std::vector<ChaosRequest> requests;
  for (uint32_t turn = 0; turn < shape.turns; ++turn) {
    for (uint32_t c = 0; c < shape.conversations; ++c) {
      ChaosRequest r;
      r.prompt = history[c] + "\nuser: " + filler_text(rng, shape.message_chars) + "\nassistant:";
      r.reference = reference.complete(r.prompt, shape.max_tokens).second;
      history[c] = r.prompt + r.reference;
      requests.push_back(std::move(r));
    }
  }
  return requests;
}

}  // namespace kvtier::bench
