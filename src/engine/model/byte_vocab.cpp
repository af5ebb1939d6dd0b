#include "kvtier/engine/byte_vocab.h"

#include <stdexcept>

#include "kvtier/engine/model_config.h"

namespace kvtier {

std::vector<TokenId> tokenize(std::string_view text) {
  std::vector<TokenId> tokens;
  tokens.reserve(text.size());
  for (char c : text) tokens.push_back(static_cast<unsigned char>(c));
  return tokens;
}

std::string detokenize(std::span<const TokenId> tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (TokenId t : tokens) {
    if (t >= kVocabSize) {
      throw std::invalid_argument("detokenize: token " + std::to_string(t) +
                                  " is outside the byte vocabulary");
    }
    text.push_back(static_cast<char>(static_cast<unsigned char>(t)));
  }
  return text;
}

bool is_generatable(TokenId token) {
  return token == '\n' || (token >= 0x20 && token <= 0x7E);
}

TokenId greedy_token(std::span<const float> logits) {
  if (logits.size() != kVocabSize) {
    throw std::invalid_argument("greedy_token: " + std::to_string(logits.size()) +
                                " logits, the vocabulary has " + std::to_string(kVocabSize));
  }
  TokenId best = '\n';
  for (TokenId t = 0; t < kVocabSize; ++t) {
    // Strict > keeps the lowest id on ties; '\n' (10) is the lowest generatable id.
    if (is_generatable(t) && logits[t] > logits[best]) best = t;
  }
  return best;
}

}  // namespace kvtier
