// filler_text: seeded prompt text for the benches that send requests to `kvtier serve` (the
// byte vocabulary takes any text; only its length and what prompts share matter).
#pragma once

#include <random>
#include <string>

namespace kvtier::bench {

// `n` characters of words drawn from `rng`.
inline std::string filler_text(std::mt19937_64& rng, size_t n) {
  static const std::string words[] = {"cache ", "block ",  "token ", "layer ", "prefix ",
                                      "host ",  "device ", "chunk ", "store ", "load "};
  std::string s;
  while (s.size() < n) s += words[rng() % 10];
  s.resize(n);
  return s;
}

}  // namespace kvtier::bench
