#include "workload_scenarios.h"

#include <algorithm>
#include <random>
#include <stdexcept>

#include "filler_text.h"

namespace kvtier::bench {
namespace {

std::string question(std::mt19937_64& rng, const ScenarioSizes& s) {
  return "\nuser: " + filler_text(rng, s.question_tokens) + "\nassistant:";
}

Scenario multi_round_qa(size_t users, const ScenarioSizes& s, std::mt19937_64& rng) {
  Scenario out{.name = "multi-round-qa"};
  std::vector<std::string> history(users);
  for (std::string& h : history) h = filler_text(rng, s.document_tokens);
  for (uint32_t round = 0; round < s.rounds; ++round) {
    for (size_t u = 0; u < users; ++u) {
      if (round > 0) history[u] += " " + filler_text(rng, s.answer_tokens);
      history[u] += question(rng, s);
      std::optional<size_t> after;
      if (round > 0) after = out.requests.size() - users;
      out.requests.push_back({.prompt = history[u], .after = after});
    }
  }
  return out;
}

Scenario long_doc_qa(size_t concurrency, const ScenarioSizes& s, std::mt19937_64& rng) {
  Scenario out{.name = "long-doc-qa"};
  const size_t documents = std::max<size_t>(4, 2 * concurrency);  // as users, above
  for (size_t d = 0; d < documents; ++d) {
    const std::string document = filler_text(rng, s.long_doc_tokens);
    for (int q = 0; q < 4; ++q) out.requests.push_back({.prompt = document + question(rng, s)});
  }
  std::shuffle(out.requests.begin(), out.requests.end(), rng);
  return out;
}

Scenario no_reuse(size_t concurrency, const ScenarioSizes& s, std::mt19937_64& rng) {
  Scenario out{.name = "no-reuse"};
  // Eight rounds of the batch: its ratios measure a cost of a few percent, which a cell of two
  // rounds (a few seconds) cannot tell from the noise of a shared machine.
  const size_t n = std::max<size_t>(16, 8 * concurrency);
  for (size_t i = 0; i < n; ++i) {
    // A distinct first word: no two prompts share even their first block.
    out.requests.push_back(
        {.prompt = std::to_string(i) + ":" + filler_text(rng, s.unique_tokens) + question(rng, s)});
  }
  return out;
}

Scenario system_prompt(size_t concurrency, const ScenarioSizes& s, std::mt19937_64& rng) {
  Scenario out{.name = "system-prompt"};
  const std::string system = "system: " + filler_text(rng, s.system_prompt_tokens);
  const size_t n = std::max<size_t>(16, 2 * concurrency);
  for (size_t i = 0; i < n; ++i) out.requests.push_back({.prompt = system + question(rng, s)});
  return out;
}

Scenario finished(Scenario out, const ScenarioSizes& sizes) {
  out.max_tokens = sizes.answer_tokens;
  for (const ScenarioRequest& r : out.requests) {
    out.longest_prompt = std::max(out.longest_prompt, r.prompt.size());
  }
  return out;
}

}  // namespace

const std::vector<std::string>& scenario_names() {
  static const std::vector<std::string> names = {"multi-round-qa", "long-doc-qa", "no-reuse",
                                                 "system-prompt"};
  return names;
}

Scenario make_scenario(std::string_view name, size_t concurrency, const ScenarioSizes& sizes,
                       uint64_t seed) {
  std::mt19937_64 rng(seed);
  Scenario out;
  if (name == "multi-round-qa") {
    // Twice as many users as the device holds prompts (it holds `concurrency` of them): a
    // user's history has left the device when the user comes back.
    out = multi_round_qa(std::max<size_t>(4, 2 * concurrency), sizes, rng);
  } else if (name == "long-doc-qa") {
    out = long_doc_qa(concurrency, sizes, rng);
  } else if (name == "no-reuse") {
    out = no_reuse(concurrency, sizes, rng);
  } else if (name == "system-prompt") {
    out = system_prompt(concurrency, sizes, rng);
  } else {
    throw std::invalid_argument("unknown scenario '" + std::string(name) + "'");
  }
  return finished(std::move(out), sizes);
}

Scenario multi_round_qa_of_users(size_t users, const ScenarioSizes& sizes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return finished(multi_round_qa(std::max<size_t>(4, users), sizes, rng), sizes);
}

}  // namespace kvtier::bench
